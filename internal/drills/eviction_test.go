package drills

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The eviction drill's window (issue 22 item 6): 20 per user over 6 s,
// on a Redis of 3 MB shared with a cache that writes without a TTL.
const (
	routeEvict  = "POST /api/v1/evict"
	evictLimit  = 20
	evictPeriod = 6 * time.Second
)

// TestEvictionFigures measures, for every maxmemory-policy, how many
// requests of one user pass in one 6 s window of 20 while Redis (3 MB)
// is full (of other data with a one-minute TTL, and of the keys of 8
// workers that decide for a new user each time). Under noeviction Redis
// refuses the writes that need memory: decisions degrade, none passes
// beyond the limit. Under an evicting policy the user's key is evicted
// and its count starts again, over and over; volatile-ttl evicts the
// shortest TTL first, and a sluice key's TTL is its window's. docs/runbook.md gives the
// figures and the recommendation. The policies run in parallel: the
// drill takes one window. CI runs four policies; SLUICE_DRILL_EVICTION=all
// runs all eight.
func TestEvictionFigures(t *testing.T) {
	t.Parallel()
	policies := []string{"noeviction", "allkeys-lru", "volatile-lru", "volatile-ttl"}
	if os.Getenv("SLUICE_DRILL_EVICTION") == "all" {
		policies = append(policies, "allkeys-lfu", "allkeys-random", "volatile-lfu", "volatile-random")
	}
	for _, policy := range policies {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOptions{
				server:  redistest.Config{MaxMemory: "3mb", MaxMemoryPolicy: policy},
				patient: true,
				mutate: func(c *app.Config) {
					// The store's own behaviour: a refusal repeated from
					// the cache would not ask Redis, and hide evictions
					// for as long as it is repeated.
					c.RefusalCacheSize = -1
					c.Profiles = append(c.Profiles, app.ProfileConfig{Name: "evict", Family: domain.FamilyCostly, Routes: []string{routeEvict},
						Windows: app.WindowsConfig{User: []app.WindowConfig{{Name: "burst", Limit: evictLimit, Period: evictPeriod}}}})
				},
			})
			other, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.srv.Addr()}, DisableCache: true, ForceSingleClient: true})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			fillWithTTL(t, other)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for w := range 8 { // other users, a new one per request: new keys
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						u := fmt.Sprintf("Other.User%d-%d@Example.COM", w, i)
						_, _ = r.lim.Evaluate(ctx, app.Request{Route: routeEvict, ClientIP: rawIP(w), User: u})
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			evictedBefore := infoField(t, r.srv, "stats", "evicted_keys")
			var admitted, degraded, sent atomic.Int64
			causes := map[domain.Cause]int{}
			req := app.Request{Route: routeEvict, ClientIP: rawIP(9), User: "Evicted.Target@Example.COM"}
			for end := time.Now().Add(evictPeriod); time.Now().Before(end); {
				d, _ := r.lim.Evaluate(context.Background(), req)
				sent.Add(1)
				causes[d.Cause]++
				switch {
				case d.Degraded:
					degraded.Add(1)
				case d.State == domain.Allowed:
					admitted.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			evicted := infoField(t, r.srv, "stats", "evicted_keys") - evictedBefore
			if policy == "noeviction" && admitted.Load() > evictLimit {
				t.Errorf("noeviction: %d passed in one window of %d", admitted.Load(), evictLimit)
			}
			figure(t, "eviction."+policy, "one user, 20 per 6 s, Redis 3 MB full: %d admitted in one window (%.1f× the limit), %d degraded, of %d requests (causes %v); %d keys evicted meanwhile",
				admitted.Load(), float64(admitted.Load())/evictLimit, degraded.Load(), sent.Load(), causes, evicted)
		})
	}
}

// infoField reads an integer field of an INFO section.
func infoField(t *testing.T, srv *redistest.Server, section, field string) int64 {
	t.Helper()
	v, err := srv.Do(context.Background(), "INFO", section)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string)
	for line := range strings.Lines(s) {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			n, _ := strconv.ParseInt(val, 10, 64)
			return n
		}
	}
	return 0
}

// fillWithTTL writes other data with a one-minute TTL, 200 bytes a key,
// well past 3 MB: Redis evicts (or, under noeviction, refuses) as it goes.
func fillWithTTL(t *testing.T, c rueidis.Client) {
	t.Helper()
	value := strings.Repeat("v", 200)
	for batch := range 20 {
		cmds := make(rueidis.Commands, 0, 1000)
		for i := range 1000 {
			cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("other:%d:%d", batch, i)).Value(value).Px(time.Minute).Build())
		}
		for _, res := range c.DoMulti(context.Background(), cmds...) {
			if err := res.Error(); err != nil && !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatal(err)
			}
		}
	}
}

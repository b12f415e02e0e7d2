package drills

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The memory drills' server: a small maxmemory, overfilled with keys that
// are not the Limiter's.
const (
	maxMemory   = "8mb"
	budgetMB    = 64
	fillerKeys  = 3000
	fillerBytes = 4096 // 12 MB in all: well past maxmemory
)

// TestMemoryFull fills Redis past maxmemory with the default policy,
// noeviction, under steady traffic. Redis refuses a script's first write
// that needs memory, unless the script has already written something
// (a write that frees memory, such as ZREMRANGEBYSCORE, lets the rest of
// the call write). Script v4 begins an admitted request's writes with the
// write itself (SET of a GCRA value or a compact log, ZADD on a ZSET log;
// a ZSET log is trimmed only by the first write in each eighth of its
// period, docs/adr/014), so a full Redis refuses every request that would
// consume, whatever its windows: the degraded matrix decides them, and
// a call that happens to trim first may still be counted. Either way
// nothing admitted is lost and every count stays exact. (Script v3
// trimmed every ZSET log first, so requests with a window above the
// compact bound kept being counted while the others were refused.)
func TestMemoryFull(t *testing.T) {
	r := newRig(t, rigOptions{
		server:      redistest.Config{MaxMemory: maxMemory, MaxMemoryPolicy: "noeviction"},
		mutate:      func(c *app.Config) { c.RedisMemoryBudgetMB = budgetMB },
		memoryCheck: true,
	})
	checkWarning(t, r.lim, "below the budget")
	tr := startTraffic(t, r.lim, 8, standardFlows())
	steady(t, r, time.Second)
	tr.enter(phaseOutage)
	fill(t, r.srv)
	usedAtFill := usedMemory(t, r.srv)
	time.Sleep(8 * probeInterval)
	// The breaker may be open (the refused writes are in-band failures):
	// ask until the store is called.
	var gcra domain.Decision
	waitFor(t, settle, "a GCRA-only decision the store was asked", func() bool {
		gcra = decide(t, r.lim, app.Request{Route: routeBursts, ClientIP: rawIP(0), User: "Gcra.Only@Example.COM"})
		return gcra.Cause != domain.CauseBreakerOpen
	})
	usedFull := usedMemory(t, r.srv)
	tr.enter(phaseRecovering)
	unfill(t, r.srv)
	time.Sleep(4 * probeInterval)
	tr.stop()
	tr.checkClean(t)

	if gcra.State != domain.DeniedDegraded || gcra.Cause != domain.CauseStoreUnavailable {
		t.Errorf("a GCRA-only request on a full Redis: %s (%s); want DENIED_DEGRADED, the store refusing the write", gcra.State, gcra.Cause)
	}
	full := tr.tally(phaseOutage)
	if n := full.count(func(k outcomeKey) bool { return !primaryAnswer(k) && !degradedAnswer(k) }); n > 0 {
		t.Errorf("%d decisions neither the store's nor the degraded matrix's:%s", n, full.summary())
	}
	if n := full.count(func(k outcomeKey) bool { return k.family == domain.FamilyAuth && k.state == domain.Allowed }); n > tr.workers {
		t.Errorf("%d logins (compact sliding logs only) admitted past maxmemory:%s", n, full.summary())
	}
	all := []int32{phaseSteady, phaseOutage, phaseRecovering}
	counted := ledgerCount(t, r.lim)
	adm, maybe := tr.sum(admitted, "ledger", all...), tr.sum(uncertain, "ledger", all...)
	if counted < adm || counted > adm+maybe {
		t.Errorf("the ledger holds %d units for %d admitted requests (%d uncertain)", counted, adm, maybe)
	}
	figure(t, "memoryfull", "%d decisions past maxmemory (%s): %d answered by Redis (%d ledger units counted in a ZSET window), which grew from %d to %d bytes; logins (compact windows) refused: %d; a GCRA-only request was %s (%s)",
		full.decisions, maxMemory, full.count(primaryAnswer), full.admitted["ledger"], usedAtFill, usedFull,
		full.count(func(k outcomeKey) bool {
			return k.family == domain.FamilyAuth && k.cause == domain.CauseStoreUnavailable
		}), gcra.State, gcra.Cause)
	reportPhases(t, "memoryfull", tr, map[string]int32{"full": phaseOutage})
	checkExact(t, r.lim, "Exact.After-Full@Example.COM")
}

// usedMemory reads used_memory from INFO memory.
func usedMemory(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	v, err := srv.Do(context.Background(), "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(fmt.Sprint(v)) {
		if rest, ok := strings.CutPrefix(line, "used_memory:"); ok {
			var n int64
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// TestMemoryEvicting fills Redis past maxmemory under an evicting policy:
// Redis makes room by deleting keys, and sluice's are candidates. A user
// whose counts were evicted gets a fresh quota: up to twice the limit
// passes in one window. Under allkeys-lru Redis keeps making room, so
// counting goes on while it is full. Under volatile-lru only keys with a
// TTL are candidates: every sluice key has one, so when the other data
// has none, sluice's keys are evicted first, and once they are gone Redis
// refuses writes as under noeviction. The boot check warns about either
// policy.
func TestMemoryEvicting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy string
		// refuses: with the sluice keys gone, Redis is still full and
		// refuses the next write.
		refuses bool
	}{{"allkeys-lru", false}, {"volatile-lru", true}} {
		t.Run(c.policy, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOptions{
				server:      redistest.Config{MaxMemory: maxMemory, MaxMemoryPolicy: c.policy},
				mutate:      func(c *app.Config) { c.RedisMemoryBudgetMB = budgetMB },
				memoryCheck: true,
				patient:     true,
			})
			checkWarning(t, r.lim, "may evict")
			user := checkExact(t, r.lim, "Evicted.User@Example.COM")
			keys := sluiceKeys(t, r.srv)
			if len(keys) == 0 {
				t.Fatal("no sluice key in Redis after a full quota")
			}
			fill(t, r.srv)
			writes := evictUntilGone(t, r, keys)
			if left := quotaLeft(t, r.lim, user); left != quotaLimit {
				t.Fatalf("after the eviction %d of %d reports are left; want the whole quota again", left, quotaLimit)
			}
			b := newRig(t, rigOptions{srv: r.srv, instance: "drill-2", patient: true})
			req := app.Request{Route: routeQuota, ClientIP: rawIP(0), User: user}
			refused := "no"
			if c.refuses {
				if d := decide(t, b.lim, req); d.State != domain.DeniedDegraded || d.Cause != domain.CauseStoreUnavailable {
					t.Fatalf("a write with Redis still full: %s (%s), want it refused by Redis", d.State, d.Cause)
				}
				refused = "yes, until memory was freed"
				if _, err := r.srv.Do(context.Background(), "FLUSHDB"); err != nil {
					t.Fatal(err)
				}
				waitFor(t, settle, "instance B HEALTHY", func() bool { return !b.lim.BreakerOpen() })
			}
			for i := range quotaLimit {
				if d := decide(t, b.lim, req); d.State != domain.Allowed {
					t.Fatalf("report %d after the eviction: %s (%s)", i+1, d.State, d.Cause)
				}
			}
			figure(t, "evicting."+c.policy, "the spent quota was evicted after %d writes of other data past maxmemory; %d reports then passed in one %d-report window; later writes refused: %s",
				writes, 2*quotaLimit, quotaLimit, refused)
		})
	}
}

// checkWarning asserts a boot warning containing want.
func checkWarning(t *testing.T, lim *app.Limiter, want string) {
	t.Helper()
	if !slices.ContainsFunc(lim.Warnings(), func(w string) bool { return strings.Contains(w, want) }) {
		t.Errorf("boot warnings %q do not say %q", lim.Warnings(), want)
	}
}

// fill writes fillerKeys keys without a TTL with DEBUG POPULATE, which
// ignores maxmemory: Redis is then past it.
func fill(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if _, err := srv.Do(context.Background(), "DEBUG", "POPULATE", fmt.Sprint(fillerKeys), "filler", fmt.Sprint(fillerBytes)); err != nil {
		t.Fatal(err)
	}
}

// unfill deletes the filler.
func unfill(t *testing.T, srv *redistest.Server) {
	t.Helper()
	for i := 0; i < fillerKeys; i += 500 {
		args := []string{"UNLINK"}
		for j := i; j < min(i+500, fillerKeys); j++ {
			args = append(args, fmt.Sprintf("filler:%d", j))
		}
		if _, err := srv.Do(context.Background(), args...); err != nil {
			t.Fatal(err)
		}
	}
}

// sluiceKeys lists the keys the Limiter wrote.
func sluiceKeys(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	var keys []string
	cursor := "0"
	for {
		v, err := srv.Do(context.Background(), "SCAN", cursor, "MATCH", domain.KeyPrefix+":*", "COUNT", "1000")
		if err != nil {
			t.Fatal(err)
		}
		reply := v.([]any)
		for _, k := range reply[1].([]any) {
			keys = append(keys, k.(string))
		}
		if cursor = reply[0].(string); cursor == "0" {
			return keys
		}
	}
}

// evictUntilGone writes more data, each write past maxmemory making
// Redis evict, until every key of keys has been evicted; it returns the
// number of writes.
func evictUntilGone(t *testing.T, r *rig, keys []string) int {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	value := strings.Repeat("x", fillerBytes)
	const most = 100000
	for i := 1; i <= most; i++ {
		// Under volatile-*, a write may evict every key with a TTL and
		// still find no room: Redis then refuses it (OOM).
		err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("more:%d", i)).Value(value).Build()).Error()
		if err != nil && !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatalf("write %d: %v", i, err)
		}
		if err == nil && i%20 != 0 {
			continue
		}
		n, err := c.Do(ctx, c.B().Exists().Key(keys...).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return i
		}
	}
	t.Fatalf("sluice's keys survived %d writes past maxmemory", most)
	return 0
}

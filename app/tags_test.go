package app_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// tagConfig has one profile with a window on each per-principal
// dimension: ip 3, user 4, api key 4, tenant 100, all per minute.
func tagConfig() app.Config {
	w := func(limit int64) []app.WindowConfig {
		return []app.WindowConfig{{Name: "sustained", Limit: limit, Period: time.Minute}}
	}
	return app.Config{
		HMACSecret:   testSecret,
		StoreTimeout: 2 * time.Second,
		Profiles: []app.ProfileConfig{{
			Name: "api", Family: domain.FamilyRead, Routes: []string{"GET /api"},
			Windows: app.WindowsConfig{IP: w(3), User: w(4), APIKey: w(4), Tenant: w(100)},
		}},
	}
}

// tagStores are the primaries the hash-tag rules are checked on: the
// reference store, a standalone Redis and a three-master cluster.
var tagStores = []struct {
	name string
	open func(t *testing.T) *faultyStore
}{
	{"reference", func(*testing.T) *faultyStore { return newFaulty(conformance.NewReferenceStore()) }},
	{"standalone", func(t *testing.T) *faultyStore {
		return newFaulty(openRedis(t, redis.Config{URL: redistest.StandaloneURL(t)}))
	}},
	{"cluster", func(t *testing.T) *faultyStore {
		return newFaulty(openRedis(t, redis.Config{Addrs: redistest.Cluster(t), Mode: redis.ModeCluster}))
	}},
}

func openRedis(t *testing.T, cfg redis.Config) *redis.Store {
	t.Helper()
	cfg.Time, cfg.Timeout = redis.CallerTime, 2*time.Second
	s, err := redis.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPrincipalWindowsAreExactAcrossIPs is the regression test of a filed
// defect: without a tenant, every key took the client ip as its hash tag,
// so a user's windows counted per (ip, user) and a user with a limit of 4
// got 40 requests through from 10 ips. Keys are now tagged by the most
// specific principal (docs/adr/004): a user's and an api key's windows are
// exact whatever the ip, an anonymous request's ip windows stay exact per
// ip.
func TestPrincipalWindowsAreExactAcrossIPs(t *testing.T) {
	for _, st := range tagStores {
		t.Run(st.name, func(t *testing.T) {
			// Every run gets its own identities: the shared servers keep the
			// counts of earlier runs for a minute.
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			r := newRigWith(t, tagConfig(), st.open(t), conformance.NewReferenceStore())
			passed := func(req func(ip netip.Addr) app.Request) int {
				n := 0
				for i := range 10 {
					ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
					for range 5 {
						d := r.eval(t, req(ip))
						require.NotEqual(t, domain.RejectedInvalidContext, d.State)
						require.False(t, d.Degraded, "cause %s", d.Cause)
						if d.State == domain.Allowed {
							n++
						}
					}
				}
				return n
			}
			assert.Equal(t, 4, passed(func(ip netip.Addr) app.Request {
				return app.Request{Route: "GET /api", ClientIP: ip, User: "alice-" + run}
			}), "a user without a tenant: 4 in all, whatever the ip")
			assert.Equal(t, 4, passed(func(ip netip.Addr) app.Request {
				return app.Request{Route: "GET /api", ClientIP: ip, APIKey: "key-" + run}
			}), "an api key without a tenant: 4 in all")
			assert.Equal(t, 4, passed(func(ip netip.Addr) app.Request {
				return app.Request{Route: "GET /api", ClientIP: ip, User: "bob-" + run, Tenant: "acme-" + run}
			}), "a user in a tenant: 4 in all")
			anon := 0
			for i := range 10 {
				ip := netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)})
				for range 5 {
					if d := r.eval(t, app.Request{Route: "GET /api", ClientIP: ip}); d.State == domain.Allowed {
						anon++
					}
				}
			}
			assert.Equal(t, 10*3, anon, "anonymous: 3 per ip, exact per ip")
		})
	}
}

// TestDecisionKeysShareOneSlot: every key of a decision but its ip
// windows carries the tag of its most specific principal, so a cluster
// serves them in one call; the ip windows carry the ip's own tag
// (docs/adr/013).
func TestDecisionKeysShareOneSlot(t *testing.T) {
	cases := []struct {
		name string
		req  app.Request
		tag  domain.Dimension
	}{
		{"tenant", app.Request{User: "u", APIKey: "k", Tenant: "t"}, domain.DimensionTenant},
		{"user", app.Request{User: "u", APIKey: "k"}, domain.DimensionUser},
		{"api key", app.Request{APIKey: "k"}, domain.DimensionAPIKey},
		{"anonymous", app.Request{}, domain.DimensionIP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRigWith(t, tagConfig(), newFaulty(conformance.NewReferenceStore()), conformance.NewReferenceStore())
			c.req.Route, c.req.ClientIP = "GET /api", rawIP
			r.eval(t, c.req)
			keys := r.store.seen()
			require.NotEmpty(t, keys)
			var tagged string
			for _, k := range keys {
				if dimOf(k) == domain.DimensionIP {
					assert.Equal(t, idOf(k), hashTag(k), "an ip window is tagged by its ip")
					continue
				}
				assert.Equal(t, hashTag(keys[len(keys)-1]), hashTag(k))
				if dimOf(k) == c.tag {
					tagged = k
				}
			}
			if c.tag == domain.DimensionIP {
				tagged = keys[0]
			}
			require.NotEmpty(t, tagged, "a key of the tagging dimension")
			assert.Equal(t, hashTag(tagged), idOf(tagged), "the tag is the %s's pseudonym", c.tag)
		})
	}
}

// dimOf and idOf read rl:{tag}:dimension:id:route:window.
func dimOf(key string) domain.Dimension {
	d, _ := domain.ParseDimension(keyPart(key, 2))
	return d
}

func idOf(key string) string { return keyPart(key, 3) }

func keyPart(key string, i int) string {
	parts := splitKey(key)
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

func splitKey(key string) []string {
	var out []string
	start := 0
	for i := 0; i < len(key); i++ {
		if key[i] == ':' {
			out = append(out, key[start:i])
			start = i + 1
		}
	}
	return append(out, key[start:])
}

// TestSlotSpreadOnTheCluster measures how the keys of 3000 tenantless
// users and 3000 anonymous clients spread over the harness cluster's three
// masters (the figures of docs/adr/004): each master serves about a third.
func TestSlotSpreadOnTheCluster(t *testing.T) {
	addrs := redistest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := redistest.Do(ctx, addrs[0], "CLUSTER", "SLOTS")
	require.NoError(t, err)
	owner := map[uint16]string{}
	for _, rng := range v.([]any) {
		r := rng.([]any)
		node := r[2].([]any)
		addr := fmt.Sprintf("%s:%d", node[0], node[1])
		for s := r[0].(int64); s <= r[1].(int64); s++ {
			owner[uint16(s)] = addr
		}
	}
	require.Len(t, owner, 16384, "every slot served")

	r := newRigWith(t, tagConfig(), newFaulty(conformance.NewReferenceStore()), conformance.NewReferenceStore())
	const n = 3000
	for i := range n {
		// Each user from an ip of its own: an ip window is tagged by its ip
		// (docs/adr/013), so one shared ip would put 3000 keys in one slot.
		r.eval(t, app.Request{Route: "GET /api", ClientIP: netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}), User: fmt.Sprintf("user-%d", i)})
		r.eval(t, app.Request{Route: "GET /api", ClientIP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})})
	}
	perNode := map[string]int{}
	for _, k := range r.store.seen() {
		perNode[owner[redis.Slot(k)]]++
	}
	total := len(r.store.seen())
	require.Len(t, perNode, 3)
	for node, c := range perNode {
		share := float64(c) / float64(total)
		t.Logf("master %s: %d of %d keys (%.1f%%)", node, c, total, 100*share)
		assert.InDelta(t, 1.0/3, share, 0.05, "master %s holds %.1f%% of the keys", node, 100*share)
	}
}

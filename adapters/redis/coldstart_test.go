package redis_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// coldStartSecret is a 32-byte HMAC secret in hex, for the Limiter only.
const coldStartSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// TestColdStartDegradesNothing: a Limiter on a Store fresh out of New, on a
// healthy Redis, serves its first burst of concurrent decisions from Redis.
// New has already dialled every connection the hot path uses and loaded
// the script on every node, so no decision pays for a connection or a
// script under its deadline (which used to send the first decisions of an
// auth route to the degraded matrix: 503). The proof is the connection
// count, which does not depend on the machine's speed: the burst opens no
// connection and loads no script. The store deadline is generous (2 s)
// so that a loaded test machine under the race detector cannot turn a
// slow-but-warm answer into a spurious degradation; with the production
// 50 ms the same burst degrades nothing on an idle machine.
func TestColdStartDegradesNothing(t *testing.T) {
	cases := []struct {
		name  string
		cfg   func(t *testing.T) redis.Config
		addrs func(t *testing.T) []string
	}{
		{"standalone", func(t *testing.T) redis.Config {
			return redis.Config{URL: redistest.StandaloneURL(t)}
		}, func(t *testing.T) []string { return []string{redistest.Standalone(t)} }},
		{"cluster", func(t *testing.T) redis.Config {
			return redis.Config{Addrs: redistest.Cluster(t), Mode: redis.ModeCluster}
		}, func(t *testing.T) []string { return redistest.Cluster(t) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addrs := c.addrs(t)
			cfg := c.cfg(t)
			// A name of its own tells this store's connections from those
			// of the tests running beside it.
			cfg.ClientName = "sluice-coldstart-" + tag(t)
			s := newStore(t, cfg)
			booted := connections(t, addrs, cfg.ClientName)
			for _, a := range addrs {
				require.Positive(t, booted[a], "New left node %s without a connection", a)
			}

			fallback, err := local.New(local.Config{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = fallback.Close() })
			rec := &recordertest.Memory{}
			lim, err := app.New(coldStartConfig(), app.Deps{Store: s, Fallback: fallback, Recorder: rec})
			require.NoError(t, err)
			t.Cleanup(func() { _ = lim.Close() })

			const burst = 64
			decisions := make([]domain.Decision, burst)
			errs := make([]error, burst)
			start := make(chan struct{})
			var wg sync.WaitGroup
			tenant := tag(t)
			for i := range burst {
				wg.Go(func() {
					req := app.Request{
						Route:    "POST /login",
						ClientIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}),
						User:     fmt.Sprintf("user-%d", i%8), // some users repeat: throttles too
						Tenant:   tenant,
					}
					<-start
					decisions[i], errs[i] = lim.Evaluate(t.Context(), req)
				})
			}
			close(start)
			wg.Wait()

			states, fromRedis := map[domain.State]int{}, 0
			for i, d := range decisions {
				require.NoError(t, errs[i], "decision %d", i)
				states[d.State]++
				// The auth family denies when degraded (DeniedDegraded), so
				// Allowed and Throttled can only come from Redis, or from
				// the Limiter's memory of a refusal Redis gave.
				assert.Contains(t, []domain.State{domain.Allowed, domain.Throttled}, d.State, "decision %d: %s", i, d.Cause)
				assert.False(t, d.Degraded, "decision %d degraded: %s (%s)", i, d.State, d.Cause)
				assert.Contains(t, []domain.Source{domain.SourcePrimary, domain.SourceRefusalCache}, d.Source, "decision %d", i)
				assert.NotContains(t, []domain.Cause{domain.CauseStoreTimeout, domain.CauseStoreUnavailable}, d.Cause, "decision %d", i)
				if d.Source == domain.SourcePrimary {
					fromRedis++
				}
			}
			calls := rec.StoreCalls()
			// One call per decision Redis took; on the cluster, a decision
			// whose ip keys live in another slot than its tenant's makes one
			// reservation per slot, and a release when refused
			// (docs/adr/013).
			ops := map[ports.StoreOp]int{}
			for _, call := range calls {
				ops[call.Op]++
			}
			require.Zero(t, ops[ports.OpReserve]%2, "two slots per split decision: %v", ops)
			require.Equal(t, fromRedis, ops[ports.OpEvaluate]+ops[ports.OpReserve]/2, "one decision per call, or per pair of reservations: %v", ops)
			require.Positive(t, fromRedis)
			for _, call := range calls {
				assert.NoError(t, call.Err, "store call of %s", call.Latency)
			}
			t.Logf("%d decisions: %v", burst, states)
			require.Positive(t, states[domain.Throttled], "the burst was meant to throttle some users")
			// No node may have more of this store's connections than New
			// left: fewer is fine, since on a cluster the client can close
			// its connection to a seed address once it has one per node (a
			// cold CI run once counted 2 on a seed node after New, 1 after
			// the burst).
			after := connections(t, addrs, cfg.ClientName)
			for a, n := range after {
				assert.LessOrEqual(t, n, booted[a],
					"node %s: the burst opened connections (%v after New, %v after the burst): New had not dialled every connection the hot path uses", a, booted, after)
			}
		})
	}
}

// coldStartConfig is a small Limiter configuration: one auth route whose
// degraded action is to deny (503), with a user burst of 3.
func coldStartConfig() app.Config {
	return app.Config{
		HMACSecret:   coldStartSecret,
		InstanceID:   "coldstart",
		StoreTimeout: 2 * time.Second,
		Profiles: []app.ProfileConfig{{
			Name:   "login",
			Family: domain.FamilyAuth,
			Routes: []string{"POST /login"},
			Windows: app.WindowsConfig{
				IP:     []app.WindowConfig{{Name: "burst", Limit: 10, Period: time.Second}},
				User:   []app.WindowConfig{{Name: "burst", Limit: 3, Period: time.Minute}, {Name: "sustained", Limit: 20, Period: time.Hour, Algorithm: domain.GCRA}},
				Tenant: []app.WindowConfig{{Name: "sustained", Limit: 1000, Period: time.Minute}},
			},
		}},
	}
}

// connections counts, on each node, the client connections named name.
func connections(t *testing.T, addrs []string, name string) map[string]int {
	t.Helper()
	n := make(map[string]int, len(addrs))
	for _, a := range addrs {
		list := do(t, a, "CLIENT", "LIST").(string)
		for line := range strings.Lines(list) {
			if strings.Contains(line, " name="+name+" ") {
				n[a]++
			}
		}
	}
	return n
}

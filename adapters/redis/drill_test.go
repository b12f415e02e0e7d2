package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
)

// clusterServerTime returns n stores on the harness' three-master
// cluster on the server's clock, as the instances of a fleet in
// production: they share every key and lease.
func clusterServerTime(t testing.TB, n int) []*redis.Store {
	cfg := topologies[1].cfg(t)
	cfg.Time = redis.ServerTime
	var out []*redis.Store
	for range n {
		out = append(out, newStore(t, cfg))
	}
	return out
}

// TestReservationDrillOnCluster: two instances on the cluster, 200
// goroutines released together on one tenant's tag, each making five
// reservations (retried while refused) of a concurrency window of 8 and
// two rate windows (a ZSET log and GCRA, far from full) at a random
// cost, and settling each at a random actual cost on either instance (a
// fifth of them twice). In flight never
// exceeds 8 (a counter of the test's own), every first Settle settles,
// every second one answers AlreadySettled, and at the end the rate
// windows hold exactly the sum of the actual costs and no slot is held.
func TestReservationDrillOnCluster(t *testing.T) {
	stores := clusterServerTime(t, 2)
	const goroutines, rounds, slots, big = 200, 5, 8, 100_000
	tg := tag(t)
	conc := domain.Limit{Key: "drill:{" + tg + "}:conc", Window: concurrency(slots, time.Minute), Cost: 1}
	logw := domain.Limit{Key: "drill:{" + tg + "}:log", Window: sliding(big, 10*time.Minute), Cost: 1}
	g := domain.Limit{Key: "drill:{" + tg + "}:gcra", Window: gcra(big, domain.MaxPeriod), Cost: 1}
	var inFlight, peak, admitted, refused, units, twice atomic.Int64
	var mu sync.Mutex
	var failures []string
	fail := func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(f, args...))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2026))
			<-start
			for range rounds {
				cost := 1 + rng.Int64N(3)
				limits := []domain.Limit{
					{Key: conc.Key, Window: conc.Window, Cost: cost},
					{Key: logw.Key, Window: logw.Window, Cost: cost},
					{Key: g.Key, Window: g.Window, Cost: cost},
				}
				// Until admitted: refusals come from the concurrency window.
				var lease domain.Lease
				for attempt := 0; lease.ID == ""; attempt++ {
					if attempt == 10_000 {
						fail("no slot in 10000 attempts")
						return
					}
					r, l, err := stores[rng.IntN(2)].Reserve(t.Context(), time.Now(), limits, time.Minute)
					if err != nil {
						fail("reserve: %v", err)
						return
					}
					if !r.Allowed {
						refused.Add(1)
						if r.Limiting != 0 {
							fail("refused by limit %d, not the concurrency window", r.Limiting)
						}
						time.Sleep(time.Millisecond)
					}
					lease = l
				}
				n := inFlight.Add(cost)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if n > slots {
					fail("%d slots in flight, limit %d", n, slots)
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // the request runs
				actual := rng.Int64N(13)
				inFlight.Add(-cost) // released here before the store frees it
				got, err := stores[rng.IntN(2)].Settle(t.Context(), time.Now(), lease, limits, actual)
				if err != nil || got != domain.Settled {
					fail("settle: %v %v", got, err)
					return
				}
				admitted.Add(1)
				units.Add(actual)
				if rng.IntN(5) == 0 {
					got, err := stores[rng.IntN(2)].Settle(t.Context(), time.Now(), lease, limits, rng.Int64N(13))
					if err != nil || got != domain.AlreadySettled {
						fail("second settle: %v %v", got, err)
					}
					twice.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	require.NotZero(t, admitted.Load())
	p, err := stores[0].Peek(t.Context(), time.Now(), []domain.Limit{conc, logw, g})
	require.NoError(t, err)
	u := units.Load()
	assert.Equal(t, int64(slots), p.Status(0).Remaining, "no slot held")
	assert.Equal(t, big-u, p.Status(1).Remaining, "the log holds the actual costs")
	assert.Equal(t, big-u, p.Status(2).Remaining, "GCRA holds the actual costs")
	t.Logf("cluster drill: %d goroutines × %d reservations on two instances: %d admitted, %d refusals by the concurrency window of %d (peak in flight %d), %d settled twice, %d units settled; final counts exact",
		goroutines, rounds, admitted.Load(), refused.Load(), slots, peak.Load(), twice.Load(), u)
}

// TestKilledHolderSlotComesBack: an instance reserves a concurrency slot
// (and 2 units of a rate window) on the cluster and is killed (its store
// closed, the lease never settled nor renewed); another instance polls
// until the slot is back. It comes back once the lease's TTL has passed
// on the server's clock, never before, and within a bound; the rate
// units stay counted at the cost reserved. The figure is logged.
func TestKilledHolderSlotComesBack(t *testing.T) {
	for _, ttl := range []time.Duration{200 * time.Millisecond, time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			stores := clusterServerTime(t, 2)
			holder, other := stores[0], stores[1]
			tg := tag(t)
			limits := []domain.Limit{
				{Key: "kill:{" + tg + "}:conc", Window: concurrency(1, ttl), Cost: 1},
				{Key: "kill:{" + tg + "}:rate", Window: sliding(10, time.Hour), Cost: 2},
			}
			r, dead, err := holder.Reserve(t.Context(), time.Now(), limits, ttl)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			require.NoError(t, holder.Close()) // killed: nothing will settle it

			one := []domain.Limit{limits[0], {Key: limits[1].Key, Window: limits[1].Window, Cost: 1}}
			deadline := time.Now().Add(ttl + 10*time.Second)
			var back domain.Lease
			polls := 0
			for time.Now().Before(deadline) {
				polls++
				r, l, err := other.Reserve(t.Context(), time.Now(), one, time.Minute)
				require.NoError(t, err)
				if r.Allowed {
					back = l
					break
				}
				require.Equal(t, 0, r.Limiting, "refused by the concurrency window only")
				require.LessOrEqual(t, r.RetryAfter, ttl, "a refusal waits at most the TTL")
				time.Sleep(2 * time.Millisecond)
			}
			require.NotEmpty(t, back.ID, "the slot did not come back within %s", ttl+10*time.Second)
			took := back.At.Sub(dead.At) // both the server's instants
			assert.GreaterOrEqual(t, took, ttl, "the slot came back before the lease expired")
			p, err := other.Peek(t.Context(), time.Now(), one[1:])
			require.NoError(t, err)
			assert.Equal(t, int64(10-2-1), p.Remaining, "the killed holder's units stay counted at the cost reserved")
			t.Logf("killed holder, lease TTL %s: slot back %s after the reservation (server clock), %s after the expiry, %d polls",
				ttl, took, took-ttl, polls)
		})
	}
}

// BenchmarkReserveSettle measures a reservation against a decision, side
// by side in one run, on the harness' servers: Evaluate of two compact
// logs (the ADR-002 dual layer), Reserve then Settle of the same windows
// (at the cost reserved, and at 0: a full refund), and Reserve then Settle
// with a concurrency window added. It reports redis-µs/op (Redis' own
// time of the op's script calls, one or two) beside redis-µs/call.
//
//	go test -run '^$' -bench BenchmarkReserveSettle -benchtime 5000x -benchmem ./adapters/redis/
func BenchmarkReserveSettle(b *testing.B) {
	for _, topo := range topologies {
		b.Run(topo.name, func(b *testing.B) {
			cfg := topo.cfg(b)
			cfg.Time = redis.ServerTime
			s := newStore(b, cfg)
			addrs := topoAddrs(b, topo)
			limitsOf := func(tg string, withConc bool) []domain.Limit {
				ls := []domain.Limit{
					{Key: "rs:{" + tg + "}:tenant", Window: sliding(1000, 100*time.Millisecond), Cost: 1},
					{Key: "rs:{" + tg + "}:user", Window: sliding(1000, 100*time.Millisecond), Cost: 1},
				}
				if withConc {
					ls = append(ls, domain.Limit{Key: "rs:{" + tg + "}:conc", Window: concurrency(1000, time.Minute), Cost: 1})
				}
				return ls
			}
			ops := []struct {
				name     string
				withConc bool
				op       func(ctx context.Context, limits []domain.Limit) error
			}{
				{"evaluate", false, func(ctx context.Context, limits []domain.Limit) error {
					r, err := s.Evaluate(ctx, time.Now(), limits)
					return admittedOrErr(r, err)
				}},
				{"reserve+settle", false, func(ctx context.Context, limits []domain.Limit) error {
					return reserveSettle(ctx, s, limits, 1)
				}},
				{"reserve+refund", false, func(ctx context.Context, limits []domain.Limit) error {
					return reserveSettle(ctx, s, limits, 0)
				}},
				{"reserve+settle+conc", true, func(ctx context.Context, limits []domain.Limit) error {
					return reserveSettle(ctx, s, limits, 1)
				}},
			}
			for _, par := range []int{1, 16} {
				for _, o := range ops {
					b.Run(fmt.Sprintf("%s/par=%d", o.name, par), func(b *testing.B) {
						sets := make([][]domain.Limit, par*rotation)
						for i := range sets {
							sets[i] = limitsOf(tag(b), o.withConc)
						}
						benchOp(b, addrs, par, func(ctx context.Context, g, i int) error {
							return o.op(ctx, sets[g*rotation+i%rotation])
						})
					})
				}
			}
		})
	}
}

func admittedOrErr(r domain.Result, err error) error {
	if err == nil && !r.Allowed {
		err = fmt.Errorf("refused: %+v", r)
	}
	return err
}

func reserveSettle(ctx context.Context, s *redis.Store, limits []domain.Limit, actual int64) error {
	r, lease, err := s.Reserve(ctx, time.Now(), limits, time.Minute)
	if err := admittedOrErr(r, err); err != nil {
		return err
	}
	got, err := s.Settle(ctx, time.Now(), lease, limits, actual)
	if err == nil && got != domain.Settled {
		err = fmt.Errorf("settle: %v", got)
	}
	return err
}

// benchOp runs op b.N times from par goroutines under one long deadline
// and reports decisions/s, the p50 and p99 latency of an op, and Redis'
// own time per op and per script call.
func benchOp(b *testing.B, addrs []string, par int, op func(ctx context.Context, g, i int) error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	before := scriptStats(b, addrs)
	lat := make([]time.Duration, b.N)
	var next, failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := range par {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				err := op(ctx, g, int(i))
				lat[i] = time.Since(t0)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of %d ops failed; first: %v", n, b.N, firstErr.Load())
	}
	after := scriptStats(b, addrs)
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(after.usec-before.usec)/float64(b.N), "redis-µs/op")
	reportRedisCost(b, before, after)
}

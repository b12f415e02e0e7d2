package redis_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
)

// BenchmarkEvaluate measures Evaluate on the harness' Redis for the request
// shapes sluice sends (one key, the ADR-002 dual layer, the nine windows of
// a fully authenticated request) at several numbers of concurrent callers.
// Every caller is its own tenant (hash tag), and every call is admitted, so
// each one writes: the expensive path.
//
// Besides ns/op (wall time per decision across all callers) it reports
// decisions/s and the p50 and p99 latency of one call as a caller sees it.
func BenchmarkEvaluate(b *testing.B) {
	for _, topo := range topologies {
		b.Run(topo.name, func(b *testing.B) {
			s := newStore(b, topo.cfg(b))
			for _, nkeys := range []int{1, 2, 9} {
				for _, par := range []int{1, 16, 64, 256} {
					b.Run(fmt.Sprintf("keys=%d/par=%d", nkeys, par), func(b *testing.B) {
						benchEvaluate(b, s, nkeys, par)
					})
				}
			}
		})
	}
}

// benchLimits returns the limits of one caller: sliding logs for the first
// two (tenant and user, as ADR-002), then alternating GCRA and sliding log,
// all too large to refuse.
func benchLimits(tg string, nkeys int) []domain.Limit {
	limits := make([]domain.Limit, nkeys)
	for i := range limits {
		// A one-second log never reaches MaxSlidingLogLimit at the rates a
		// shared two-core machine sustains, so every call is admitted.
		w := domain.Window{Name: "w", Limit: domain.MaxSlidingLogLimit, Period: time.Second, Algorithm: domain.SlidingLog}
		if i >= 2 && i%2 == 0 {
			w = domain.Window{Name: "w", Limit: domain.MaxLimit, Period: time.Hour, Algorithm: domain.GCRA}
		}
		limits[i] = domain.Limit{Key: fmt.Sprintf("bench:{%s}:%d", tg, i), Window: w, Cost: 1}
	}
	return limits
}

func benchEvaluate(b *testing.B, s *redis.Store, nkeys, par int) {
	ctx := context.Background()
	sets := make([][]domain.Limit, par)
	for g := range sets {
		sets[g] = benchLimits(tag(b), nkeys)
	}
	b.Cleanup(func() {
		for _, set := range sets {
			for _, l := range set {
				_ = s.Reset(ctx, l.Key)
			}
		}
	})
	lat := make([]time.Duration, b.N)
	var next, failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := range par {
		wg.Go(func() {
			limits := sets[g]
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				r, err := s.Evaluate(ctx, t0, limits)
				lat[i] = time.Since(t0)
				if err != nil || !r.Allowed {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of %d decisions failed or were refused; first: %v", n, b.N, firstErr.Load())
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

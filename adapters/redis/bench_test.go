package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
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

// BenchmarkScriptTime measures what reading the server's clock costs the
// script: the same admitted calls on ServerTime (TIME inside the script)
// and on CallerTime, one caller at a time on a dedicated server, with
// Redis' own cost per call (usec_per_call of EVALSHA, INFO commandstats)
// as the redis-µs/call metric. docs/adr/003 quotes it.
func BenchmarkScriptTime(b *testing.B) {
	for _, ts := range []redis.TimeSource{redis.ServerTime, redis.CallerTime} {
		for _, nkeys := range []int{1, 2, 9} {
			b.Run(fmt.Sprintf("%s/keys=%d", ts, nkeys), func(b *testing.B) {
				srv := redistest.NewServer(b)
				s := newStore(b, redis.Config{Addrs: []string{srv.Addr()}, Time: ts, Timeout: testTimeout})
				do(b, srv.Addr(), "CONFIG", "RESETSTAT")
				benchEvaluate(b, s, nkeys, 1)
				reportRedisCost(b, []string{srv.Addr()})
			})
		}
	}
}

// BenchmarkTimeInAScript isolates the cost of TIME inside a script, the
// part of BenchmarkScriptTime's difference that noise hides: an empty
// script against one that reads TIME as the sliding-log script does.
func BenchmarkTimeInAScript(b *testing.B) {
	scripts := map[string]string{
		"without": "return 1",
		"with":    "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) return 1",
	}
	for _, name := range []string{"without", "with"} {
		b.Run(name, func(b *testing.B) {
			srv := redistest.NewServer(b)
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
			require.NoError(b, err)
			defer c.Close()
			script := rueidis.NewLuaScript(scripts[name])
			require.NoError(b, script.Exec(b.Context(), c, []string{"k"}, nil).Error())
			do(b, srv.Addr(), "CONFIG", "RESETSTAT")
			b.ResetTimer()
			for range b.N {
				if err := script.Exec(b.Context(), c, []string{"k"}, nil).Error(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportRedisCost(b, []string{srv.Addr()})
		})
	}
}

// reportRedisCost reports Redis' own time per script call (EVAL and
// EVALSHA, summed over addrs) since the last CONFIG RESETSTAT.
func reportRedisCost(b *testing.B, addrs []string) {
	b.Helper()
	var calls, usec int64
	for _, a := range addrs {
		stats := do(b, a, "INFO", "commandstats").(string)
		for line := range strings.Lines(stats) {
			if !strings.HasPrefix(line, "cmdstat_eval") {
				continue
			}
			for f := range strings.SplitSeq(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls += n
				case "usec":
					usec += n
				}
			}
		}
	}
	if calls == 0 {
		b.Fatalf("no script call reached %v", addrs)
	}
	b.ReportMetric(float64(usec)/float64(calls), "redis-µs/call")
}

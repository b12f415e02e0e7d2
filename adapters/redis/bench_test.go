package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Benchmarks of the Redis store. Each reports, besides ns/op (wall time
// per decision across all callers), decisions/s, the p50 and p99 latency of
// one call as its caller sees it, and redis-µs/call: Redis' own time per
// script call (usec_per_call of EVAL and EVALSHA in INFO commandstats,
// summed over the nodes, for the calls of the benchmark). Every call is
// admitted, so each one writes: the expensive path. Compare within one run:
//
//	go test -run '^$' -bench 'BenchmarkEvaluate$' -benchtime 20000x -count 3 ./adapters/redis/

// shape is a request the benchmarks send: n keys of one tenant.
type shape struct {
	name string
	n    int
	// gcra makes every window GCRA; mixed alternates sliding logs and GCRA
	// after two sliding logs (tenant and user, as ADR-002); else every
	// window is a sliding log.
	gcra, mixed bool
}

var shapes = []shape{
	{name: "log1", n: 1},
	{name: "log2", n: 2},
	{name: "log9", n: 9},
	{name: "gcra9", n: 9, gcra: true},
	{name: "mixed9", n: 9, mixed: true},
}

// rotation is how many key sets (tenants) each caller cycles through, so
// that a closed loop on a two-core machine never fills a window: a sliding
// log of 1000 per 100 ms then holds a few tens of units at one caller and
// about one at 64.
const rotation = 16

// benchLimits returns the limits of one tenant of s: sliding logs of 1000
// per 100 ms (stored compactly) and GCRA windows too large to refuse.
func benchLimits(tg string, s shape) []domain.Limit {
	limits := make([]domain.Limit, s.n)
	for i := range limits {
		w := domain.Window{Name: "w", Limit: 1000, Period: 100 * time.Millisecond, Algorithm: domain.SlidingLog}
		if s.gcra || (s.mixed && i >= 2 && i%2 == 0) {
			w = domain.Window{Name: "w", Limit: domain.MaxLimit, Period: time.Hour, Algorithm: domain.GCRA}
		}
		limits[i] = domain.Limit{Key: fmt.Sprintf("bench:{%s}:%d", tg, i), Window: w, Cost: 1}
	}
	return limits
}

// BenchmarkEvaluate measures Evaluate on the harness' servers for the
// request shapes sluice sends (one key, the ADR-002 dual layer, nine
// windows), at one caller and at 64.
func BenchmarkEvaluate(b *testing.B) {
	for _, topo := range topologies {
		b.Run(topo.name, func(b *testing.B) {
			cfg := topo.cfg(b)
			cfg.Time = redis.ServerTime // as in production
			s := newStore(b, cfg)
			addrs := topoAddrs(b, topo)
			for _, sh := range shapes {
				for _, par := range []int{1, 64} {
					b.Run(fmt.Sprintf("%s/par=%d", sh.name, par), func(b *testing.B) {
						benchEvaluate(b, s, addrs, sh, par)
					})
				}
			}
		})
	}
}

// BenchmarkEncodings compares the compact sliding log with the ZSET one
// (Config.Log: LogZSet) on nine keys.
func BenchmarkEncodings(b *testing.B) {
	for _, enc := range []redis.LogEncoding{redis.LogCompact, redis.LogZSet} {
		cfg := topologies[0].cfg(b)
		cfg.Time, cfg.Log = redis.ServerTime, enc
		s := newStore(b, cfg)
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/par=%d", enc, par), func(b *testing.B) {
				benchEvaluate(b, s, topoAddrs(b, topologies[0]), shapes[2], par)
			})
		}
	}
}

// BenchmarkClientOptions measures rueidis' pipelining options on one and
// nine keys, at one caller and at 64. The store's choice (AlwaysPipelining,
// one connection per node, no flush delay) keeps a missed deadline from
// closing the connection and makes cancellation prompt;
// DisableAutoPipelining and plain auto-pipelining (a lone caller writes and
// reads the socket itself, under a socket deadline) give up both and are
// measured for comparison only. The load of a shared machine drifts: for a
// choice, compare options run in alternation, not one after the other.
func BenchmarkClientOptions(b *testing.B) {
	options := []struct {
		name string
		f    func(*rueidis.ClientOption)
	}{
		{"store", func(*rueidis.ClientOption) {}}, // one connection per node
		{"conns=2", func(o *rueidis.ClientOption) { o.PipelineMultiplex = 1 }},
		{"conns=4", func(o *rueidis.ClientOption) { o.PipelineMultiplex = 2 }},
		{"flushdelay=20us", func(o *rueidis.ClientOption) { o.MaxFlushDelay = 20 * time.Microsecond }},
		{"flushdelay=100us", func(o *rueidis.ClientOption) { o.MaxFlushDelay = 100 * time.Microsecond }},
		{"autopipelining", func(o *rueidis.ClientOption) { o.AlwaysPipelining = false }},
		{"nopipelining", func(o *rueidis.ClientOption) { o.DisableAutoPipelining = true }},
	}
	for _, opt := range options {
		cfg := topologies[0].cfg(b)
		cfg.Time = redis.ServerTime
		s := newStore(b, cfg, redis.WithClientOption(opt.f))
		for _, sh := range []shape{shapes[0], shapes[2]} {
			for _, par := range []int{1, 64} {
				b.Run(fmt.Sprintf("%s/%s/par=%d", opt.name, sh.name, par), func(b *testing.B) {
					benchEvaluate(b, s, topoAddrs(b, topologies[0]), sh, par)
				})
			}
		}
	}
}

// topoAddrs returns the nodes of a topology, whose commandstats the
// benchmarks read.
func topoAddrs(b *testing.B, topo topology) []string {
	if topo.name == "cluster" {
		return redistest.Cluster(b)
	}
	return []string{redistest.Standalone(b)}
}

func benchEvaluate(b *testing.B, s *redis.Store, addrs []string, sh shape, par int) {
	// A deadline, as app.Limiter gives every decision; one for the whole
	// run, so that the benchmark measures the store and not a timer.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	sets := make([][][]domain.Limit, par)
	for g := range sets {
		for range rotation {
			sets[g] = append(sets[g], benchLimits(tag(b), sh))
		}
	}
	b.Cleanup(func() {
		for _, caller := range sets {
			for _, set := range caller {
				for _, l := range set {
					_ = s.Reset(context.Background(), l.Key)
				}
			}
		}
	})
	before := scriptStats(b, addrs)
	lat := make([]time.Duration, b.N)
	cpu0 := processCPU(b)
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
				r, err := s.Evaluate(ctx, t0, sets[g][i%rotation])
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
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of %d decisions failed or were refused; first: %v", n, b.N, firstErr.Load())
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "client-cpu-µs/op")
	reportRedisCost(b, before, scriptStats(b, addrs))
}

// processCPU is the processor time this process (the callers, the store
// and rueidis; not Redis, a process of its own) has used so far: what
// issue 17 calls the client CPU of a decision, once divided by the
// decisions.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stats is what INFO commandstats says of the script commands (EVAL and
// EVALSHA) summed over some nodes.
type stats struct{ calls, usec int64 }

func scriptStats(b *testing.B, addrs []string) stats {
	b.Helper()
	var st stats
	for _, a := range addrs {
		info := do(b, a, "INFO", "commandstats").(string)
		for line := range strings.Lines(info) {
			if !strings.HasPrefix(line, "cmdstat_eval") {
				continue
			}
			for f := range strings.SplitSeq(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.calls += n
				case "usec":
					st.usec += n
				}
			}
		}
	}
	return st
}

// reportRedisCost reports Redis' own time per script call between two
// readings.
func reportRedisCost(b *testing.B, before, after stats) {
	b.Helper()
	calls := after.calls - before.calls
	if calls <= 0 {
		b.Fatalf("no script call reached the servers")
	}
	b.ReportMetric(float64(after.usec-before.usec)/float64(calls), "redis-µs/call")
}

// BenchmarkScriptTime measures what reading the server's clock costs the
// script: the same admitted calls on ServerTime (TIME inside the script)
// and on CallerTime, one caller on a dedicated server. docs/adr/003 quotes
// it.
func BenchmarkScriptTime(b *testing.B) {
	for _, ts := range []redis.TimeSource{redis.ServerTime, redis.CallerTime} {
		for _, sh := range []shape{shapes[0], shapes[2]} {
			b.Run(fmt.Sprintf("%s/%s", ts, sh.name), func(b *testing.B) {
				srv := redistest.NewServer(b)
				s := newStore(b, redis.Config{Addrs: []string{srv.Addr()}, Time: ts, Timeout: testTimeout})
				benchEvaluate(b, s, []string{srv.Addr()}, sh, 1)
			})
		}
	}
}

// BenchmarkTimeInAScript isolates the cost of TIME inside a script, the
// part of BenchmarkScriptTime's difference that noise hides: an empty
// script against one that reads TIME as the store's script does.
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
			before := scriptStats(b, []string{srv.Addr()})
			b.ResetTimer()
			for range b.N {
				if err := script.Exec(b.Context(), c, []string{"k"}, nil).Error(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportRedisCost(b, before, scriptStats(b, []string{srv.Addr()}))
		})
	}
}

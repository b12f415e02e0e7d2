package local

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// The benchmark shapes, shared with the comparisons against other limiters
// (bench/): a store holding benchKeys keys, one of which each decision
// checks, or the nine keys of sluice's largest decision (four dimensions
// times two windows plus the tenant-global key); both algorithms; one
// goroutine, or GOMAXPROCS goroutines on keys of their own.
const benchKeys = 10_000

// benchWindows are the windows the benchmarks run: limits and steps chosen
// so that the steady state is an allowed decision (the common case) with a
// sliding log of about ten units, and so that now advances by 100µs per
// decision, like a busy key: the store records a new latest instant every
// tenth decision and sweeps once per 600000.
var benchWindows = []struct {
	name string
	w    domain.Window
	step time.Duration // how far now advances per decision on one key
}{
	{"sliding_log", sliding(10, time.Millisecond), 100 * time.Microsecond},
	{"gcra", gcra(10, time.Millisecond), 100 * time.Microsecond},
}

func benchKey(i int) string { return fmt.Sprintf("rl:{tenant}:user:%05d:route:burst", i) }

// benchStore returns a store holding benchKeys keys under w, every one in
// ristretto's cache.
func benchStore(b *testing.B, w domain.Window) *Store {
	st := newStore(b, Config{})
	l := []domain.Limit{lim("", w, 1)}
	for i := range benchKeys {
		l[0].Key = benchKey(i)
		if _, err := st.Evaluate(b.Context(), t0, l); err != nil {
			b.Fatal(err)
		}
	}
	st.Wait()
	return st
}

// benchLimits returns the limits of one decision: n keys of the store's
// benchKeys, starting at key first.
func benchLimits(first, n int, w domain.Window) []domain.Limit {
	limits := make([]domain.Limit, n)
	for i := range limits {
		limits[i] = lim(benchKey((first+i*1117)%benchKeys), w, 1)
	}
	return limits
}

func benchEvaluate(b *testing.B, keys int) {
	for _, bw := range benchWindows {
		b.Run(bw.name+"/serial", func(b *testing.B) {
			st := benchStore(b, bw.w)
			limits := benchLimits(4242, keys, bw.w)
			ctx := b.Context()
			now := t0
			// Warm up: the keys' entries are in the cache and their logs
			// grown to their steady size, so the loop measures the steady
			// state.
			for range 100 {
				now = now.Add(bw.step)
				_, _ = st.Evaluate(ctx, now, limits)
			}
			st.Wait()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				now = now.Add(bw.step)
				r, err := st.Evaluate(ctx, now, limits)
				if err != nil || !r.Allowed {
					b.Fatalf("Evaluate = %+v, %v", r.Allowed, err)
				}
			}
		})
		b.Run(bw.name+"/parallel", func(b *testing.B) {
			st := benchStore(b, bw.w)
			ctx := b.Context()
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Keys of its own per goroutine: distinct users hitting the
				// store at once.
				limits := benchLimits(int(worker.Add(1))*keys, keys, bw.w)
				now := t0
				for pb.Next() {
					now = now.Add(bw.step)
					if _, err := st.Evaluate(ctx, now, limits); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkEvaluate1Key measures a one-key decision on one of 10k keys.
func BenchmarkEvaluate1Key(b *testing.B) { benchEvaluate(b, 1) }

// BenchmarkEvaluate9Keys measures the largest decision sluice sends: four
// dimensions times two windows plus the tenant-global key.
func BenchmarkEvaluate9Keys(b *testing.B) { benchEvaluate(b, 9) }

// BenchmarkPeek1Key measures a one-key Peek on one of 10k keys.
func BenchmarkPeek1Key(b *testing.B) {
	w := gcra(10, time.Second)
	st := benchStore(b, w)
	limits := benchLimits(4242, 1, w)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.Peek(ctx, t0, limits); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvaluateNewKeys measures the slow path: every decision creates
// its key (a directory insert and a ristretto Set).
func BenchmarkEvaluateNewKeys(b *testing.B) {
	st := newStore(b, Config{})
	w := gcra(10, time.Second)
	ctx := b.Context()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("rl:{tenant}:ip:%016x:route:burst", i)
	}
	limits := []domain.Limit{lim("", w, 1)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// Keys repeat after 65536 decisions, a second apart, so most of
		// them are new to the store (or forgotten as idle).
		limits[0].Key = keys[i%len(keys)]
		if _, err := st.Evaluate(ctx, t0.Add(time.Duration(i)*time.Second), limits); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkBaseline is the floor the store is measured against, in the same
// run: the domain algorithm of one key under one mutex, with no index, no
// validation, no cache and no domain.Result. Evaluate1Key over Baseline is
// the cost of being a bounded, concurrent, all-or-nothing store.
func BenchmarkBaseline(b *testing.B) {
	for _, bw := range benchWindows {
		b.Run(bw.name, func(b *testing.B) {
			var mu sync.Mutex
			var log domain.LogState
			var g domain.GCRAState
			now := t0.UnixMicro()
			step := int64(bw.step / time.Microsecond)
			b.ReportAllocs()
			for b.Loop() {
				now += step
				mu.Lock()
				var st domain.LimitStatus
				if bw.w.Algorithm == domain.GCRA {
					st = g.Check(now, bw.w, 1)
					if st.Allowed {
						st = g.Committed(now, bw.w, 1, st)
					}
				} else {
					st = log.Check(now, bw.w, 1)
					if st.Allowed {
						st = log.Committed(now, bw.w, 1, st)
					}
				}
				mu.Unlock()
				if !st.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}

// The nine windows of sluice's largest sliding-log decision: four
// principals (ip, user, api key, tenant) with a burst and a sustained
// window each, and the tenant-global window. Now advances by 100 µs per
// decision: the burst logs hold about 10 units, the sustained ones and the
// global one about 100 (plus what S5's grace keeps).
var (
	nineBurst     = domain.Window{Name: "burst", Limit: 20, Period: time.Millisecond, Algorithm: domain.SlidingLog}
	nineSustained = domain.Window{Name: "sustained", Limit: 200, Period: 10 * time.Millisecond, Algorithm: domain.SlidingLog}
	nineGlobal    = domain.Window{Name: "global", Limit: 400, Period: 10 * time.Millisecond, Algorithm: domain.SlidingLog}
	nineDims      = [...]string{"ip", "user", "key", "tenant"}
)

// nineWindows returns the nine limits of principal set p: with shared
// logs (docs/adr/015), each principal's two windows name one key (after
// its sustained window, the longest), 5 keys; otherwise a key per window,
// 9 keys.
func nineWindows(p int, shared bool) []domain.Limit {
	limits := make([]domain.Limit, 0, 9)
	for _, d := range nineDims {
		burst := fmt.Sprintf("rl:{t%05d}:%s:%05d:burst", p, d, p)
		sustained := fmt.Sprintf("rl:{t%05d}:%s:%05d:sustained", p, d, p)
		if shared {
			burst = sustained
		}
		limits = append(limits, lim(burst, nineBurst, 1), lim(sustained, nineSustained, 1))
	}
	return append(limits, lim(fmt.Sprintf("rl:{t%05d}:__global__", p), nineGlobal, 1))
}

// BenchmarkEvaluate9WindowsLayout measures the nine-window sliding-log
// decision, one goroutine, on a store holding the windows of 1 000
// principal sets, in both layouts: a key per window (9 keys) and shared
// logs (5 keys, docs/adr/015). The shared layout looks up, locks and
// writes each key once.
func BenchmarkEvaluate9WindowsLayout(b *testing.B) {
	const population = 1000
	for _, layout := range []struct {
		name   string
		shared bool
	}{{"per_window", false}, {"shared", true}} {
		b.Run(layout.name, func(b *testing.B) {
			st := newStore(b, Config{})
			ctx := b.Context()
			for p := range population {
				if _, err := st.Evaluate(ctx, t0, nineWindows(p, layout.shared)); err != nil {
					b.Fatal(err)
				}
			}
			limits := nineWindows(population/2, layout.shared)
			now := t0
			for range 1000 {
				now = now.Add(100 * time.Microsecond)
				_, _ = st.Evaluate(ctx, now, limits)
			}
			st.Wait()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				now = now.Add(100 * time.Microsecond)
				r, err := st.Evaluate(ctx, now, limits)
				if err != nil || !r.Allowed {
					b.Fatalf("Evaluate = %+v, %v", r.Allowed, err)
				}
			}
		})
	}
}

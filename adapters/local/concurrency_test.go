package local

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// Caches for the concurrency tests. tinyCache fits no entry at all, so
// ristretto refuses every Set and every key lives in the pending list;
// smallCache fits a handful, so ristretto admits, evicts and refuses all the
// time. Both keep enough room outside ristretto (over 20 MiB) that no live
// state may be dropped, with ristretto's metrics on.
var (
	tinyCache  = Config{MaxMemory: 32 << 20, cacheCost: 1}
	smallCache = Config{MaxMemory: 32 << 20, cacheCost: 4 << 10}
)

// cacheName names a configuration in subtests.
func cacheName(cfg Config) string {
	switch {
	case cfg.cacheCost == 0:
		return "default cache"
	case cfg.cacheCost == 1:
		return "tiny cache"
	}
	return fmt.Sprintf("cache of %d bytes", cfg.cacheCost)
}

// TestOneKeyUnderContention releases 64 goroutines together on one key with
// a limit of 50: exactly 50 requests pass, whatever ristretto does with the
// key's Sets.
func TestOneKeyUnderContention(t *testing.T) {
	const workers, limit = 64, 50
	configs := []struct {
		name string
		cfg  Config
	}{{"default cache", Config{}}, {"tiny cache", tinyCache}, {"small cache", smallCache}}
	for _, c := range configs {
		for _, w := range []domain.Window{sliding(limit, time.Minute), gcra(limit, time.Minute)} {
			t.Run(c.name+"/"+w.Algorithm.String(), func(t *testing.T) {
				st := newStore(t, c.cfg)
				l := []domain.Limit{lim("hot", w, 1)}
				var passed atomic.Int64
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						<-start
						for range 4 {
							// One instant for all: nothing leaves the window
							// and GCRA refills nothing during the test.
							r, err := st.Evaluate(t.Context(), at(0), l)
							if !assert.NoError(t, err) {
								return
							}
							if r.Allowed {
								passed.Add(1)
							}
						}
					})
				}
				close(start)
				wg.Wait()
				assert.Equal(t, int64(limit), passed.Load())
				st.Wait() // ristretto has decided on the key's Set
				stats := st.Stats()
				assert.Zero(t, stats.Dropped, "no state may be dropped with pending room left")
				if c.cfg == tinyCache {
					assert.NotZero(t, stats.Rejected+stats.SetsDropped, "the tiny cache should refuse the key's Set")
				}
			})
		}
	}
}

// TestRefusedAndEvictedSetsNeverForkAKey drives many goroutines over many
// keys through a cache that fits a handful of entries, so that ristretto
// refuses, evicts and drops Sets throughout, and checks that no key ever
// admits more than its limit: a forked or lost state would admit more.
func TestRefusedAndEvictedSetsNeverForkAKey(t *testing.T) {
	const (
		workers = 16
		keys    = 256
		limit   = 20
		rounds  = 12 // every worker visits every key this many times
	)
	for _, cfg := range []Config{tinyCache, smallCache} {
		for _, w := range []domain.Window{sliding(limit, time.Hour), gcra(limit, time.Hour)} {
			t.Run(cacheName(cfg)+"/"+w.Algorithm.String(), func(t *testing.T) {
				st := newStore(t, cfg, WithCacheMetrics())
				var passed [keys]atomic.Int64
				names := make([]string, keys)
				for k := range names {
					names[k] = fmt.Sprintf("rl:{t}:user:%04d:r:w", k)
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				for g := range workers {
					wg.Go(func() {
						<-start
						for r := range rounds {
							for i := range keys {
								// Each worker walks the keys from its own
								// offset, so every key is contended.
								k := (i*7 + g*31 + r) % keys
								// Two keys per request: all-or-nothing must hold
								// across them too.
								k2 := (k + 1) % keys
								res, err := st.Evaluate(t.Context(), at(time.Duration(r)*time.Millisecond),
									[]domain.Limit{lim(names[k], w, 1), lim(names[k2], w, 1)})
								if !assert.NoError(t, err) {
									return
								}
								if res.Allowed {
									passed[k].Add(1)
									passed[k2].Add(1)
								}
							}
						}
					})
				}
				close(start)
				wg.Wait()
				for k := range passed {
					require.LessOrEqual(t, passed[k].Load(), int64(limit), "key %d admitted more than its limit", k)
				}
				// Every key's state is intact: peeking shows exactly what the
				// goroutines consumed.
				for k, name := range names {
					r, err := st.Peek(t.Context(), at(time.Second), []domain.Limit{lim(name, w, 1)})
					require.NoError(t, err)
					require.Equal(t, limit-passed[k].Load(), r.Remaining, "key %d", k)
				}
				stats := st.Stats()
				assert.Zero(t, stats.Dropped)
				assert.NotZero(t, stats.Rejected+stats.Evicted+stats.SetsDropped,
					"ristretto refused nothing: the test proves nothing")
				t.Logf("stats %+v, ristretto: %s", stats, st.CacheMetrics())
			})
		}
	}
}

// TestIdleKeysAreSweptLiveKeysKept checks that the sweep forgets idle keys
// and keeps a key whose last unit is still inside its window.
func TestIdleKeysAreSweptLiveKeysKept(t *testing.T) {
	for _, cfg := range []Config{{}, tinyCache} {
		t.Run(cacheName(cfg), func(t *testing.T) {
			st := newStore(t, cfg)
			short, long := sliding(2, time.Minute), sliding(2, 2*time.Hour)
			for i := range 100 {
				_, err := st.Evaluate(t.Context(), at(0), []domain.Limit{lim(fmt.Sprintf("idle-%d", i), short, 1)})
				require.NoError(t, err)
			}
			for _, l := range []domain.Limit{lim("live-log", long, 2), lim("live-gcra", gcra(2, 2*time.Hour), 2)} {
				_, err := st.Evaluate(t.Context(), at(0), []domain.Limit{l})
				require.NoError(t, err)
			}
			require.Equal(t, 102, st.Stats().Entries)

			// An hour later the short keys are idle, the long ones are not.
			_, err := st.Peek(t.Context(), at(time.Hour), []domain.Limit{lim("other", short, 1)})
			require.NoError(t, err)
			st.sweep()
			assert.Equal(t, 2, st.Stats().Entries)
			assert.GreaterOrEqual(t, st.Stats().Expired, uint64(100))
			assert.Zero(t, st.Stats().Dropped)

			// GCRA has refilled one unit of two in the hour, so ask for two.
			for _, l := range []domain.Limit{lim("live-log", long, 1), lim("live-gcra", gcra(2, 2*time.Hour), 2)} {
				r, err := st.Evaluate(t.Context(), at(time.Hour), []domain.Limit{l})
				require.NoError(t, err)
				assert.False(t, r.Allowed, "%s lost its state in the sweep", l.Key)
			}
			r, err := st.Evaluate(t.Context(), at(time.Hour), []domain.Limit{lim("idle-7", short, 2)})
			require.NoError(t, err)
			assert.True(t, r.Allowed)
		})
	}
}

// TestPendingOverflowDropsOldestLiveState shows the one documented loss:
// when ristretto holds nothing and the share of keys held outside it is
// exhausted, the least recently used pending entries are forgotten, and
// counted.
func TestPendingOverflowDropsOldestLiveState(t *testing.T) {
	st := newStore(t, Config{MaxMemory: MinMaxMemory, cacheCost: 1})
	w := gcra(1, time.Hour)
	const keys = 20000
	for i := range keys {
		_, err := st.Evaluate(t.Context(), at(0), []domain.Limit{lim(fmt.Sprintf("k%05d", i), w, 1)})
		require.NoError(t, err)
	}
	st.Wait()
	stats := st.Stats()
	_, out := st.plan.shares(0)
	t.Logf("%+v, share outside ristretto %d", stats, out)
	assert.NotZero(t, stats.Dropped)
	assert.LessOrEqual(t, stats.PendingBytes, out)
	assert.LessOrEqual(t, stats.Bytes, int64(MinMaxMemory))
	assert.Less(t, stats.Entries, keys)
	// The newest key kept its state.
	r, err := st.Evaluate(t.Context(), at(0), []domain.Limit{lim(fmt.Sprintf("k%05d", keys-1), w, 1)})
	require.NoError(t, err)
	assert.False(t, r.Allowed)
}

// flood sends keys distinct keys of about keyLen bytes to st from two
// goroutines, each with a live state (an hour-long window, GCRA and
// sliding log alternately), at instants a microsecond apart.
func flood(t *testing.T, st *Store, keys, keyLen int) {
	t.Helper()
	floodFrom(t, st, 0, keys, keyLen)
}

// floodFrom is flood with keys numbered from first on, so that floods one
// after another send distinct keys.
func floodFrom(t *testing.T, st *Store, first, keys, keyLen int) {
	t.Helper()
	const workers = 2
	perWorker := keys / workers
	windows := []domain.Window{gcra(10, time.Hour), sliding(10, time.Hour)}
	pad := strings.Repeat("p", max(keyLen-len("rl:{tenant-000}:ip:0000000000000000::burst"), 0))
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			buf := make([]byte, 0, keyLen+16)
			l := []domain.Limit{{Cost: 1}}
			for i := range perWorker {
				n := first + g*perWorker + i
				buf = fmt.Appendf(buf[:0], "rl:{tenant-%03d}:ip:%016x:%s:burst", i%997, n, pad)
				l[0].Key, l[0].Window = string(buf), windows[i%2]
				if _, err := st.Evaluate(t.Context(), at(time.Duration(first+i)*time.Microsecond), l); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// drained waits until the entries the in-flight bound deferred have all
// been handed to ristretto and ristretto applied them: what the sweeper
// does in the background after each write ristretto takes (handOff),
// done here in the test's goroutine so that a loaded machine cannot leave
// it half done.
func (s *Store) drained() {
	for {
		s.Wait()
		s.handOff()
		s.Wait()
		s.handoff.mu.Lock()
		empty := s.handoff.head == nil
		s.handoff.mu.Unlock()
		if empty {
			return
		}
	}
}

// TestStatsStayWithinMaxMemory floods small stores with distinct live keys,
// short and long, and checks the store's own account of its footprint once
// the decisions are done and ristretto applied their writes (Wait): the
// estimate MaxMemory bounds never passes it, and the keys held outside
// ristretto never pass their share. It waits for the hand-off of the
// deferred entries too (drained): with only Wait, a loaded machine whose
// sweeper had not yet handed them off failed it about one run in eight,
// those entries still borrowing ristretto's room. (The live heap itself is checked
// against the bound by TestMaxMemoryBoundsLiveAllocs, without the race
// detector.)
func TestStatsStayWithinMaxMemory(t *testing.T) {
	for _, keyLen := range []int{48, domain.MaxKeyLen} {
		t.Run(fmt.Sprintf("%d-byte keys", keyLen), func(t *testing.T) {
			const maxMemory = 4 << 20
			st := newStore(t, Config{MaxMemory: maxMemory})
			flood(t, st, 30_000, keyLen)
			st.drained()
			stats := st.Stats()
			t.Logf("%+v", stats)
			_, out := st.plan.shares(st.peakSlots.Load())
			assert.LessOrEqual(t, stats.Bytes, int64(maxMemory))
			assert.LessOrEqual(t, stats.PendingBytes, out)
			assert.NotZero(t, stats.Dropped, "the flood did not reach the bound: the test proves nothing")
			assert.NotZero(t, stats.Cached)
		})
	}
}

// TestIdleGraceProtectsLaggingCallers checks that a key trivial at the
// latest instant, but not at a lagging caller's instant, survives both the
// sweep and ristretto's refusals while the lag is within IdleGrace.
func TestIdleGraceProtectsLaggingCallers(t *testing.T) {
	for _, cfg := range []Config{{IdleGrace: time.Minute}, {IdleGrace: time.Minute, cacheCost: 1}} {
		t.Run(cacheName(cfg), func(t *testing.T) {
			st := newStore(t, cfg)
			w := gcra(2, 10*time.Second) // TAT after the burst: t0+10s
			l := []domain.Limit{lim("lagging", w, 2)}
			r, err := st.Evaluate(t.Context(), at(0), l)
			require.NoError(t, err)
			require.True(t, r.Allowed)

			// Another caller is 50s ahead: the key is trivial there, but
			// not for 60s yet.
			_, err = st.Evaluate(t.Context(), at(60*time.Second), []domain.Limit{lim("ahead", w, 1)})
			require.NoError(t, err)
			st.sweep()
			r, err = st.Evaluate(t.Context(), at(time.Second), l)
			require.NoError(t, err)
			assert.False(t, r.Allowed, "a key live for the lagging caller was forgotten")

			// Past the grace, the key is forgotten.
			_, err = st.Evaluate(t.Context(), at(80*time.Second), []domain.Limit{lim("ahead", w, 1)})
			require.NoError(t, err)
			st.sweep()
			assert.Equal(t, 1, st.Stats().Entries)
		})
	}
}

// TestSweepsEvictionsAndDecisionsTogether runs decisions on long-lived keys
// while short-lived keys come and go, the clock advances, the sweeper
// forgets idle keys (and Dels them from the cache) and a tiny cache evicts
// and refuses: the long-lived keys' state must survive intact.
func TestSweepsEvictionsAndDecisionsTogether(t *testing.T) {
	const (
		workers = 8
		ops     = 1500 // per worker
		live    = 32
		limit   = 20
	)
	cfg := Config{MaxMemory: 8 << 20, cacheCost: 8 << 10, SweepInterval: 10 * time.Second, IdleGrace: 30 * time.Second}
	for _, w := range []domain.Window{sliding(limit, 24*time.Hour), gcra(limit, 24*time.Hour)} {
		t.Run(w.Algorithm.String(), func(t *testing.T) {
			st := newStore(t, cfg)
			names := make([]string, live)
			for i := range names {
				names[i] = fmt.Sprintf("live-%02d", i)
			}
			var clock atomic.Int64 // one shared timeline: 10ms per decision
			var passed [live]atomic.Int64
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range workers {
				wg.Go(func() {
					<-start
					for i := range ops {
						now := at(time.Duration(clock.Add(1)) * 10 * time.Millisecond)
						k := (i*5 + g) % live
						limits := []domain.Limit{
							lim(names[k], w, 1),
							lim(fmt.Sprintf("brief-%d-%d", g, i), sliding(1, time.Second), 1),
						}
						r, err := st.Evaluate(t.Context(), now, limits)
						if !assert.NoError(t, err) {
							return
						}
						if r.Allowed {
							passed[k].Add(1)
						}
					}
				})
			}
			// An extra sweeper, besides the store's own, to race the
			// decisions harder.
			done := make(chan struct{})
			sweeps := make(chan int)
			go func() {
				n := 0
				for {
					select {
					case <-done:
						sweeps <- n
						return
					default:
						st.sweep()
						n++
					}
				}
			}()
			close(start)
			wg.Wait()
			close(done)
			t.Logf("extra sweeps: %d", <-sweeps)

			end := at(time.Duration(clock.Load()) * 10 * time.Millisecond)
			for k, name := range names {
				require.LessOrEqual(t, passed[k].Load(), int64(limit), "key %d", k)
				r, err := st.Peek(t.Context(), end, []domain.Limit{lim(name, w, 1)})
				require.NoError(t, err)
				// GCRA refills one unit per 72 minutes; the test spans
				// two minutes of its timeline.
				require.Equal(t, limit-passed[k].Load(), r.Remaining, "key %d lost state", k)
			}
			stats := st.Stats()
			t.Logf("%+v", stats)
			assert.Zero(t, stats.Dropped)
			assert.NotZero(t, stats.Expired, "nothing was swept: the test proves nothing")
			assert.NotZero(t, stats.Evicted+stats.Rejected)
		})
	}
}

// TestCloseWhileDecisionsRun closes stores while goroutines decide on new
// and known keys (one, three and with growing logs, so that ristretto
// admits, refuses and evicts, and the sweeper sweeps and runs Dels), peek
// and reset them. Every call returns a result or an error wrapping
// domain.ErrStoreClosed, and every call that starts once Close returned
// gets the error. Decisions take no store-wide lock: this test, under the
// race detector, is what shows that Close never closes ristretto under a
// call.
func TestCloseWhileDecisionsRun(t *testing.T) {
	for _, cfg := range []Config{{}, tinyCache, smallCache} {
		cfg.SweepInterval = 50 * time.Millisecond
		t.Run(cacheName(cfg), func(t *testing.T) {
			for range 4 {
				st, err := New(cfg)
				require.NoError(t, err)
				var calls atomic.Int64
				var closed atomic.Bool
				start := make(chan struct{})
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Go(func() {
						<-start
						w := sliding(1000, time.Hour)
						for i := 0; ; i++ {
							after := closed.Load()
							now := at(time.Duration(i) * time.Millisecond)
							k := func(j int) string { return fmt.Sprintf("k-%d-%d", g, (i+j)%50+i/500*50) }
							var err error
							switch i % 4 {
							case 0:
								_, err = st.Evaluate(t.Context(), now, []domain.Limit{lim(k(0), w, 1)})
							case 1:
								_, err = st.Evaluate(t.Context(), now, []domain.Limit{lim(k(0), w, 1), lim(k(1), gcra(5, time.Second), 1), lim(k(2), w, 1)})
							case 2:
								_, err = st.Peek(t.Context(), now, []domain.Limit{lim(k(3), w, 1), lim(k(4), w, 1)})
							case 3:
								err = st.Reset(t.Context(), k(5))
							}
							calls.Add(1)
							if err != nil {
								assert.ErrorIs(t, err, domain.ErrStoreClosed)
								return
							}
							if !assert.False(t, after, "a call that started after Close returned succeeded") {
								return
							}
						}
					})
				}
				close(start)
				for calls.Load() < 3000 {
					time.Sleep(time.Millisecond)
				}
				require.NoError(t, st.Close())
				closed.Store(true)
				wg.Wait()
			}
		})
	}
}

// TestWaitLandsOfferedKeys checks Wait: once it returns, every key offered
// to ristretto (with room for all of them) is in its cache.
func TestWaitLandsOfferedKeys(t *testing.T) {
	st := newStore(t, Config{})
	for i := range 100 {
		_, err := st.Evaluate(t.Context(), at(0), []domain.Limit{lim(fmt.Sprintf("k%d", i), gcra(5, time.Minute), 1)})
		require.NoError(t, err)
	}
	st.Wait()
	stats := st.Stats()
	assert.Equal(t, 100, stats.Cached)
	assert.Zero(t, stats.Pending)
	assert.Zero(t, stats.PendingBytes)
	require.NoError(t, st.Close())
	st.Wait() // returns at once
	assert.Zero(t, st.Stats().Entries)
}

// TestSweepNeverForgetsAKeyInUse races sweeps against the first
// consumption of keys whose entries exist but hold nothing (made by
// refused requests, so idle and sweepable), held in ristretto's cache or
// outside it: a sweep that found an entry idle must not forget it once a
// decision committed on it, or its key would admit a second unit where its
// window allows one.
func TestSweepNeverForgetsAKeyInUse(t *testing.T) {
	const (
		rounds  = 20
		keys    = 500
		workers = 4
	)
	for _, cfg := range []Config{{}, tinyCache} {
		cfg.IdleGrace = time.Millisecond
		t.Run(cacheName(cfg), func(t *testing.T) {
			st := newStore(t, cfg)
			day := sliding(1, 24*time.Hour)
			block := lim("block", day, 1)
			_, err := st.Evaluate(t.Context(), at(0), []domain.Limit{block})
			require.NoError(t, err)
			stop := make(chan struct{})
			sweeps := make(chan int)
			go func() {
				n := 0
				for {
					select {
					case <-stop:
						sweeps <- n
						return
					default:
						st.sweep()
						n++
					}
				}
			}()
			for round := range rounds {
				names := make([]string, keys)
				for k := range names {
					names[k] = fmt.Sprintf("r%02d-k%04d", round, k)
					r, err := st.Evaluate(t.Context(), at(time.Second), []domain.Limit{lim(names[k], day, 1), block})
					require.NoError(t, err)
					require.False(t, r.Allowed)
				}
				var admitted [keys]atomic.Int64
				var wg sync.WaitGroup
				for g := range workers {
					wg.Go(func() {
						for i := range keys {
							k := (i + g*keys/workers) % keys
							r, err := st.Evaluate(t.Context(), at(2*time.Second), []domain.Limit{lim(names[k], day, 1)})
							if !assert.NoError(t, err) {
								return
							}
							if r.Allowed {
								admitted[k].Add(1)
							}
						}
					})
				}
				wg.Wait()
				for k := range admitted {
					require.Equal(t, int64(1), admitted[k].Load(), "round %d, key %d", round, k)
				}
			}
			close(stop)
			stats := st.Stats()
			t.Logf("sweeps: %d, %+v", <-sweeps, stats)
			assert.NotZero(t, stats.Expired, "no idle entry was swept: the test proves nothing")
		})
	}
}

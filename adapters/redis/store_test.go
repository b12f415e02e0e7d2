package redis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/ports"
)

func sliding(limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: domain.SlidingLog}
}

func gcra(limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: domain.GCRA}
}

// TestScriptSHA1IsPinned: the server names the script by the SHA1 the
// store sends with EVALSHA (lua's own test pins the text).
func TestScriptSHA1IsPinned(t *testing.T) {
	got := do(t, redistest.Standalone(t), "SCRIPT", "LOAD", lua.RateLimitV5)
	require.Equal(t, lua.RateLimitV5SHA1, got)
}

// refStore is the Go reference the script is replayed against: one key's
// state whichever algorithm wrote it (a GCRA TAT with the interval it was
// written with, or a sliding log's instants), read under any window by
// the rules S1-S7 of docs/adr/009-stored-state-and-script-v3.md, checked
// on every limit and committed only when all admit. Like the script, it
// forgets a log's units only when it rewrites the key (an admitted
// request), and a log's latest instant is its newest unit or now. It
// decides n repeated requests by n sequential calls, the contract the
// script computes in one pass.
type refStore struct {
	grace int64 // microseconds
	keys  map[string]*refKey
}

// refKey is one key's state: nothing, a GCRA TAT and its interval, or a
// sliding log's instants, ascending.
type refKey struct {
	gcra    bool
	tat, tw int64
	units   []int64
}

func newRefStore(grace time.Duration) *refStore {
	return &refStore{grace: grace.Microseconds(), keys: map[string]*refKey{}}
}

// refView is what a key holds, read under a window at now.
type refView struct {
	start int64   // GCRA window: max(TAT, now), converted
	units []int64 // log window: the units inside the window, ascending
	kept  []int64 // log window: the units kept when the key is rewritten
	fcut  int64
}

const refMaxPeriod = int64(domain.MaxPeriod / time.Microsecond)

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func (r *refStore) view(k *refKey, now int64, w domain.Window) refView {
	t, p := w.EmissionMicros(), w.PeriodMicros()
	var v refView
	logUnits := func() {
		newest := int64(math.MinInt64)
		if len(k.units) > 0 {
			newest = k.units[len(k.units)-1]
		}
		latest := max(now, newest)
		v.fcut = latest - p - min(r.grace, p)
		lower := max(now-p, v.fcut)
		for _, u := range k.units {
			if u > v.fcut {
				v.kept = append(v.kept, u)
			}
			if u > lower {
				v.units = append(v.units, u)
			}
		}
	}
	if w.Algorithm == domain.GCRA {
		v.start = now
		switch {
		case k == nil:
		case k.gcra && k.tat > now && k.tw == t:
			v.start = k.tat
		case k.gcra && k.tat > now:
			v.start = now + min(ceilDiv(k.tat-now, k.tw)*t, refMaxPeriod) // S1
		case !k.gcra:
			logUnits()
			v.start = now + min(int64(len(v.units))*t, refMaxPeriod) // S2
		}
		return v
	}
	switch {
	case k == nil:
	case k.gcra && k.tat > now:
		for range ceilDiv(k.tat-now, k.tw) { // S3
			v.units = append(v.units, now)
			v.kept = append(v.kept, now)
		}
	case !k.gcra:
		logUnits() // S4, S5
	}
	return v
}

// status is one limit's status on view v after used more units at now.
func refStatus(v refView, now int64, w domain.Window, cost, used int64) domain.LimitStatus {
	t, p := w.EmissionMicros(), w.PeriodMicros()
	var st domain.LimitStatus
	if w.Algorithm == domain.GCRA {
		start, capacity := v.start+used*t, t*w.Limit
		st.Allowed = start+cost*t-now <= capacity
		if !st.Allowed {
			st.RetryAfter = domain.Micros(start + cost*t - capacity - now)
		}
		st.Remaining = max(floorDiv(capacity-(start-now), t), 0)
		st.ResetAfter = domain.Micros(start - now)
		return st
	}
	all := slices.Clone(v.units)
	for range used {
		all = append(all, now)
	}
	slices.Sort(all)
	total := int64(len(all))
	st.Allowed = total+cost <= w.Limit
	if !st.Allowed {
		st.RetryAfter = domain.Micros(all[total+cost-w.Limit-1] + p - now)
	}
	st.Remaining = max(w.Limit-total, 0)
	if total > 0 {
		st.ResetAfter = domain.Micros(all[total-1] + p - now)
	}
	return st
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (r *refStore) run(now time.Time, limits []domain.Limit, consume bool) domain.Result {
	us := now.UnixMicro()
	views := make([]refView, len(limits))
	st := make([]domain.LimitStatus, len(limits))
	for i, l := range limits {
		views[i] = r.view(r.keys[l.Key], us, l.Window)
		st[i] = refStatus(views[i], us, l.Window, l.Cost, 0)
	}
	res := domain.NewResult(st)
	if !res.Allowed || !consume {
		return res
	}
	for i, l := range limits {
		st[i] = refStatus(views[i], us, l.Window, l.Cost, l.Cost)
		st[i].Allowed, st[i].RetryAfter = true, 0
		if l.Window.Algorithm == domain.GCRA { // S6
			r.keys[l.Key] = &refKey{gcra: true, tat: views[i].start + l.Cost*l.Window.EmissionMicros(), tw: l.Window.EmissionMicros()}
			continue
		}
		units := slices.Clone(views[i].kept)
		for range l.Cost {
			units = append(units, us)
		}
		slices.Sort(units)
		r.keys[l.Key] = &refKey{units: units}
	}
	return domain.NewResult(st)
}

// repeated decides n requests by n sequential calls.
func (r *refStore) repeated(now time.Time, limits []domain.Limit, n int) domain.Repeated {
	rep := domain.Repeated{N: n}
	for range n {
		res := r.run(now, limits, true)
		if !res.Allowed {
			rep.Refused = res
			break
		}
		rep.Admitted++
		rep.Last = res
	}
	return rep
}

// TestScriptMatchesGoReference replays random timelines (mixed algorithms,
// odd periods, costs, peeks, repeated requests, clock jumps both ways,
// some beyond the grace) on Redis and on the Go reference, and requires
// identical results to the microsecond: on a standalone server and a
// cluster, with sliding logs stored compactly (the default) and as ZSETs.
// The windows straddle the compact bound (CompactLogMaxLimit and one
// more), one key is checked under either of the two, so the store
// rewrites it from one encoding to the other while it holds units, and
// one key changes algorithm, limit and period at random (rules S1-S4).
func TestScriptMatchesGoReference(t *testing.T) {
	windows := []domain.Window{
		sliding(5, 10*time.Second),
		gcra(3, 10*time.Second+7*time.Microsecond), // emission interval truncated
		sliding(1, 30*time.Second),
		gcra(7, time.Minute),
		sliding(10, 12345678*time.Microsecond),
		sliding(redis.CompactLogMaxLimit, 20*time.Second),
		sliding(redis.CompactLogMaxLimit+1, 20*time.Second),
	}
	// The key checked under either side of the compact bound.
	straddle := []domain.Window{sliding(redis.CompactLogMaxLimit, 15*time.Second), sliding(redis.CompactLogMaxLimit+1, 15*time.Second)}
	// The key whose window changes: limit, period and algorithm.
	morph := []domain.Window{
		sliding(10, 10*time.Second), gcra(10, 10*time.Second), sliding(5, 10*time.Second), gcra(5, 10*time.Second),
		gcra(20, 15*time.Second), sliding(redis.CompactLogMaxLimit+5, 10*time.Second), gcra(3, 4*time.Second), sliding(3, 4*time.Second),
	}
	for _, topo := range topologies {
		for _, enc := range []redis.LogEncoding{redis.LogCompact, redis.LogZSet} {
			t.Run(topo.name+"/"+enc.String(), func(t *testing.T) {
				cfg := topo.cfg(t)
				cfg.Log = enc
				replayAgainstReference(t, newStore(t, cfg), redis.DefaultGrace, windows, straddle, morph)
			})
		}
	}
	t.Run("NoGrace", func(t *testing.T) {
		cfg := topologies[0].cfg(t)
		cfg.Grace = -1
		replayAgainstReference(t, newStore(t, cfg), 0, windows, straddle, morph)
	})
}

func replayAgainstReference(t *testing.T, s *redis.Store, grace time.Duration, windows, straddle, morph []domain.Window) {
	for seq := range 5 {
		rng := rand.New(rand.NewPCG(uint64(seq), 42))
		ref := newRefStore(grace)
		tg := tag(t)
		keys := make([]string, len(windows)+2)
		for i := range keys {
			keys[i] = fmt.Sprintf("ref:{%s}:%d", tg, i)
		}
		now := time.Now().Truncate(time.Second)
		latest := now
		for step := range 250 {
			switch p := rng.IntN(100); {
			case p < 10: // backwards jump, within the grace of the latest
				// instant (S5 promises nothing further back: each store
				// forgets a unit when its own rule says)
				now = now.Add(-time.Duration(rng.Int64N(int64(5 * time.Second))).Truncate(time.Microsecond))
				if floor := latest.Add(-grace); now.Before(floor) {
					now = floor
				}
			case p < 30: // same instant
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))).Truncate(time.Microsecond))
			}
			if now.After(latest) {
				latest = now
			}
			idx := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
			limits := make([]domain.Limit, len(idx))
			for j, k := range idx {
				var w domain.Window
				switch {
				case k < len(windows):
					w = windows[k]
				case k == len(windows):
					w = straddle[rng.IntN(len(straddle))]
				default:
					w = morph[rng.IntN(len(morph))]
				}
				cost := int64(1)
				if rng.IntN(4) == 0 {
					cost = 1 + rng.Int64N(min(w.Limit, 400))
				}
				limits[j] = domain.Limit{Key: keys[k], Window: w, Cost: cost}
			}
			switch op := rng.IntN(10); {
			case op < 2:
				want := ref.run(now, limits, false)
				got, err := s.Peek(t.Context(), now, limits)
				require.NoError(t, err)
				require.Equal(t, want, got, "sequence %d step %d (peek) at %s: %+v", seq, step, now, limits)
			case op < 4:
				n := 1 + rng.IntN(6)
				want := ref.repeated(now, limits, n)
				got, err := s.EvaluateRepeated(t.Context(), now, limits, n)
				require.NoError(t, err)
				require.Equal(t, want, got, "sequence %d step %d (repeated %d) at %s: %+v", seq, step, n, now, limits)
			default:
				want := ref.run(now, limits, true)
				got, err := s.Evaluate(t.Context(), now, limits)
				require.NoError(t, err)
				require.Equal(t, want, got, "sequence %d step %d at %s: %+v", seq, step, now, limits)
			}
		}
		for _, k := range keys {
			require.NoError(t, s.Reset(t.Context(), k))
		}
	}
}

// TestKeysWrittenAreTheCallersAndExpire checks, on a dedicated server, that
// the script writes only the keys it was given and that each carries a TTL
// no longer than its window.
func TestKeysWrittenAreTheCallersAndExpire(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{})
	ctx := t.Context()
	now := time.Now()
	windows := map[string]domain.Window{
		"rl:{t}:sliding:1s":    sliding(3, time.Second),
		"rl:{t}:sliding:1m":    sliding(100, time.Minute),
		"rl:{t}:sliding:1500u": sliding(2, 1500*time.Millisecond+500*time.Microsecond),
		"rl:{t}:gcra:1s":       gcra(3, time.Second),
		"rl:{t}:gcra:1h":       gcra(1000, time.Hour),
		"rl:{t}:gcra:366d":     gcra(1, domain.MaxPeriod),
		"rl:{t}:refused":       sliding(1, time.Minute),
		"rl:{t}:sliding:200ms": sliding(5, 200*time.Millisecond),
		"rl:{t}:gcra:10ms":     gcra(5, 10*time.Millisecond),
	}
	var all []domain.Limit
	for k, w := range windows {
		all = append(all, domain.Limit{Key: k, Window: w, Cost: 1})
	}
	slices.SortFunc(all, func(a, b domain.Limit) int { return strings.Compare(a.Key, b.Key) })
	// One request over every key, then a refusal (the limit-1 key is
	// spent), peeks, and a request on keys nobody wrote before.
	r, err := s.Evaluate(ctx, now, all)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = s.Evaluate(ctx, now.Add(time.Millisecond), all)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	_, err = s.Peek(ctx, now, []domain.Limit{{Key: "rl:{t}:peeked", Window: sliding(5, time.Second), Cost: 1}})
	require.NoError(t, err)
	_, err = s.Evaluate(ctx, now, []domain.Limit{{Key: "rl:{t}:gcra:cost", Window: gcra(10, 10*time.Second), Cost: 7}})
	require.NoError(t, err)
	windows["rl:{t}:gcra:cost"] = gcra(10, 10*time.Second)

	var keys []string
	cursor := "0"
	for {
		v := do(t, srv.Addr(), "SCAN", cursor, "COUNT", "1000").([]any)
		for _, k := range v[1].([]any) {
			keys = append(keys, k.(string))
		}
		if cursor = v[0].(string); cursor == "0" {
			break
		}
	}
	slices.Sort(keys)
	want := make([]string, 0, len(windows))
	for k := range windows {
		want = append(want, k)
	}
	slices.Sort(want)
	require.Equal(t, want, keys, "the keyspace holds exactly the keys admitted requests passed: no helper keys, nothing for a peek")

	for _, k := range keys {
		pttl := do(t, srv.Addr(), "PTTL", k).(int64)
		w := windows[k]
		// A sliding log keeps its key for its grace too (rule S5).
		need := w.PeriodMicros()
		if w.Algorithm == domain.SlidingLog {
			need += min(redis.DefaultGrace.Microseconds(), w.PeriodMicros())
		}
		periodMs := max((need+999)/1000, redis.DefaultMinTTL.Milliseconds())
		assert.Greater(t, pttl, int64(0), "%s has no TTL", k)
		assert.LessOrEqual(t, pttl, periodMs, "%s: TTL %d ms exceeds its window of %s and its grace", k, pttl, w.Period)
		t.Logf("%-22s %-11s PTTL %d ms (window %s)", k, w.Algorithm, pttl, w.Period)
	}
	// A GCRA key lives only until its TAT: cost 7 of 10 per 10 s is 7 s.
	assert.InDelta(t, 7000, do(t, srv.Addr(), "PTTL", "rl:{t}:gcra:cost").(int64), 500)
	// Sub-second windows keep their key for the floor, DefaultMinTTL.
	assert.InDelta(t, 1000, do(t, srv.Addr(), "PTTL", "rl:{t}:gcra:10ms").(int64), 100)

	t.Run("MinTTL", func(t *testing.T) {
		// With a 1 ms floor and no grace, every TTL is the exact relevance
		// of its key.
		srv, s := newDedicated(t, redis.Config{MinTTL: time.Millisecond, Grace: -1})
		for _, l := range []domain.Limit{
			{Key: "rl:{m}:sliding", Window: sliding(5, 300*time.Millisecond), Cost: 1},
			{Key: "rl:{m}:gcra", Window: gcra(10, 400*time.Millisecond), Cost: 4},
		} {
			_, err := s.Evaluate(t.Context(), time.Now(), []domain.Limit{l})
			require.NoError(t, err)
			pttl := do(t, srv.Addr(), "PTTL", l.Key).(int64)
			assert.Greater(t, pttl, int64(0), l.Key)
			assert.LessOrEqual(t, pttl, int64(300), "%s: 300 ms window (sliding), TAT 160 ms ahead (GCRA)", l.Key)
		}
	})
}

func TestCrossSlotIsRefusedBeforeSending(t *testing.T) {
	limits := []domain.Limit{
		{Key: "rl:{tenant-a}:user", Window: sliding(5, time.Minute), Cost: 1},
		{Key: "rl:{tenant-b}:user", Window: sliding(5, time.Minute), Cost: 1},
	}
	require.NotEqual(t, redis.Slot(limits[0].Key), redis.Slot(limits[1].Key))

	t.Run("standalone", func(t *testing.T) {
		// One server holds every slot: it takes any keys in one call
		// (ports.Partitioned says so), which the Limiter relies on for ip
		// windows tagged by their ip (docs/adr/013).
		srv, s := newDedicated(t, redis.Config{})
		_, partitioned := s.Partition(limits[0].Key)
		require.False(t, partitioned)
		_, err := s.Peek(t.Context(), time.Now(), limits[:1]) // loads the script
		require.NoError(t, err)
		before := scriptCalls(t, srv.Addr())
		res, err := s.Evaluate(t.Context(), time.Now(), limits)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.Equal(t, before+1, scriptCalls(t, srv.Addr()), "one script call")
		assert.Equal(t, int64(2), do(t, srv.Addr(), "DBSIZE"), "both keys in one call")
	})
	t.Run("cluster", func(t *testing.T) {
		s := newStore(t, topologies[1].cfg(t))
		_, err := s.Evaluate(t.Context(), time.Now(), limits)
		require.ErrorIs(t, err, domain.ErrCrossSlot)
		assert.NotContains(t, err.Error(), "CROSSSLOT", "refused by the store, not by the server")
		assert.Equal(t, domain.CodeCrossSlot, domain.CodeOf(err))
	})
}

// scriptCalls returns how many EVAL and EVALSHA calls the server executed
// or refused.
func scriptCalls(t testing.TB, addr string) int64 {
	t.Helper()
	stats := do(t, addr, "INFO", "commandstats").(string)
	var n int64
	for line := range strings.Lines(stats) {
		if !strings.HasPrefix(line, "cmdstat_eval") {
			continue
		}
		for f := range strings.SplitSeq(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			k, v, _ := strings.Cut(f, "=")
			if k == "calls" || k == "rejected_calls" || k == "failed_calls" {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// TestScriptCacheFlushMidRunFailsNoDecision flushes the script cache in a
// loop while goroutines evaluate: EVALSHA meets NOSCRIPT, rueidis falls
// back to EVAL, and no call fails.
func TestScriptCacheFlushMidRunFailsNoDecision(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T) (*redis.Store, []string)
	}{
		{"standalone", func(t *testing.T) (*redis.Store, []string) {
			srv, s := newDedicated(t, redis.Config{})
			return s, []string{srv.Addr()}
		}},
		{"cluster", func(t *testing.T) (*redis.Store, []string) {
			addrs := redistest.Cluster(t)
			return newStore(t, topologies[1].cfg(t)), addrs
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, addrs := c.setup(t)
			noscriptBefore := noscriptErrors(t, addrs)
			ctx := t.Context()
			stop := make(chan struct{})
			var flushes atomic.Int64
			var flusher sync.WaitGroup
			flusher.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					for _, a := range addrs {
						do(t, a, "SCRIPT", "FLUSH", "SYNC")
					}
					flushes.Add(1)
					time.Sleep(time.Millisecond)
				}
			})
			var calls, failures atomic.Int64
			var firstErr atomic.Value
			var workers sync.WaitGroup
			deadline := time.Now().Add(700 * time.Millisecond)
			for g := range 8 {
				workers.Go(func() {
					tg := tag(t)
					limits := []domain.Limit{
						{Key: fmt.Sprintf("flush:{%s}:%d:a", tg, g), Window: sliding(domain.MaxSlidingLogLimit, time.Hour), Cost: 1},
						{Key: fmt.Sprintf("flush:{%s}:%d:b", tg, g), Window: gcra(1_000_000, time.Hour), Cost: 1},
					}
					for time.Now().Before(deadline) {
						r, err := s.Evaluate(ctx, time.Now(), limits)
						calls.Add(1)
						if err != nil || !r.Allowed {
							failures.Add(1)
							firstErr.CompareAndSwap(nil, fmt.Sprintf("err=%v allowed=%t", err, r.Allowed))
						}
					}
					for _, l := range limits {
						_ = s.Reset(context.Background(), l.Key)
					}
				})
			}
			workers.Wait()
			close(stop)
			flusher.Wait()
			noscript := noscriptErrors(t, addrs) - noscriptBefore
			t.Logf("%d decisions, %d script cache flushes, %d NOSCRIPT replies recovered", calls.Load(), flushes.Load(), noscript)
			require.Zero(t, failures.Load(), "first failure: %v", firstErr.Load())
			require.Positive(t, noscript, "the flushes never hit an EVALSHA: the test proved nothing")
		})
	}
}

// noscriptErrors sums errorstat_NOSCRIPT over the nodes.
func noscriptErrors(t testing.TB, addrs []string) int64 {
	t.Helper()
	var n int64
	for _, a := range addrs {
		stats := do(t, a, "INFO", "errorstats").(string)
		for line := range strings.Lines(stats) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
				c, _ := strconv.ParseInt(rest, 10, 64)
				n += c
			}
		}
	}
	return n
}

func TestServerTime(t *testing.T) {
	srv := redistest.NewServer(t)
	s := newStore(t, redis.Config{Addrs: []string{srv.Addr()}, Timeout: testTimeout}) // ServerTime is the default
	ctx := t.Context()
	stale := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // ignored
	limits := []domain.Limit{
		{Key: "st:{x}:log", Window: sliding(2, time.Minute), Cost: 1},
		{Key: "st:{x}:gcra", Window: gcra(2, time.Minute), Cost: 1},
	}
	before := time.Now()
	r, err := s.Evaluate(ctx, stale, limits)
	require.NoError(t, err)
	after := time.Now()
	require.True(t, r.Allowed)
	assert.Equal(t, time.Minute, r.Status(0).ResetAfter)

	units := compactUnits(t, do(t, srv.Addr(), "GET", "st:{x}:log").(string))
	require.Len(t, units, 1)
	score := units[0]
	at := time.UnixMicro(score)
	assert.False(t, at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)),
		"the unit was stamped %s, not by the server clock (between %s and %s)", at, before, after)

	tat, tw := gcraValue(t, do(t, srv.Addr(), "GET", "st:{x}:gcra").(string))
	assert.Equal(t, score+30_000_000, tat, "TAT = server now + one emission interval (30 s)")
	assert.Equal(t, int64(30_000_000), tw)

	// Its now ignored, a second and third request see the same log.
	_, err = s.Evaluate(ctx, stale, limits)
	require.NoError(t, err)
	r, err = s.Evaluate(ctx, stale.Add(-time.Hour), limits)
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	assert.Equal(t, 0, r.Limiting)
}

func TestTimeoutMapsToErrStoreTimeout(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{Timeout: 30 * time.Millisecond})
	limits := []domain.Limit{{Key: "to:{x}", Window: sliding(10, time.Minute), Cost: 1}}
	// The first call (connection, script) may miss 30 ms on a loaded
	// machine: retry until the store answers.
	require.Eventually(t, func() bool {
		_, err := s.Evaluate(t.Context(), time.Now(), limits)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)

	// A pause far longer than the deadline tells the two apart whatever
	// the machine's load.
	do(t, srv.Addr(), "CLIENT", "PAUSE", "1500", "ALL")
	start := time.Now()
	_, err := s.Evaluate(t.Context(), time.Now(), limits)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, domain.ErrStoreTimeout)
	assert.Equal(t, domain.CodeStoreTimeout, domain.CodeOf(err))
	assert.Less(t, elapsed, time.Second, "the store's deadline, not the pause, ended the call")

	pctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Prober().Probe(pctx), context.DeadlineExceeded, "a paused server fails the probe")

	// Once the pause ends (CLIENT UNPAUSE would itself wait for it), the
	// store answers again.
	require.Eventually(t, func() bool {
		_, err := s.Evaluate(t.Context(), time.Now(), limits)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
}

func TestStoppedServerMapsToErrStoreUnavailable(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{})
	ctx := t.Context()
	limits := []domain.Limit{{Key: "down:{x}", Window: gcra(10, time.Minute), Cost: 1}}
	_, err := s.Evaluate(ctx, time.Now(), limits)
	require.NoError(t, err)
	require.NoError(t, s.Prober().Probe(ctx))

	require.NoError(t, srv.Stop())
	_, err = s.Evaluate(ctx, time.Now(), limits)
	require.ErrorIs(t, err, domain.ErrStoreUnavailable)
	assert.NotErrorIs(t, err, domain.ErrStoreTimeout)
	assert.Equal(t, domain.CodeStoreUnavailable, domain.CodeOf(err))
	require.ErrorIs(t, s.Reset(ctx, "down:{x}"), domain.ErrStoreUnavailable)
	require.ErrorIs(t, s.Prober().Probe(ctx), domain.ErrStoreUnavailable)

	require.NoError(t, srv.Start())
	require.Eventually(t, func() bool {
		_, err := s.Evaluate(ctx, time.Now(), limits)
		return err == nil
	}, 3*time.Second, 20*time.Millisecond, "the store reconnects by itself")
	require.NoError(t, s.Prober().Probe(ctx))
}

func TestModeClusterRefusesAStandaloneServer(t *testing.T) {
	_, err := redis.New(redis.Config{Addrs: []string{redistest.Standalone(t)}, Mode: redis.ModeCluster})
	require.ErrorIs(t, err, domain.ErrInvalidConfig)
}

func TestClosedStore(t *testing.T) {
	s, err := redis.New(topologies[0].cfg(t))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	limits := []domain.Limit{{Key: "closed:{x}", Window: sliding(1, time.Minute), Cost: 1}}
	_, err = s.Evaluate(t.Context(), time.Now(), limits)
	require.ErrorIs(t, err, domain.ErrStoreClosed)
	_, err = s.Peek(t.Context(), time.Now(), limits)
	require.ErrorIs(t, err, domain.ErrStoreClosed)
	require.ErrorIs(t, s.Reset(t.Context(), "closed:{x}"), domain.ErrStoreClosed)
	require.ErrorIs(t, s.Prober().Probe(t.Context()), domain.ErrStoreClosed)
	_, err = s.CheckMaxMemory(t.Context(), 1)
	require.ErrorIs(t, err, domain.ErrStoreClosed)
}

func TestWithClientLeavesTheClientOpen(t *testing.T) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Standalone(t)}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	s := newStore(t, redis.Config{}, redis.WithClient(c))
	r, err := s.Evaluate(t.Context(), time.Now(), []domain.Limit{{Key: "wc:{" + tag(t) + "}", Window: gcra(1, time.Second), Cost: 1}})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.NoError(t, s.Close())
	require.NoError(t, c.Do(t.Context(), c.B().Ping().Build()).Error())
}

// TestLargeCostSlidingLog adds more members than one ZADD batch holds.
func TestLargeCostSlidingLog(t *testing.T) {
	addr := redistest.Standalone(t)
	s := newStore(t, topologies[0].cfg(t))
	key := "big:{" + tag(t) + "}"
	t.Cleanup(func() { _ = s.Reset(context.Background(), key) })
	w := sliding(3000, time.Minute)
	r, err := s.Evaluate(t.Context(), time.Now(), []domain.Limit{{Key: key, Window: w, Cost: 1234}})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	assert.Equal(t, int64(3000-1234), r.Remaining)
	assert.Equal(t, int64(1234), do(t, addr, "ZCARD", key))
}

// TestMemoryUsage measures what one full key costs the server, for
// capacity planning (docs/adr/003 quotes these figures), and holds the
// compact sliding log under a third of the ZSET one from a limit of 100
// (7 bytes per unit and the key's fixed cost, against about 32 bytes per
// unit, and 119 past 128 units).
func TestMemoryUsage(t *testing.T) {
	srv := redistest.NewServer(t)
	ctx := t.Context()
	now := time.Now()
	stores := map[redis.LogEncoding]*redis.Store{}
	for _, enc := range []redis.LogEncoding{redis.LogCompact, redis.LogZSet} {
		stores[enc] = newStore(t, redis.Config{Addrs: []string{srv.Addr()}, Time: redis.CallerTime, Timeout: testTimeout, Log: enc})
	}
	fill := func(s *redis.Store, key string, w domain.Window) int64 {
		for i := range w.Limit {
			// Distinct instants: the worst case, one record per unit.
			r, err := s.Evaluate(ctx, now.Add(time.Duration(i)*time.Microsecond), []domain.Limit{{Key: key, Window: w, Cost: 1}})
			require.NoError(t, err)
			require.True(t, r.Allowed)
		}
		return do(t, srv.Addr(), "MEMORY", "USAGE", key, "SAMPLES", "0").(int64)
	}
	key := "rl:{0123456789abcdef0123456789abcdef}:user:0123456789abcdef0123456789abcdef:profile:"
	var line strings.Builder
	for _, limit := range []int64{10, 100, 1000} {
		w := sliding(limit, time.Minute)
		compact := fill(stores[redis.LogCompact], fmt.Sprintf("%sc%d", key, limit), w)
		zset := fill(stores[redis.LogZSet], fmt.Sprintf("%sz%d", key, limit), w)
		fmt.Fprintf(&line, "; sliding log at limit %d: compact %d B (%.1f B/unit), ZSET %d B (%.1f B/unit)",
			limit, compact, float64(compact)/float64(limit), zset, float64(zset)/float64(limit))
		if limit >= 100 {
			assert.Less(t, 3*compact, zset, "limit %d: the compact log is over a third of the ZSET", limit)
		}
	}
	r, err := stores[redis.LogCompact].Evaluate(ctx, now, []domain.Limit{{Key: key + "gcra", Window: gcra(100, time.Minute), Cost: 1}})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	g := do(t, srv.Addr(), "MEMORY", "USAGE", key+"gcra", "SAMPLES", "0").(int64)
	t.Logf("MEMORY USAGE (key of %d bytes)%s; GCRA: %d B", len(key)+5, line.String(), g)
	assert.Less(t, g, int64(200))
}

func TestProber(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			s := newStore(t, topo.cfg(t))
			p := s.Prober()
			require.NoError(t, p.Probe(t.Context()))
			mem, err := p.Memory(t.Context())
			require.NoError(t, err)
			want := 1
			if topo.name == "cluster" {
				want = 3
			}
			require.Len(t, mem, want)
			for _, m := range mem {
				assert.Positive(t, m.UsedBytes)
				assert.Equal(t, "noeviction", m.Policy)
			}
		})
	}
}

func TestCheckMaxMemory(t *testing.T) {
	const budget = 64 << 20
	srv, s := newDedicated(t, redis.Config{})
	ctx := t.Context()

	do(t, srv.Addr(), "CONFIG", "SET", "maxmemory", strconv.Itoa(budget/2))
	rep, err := s.CheckMaxMemory(ctx, budget)
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Len(t, rep.Nodes, 1)
	assert.Equal(t, int64(budget/2), rep.Nodes[0].MaxMemoryBytes)
	assert.Contains(t, rep.Warnings[0], "below the budget")

	do(t, srv.Addr(), "CONFIG", "SET", "maxmemory", strconv.Itoa(budget*2))
	rep, err = s.CheckMaxMemory(ctx, budget)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "%v", rep.Warnings)

	do(t, srv.Addr(), "CONFIG", "SET", "maxmemory", "0")
	rep, err = s.CheckMaxMemory(ctx, budget)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "maxmemory 0 is no limit: %v", rep.Warnings)

	do(t, srv.Addr(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	rep, err = s.CheckMaxMemory(ctx, budget)
	require.NoError(t, err)
	require.False(t, rep.OK())
	assert.Contains(t, rep.Warnings[0], "allkeys-lru")

	_, err = s.CheckMaxMemory(ctx, -1)
	require.ErrorIs(t, err, domain.ErrInvalidConfig)

	t.Run("Unreadable", func(t *testing.T) {
		// Managed services often disable CONFIG: a warning, not a failure.
		srv, s := newDedicated(t, redis.Config{}, "--rename-command", "CONFIG", "")
		rep, err := s.CheckMaxMemory(t.Context(), budget)
		require.NoError(t, err)
		require.False(t, rep.OK())
		require.Len(t, rep.Nodes, 1)
		assert.Error(t, rep.Nodes[0].Err)
		assert.Contains(t, rep.Warnings[0], "unreadable")
		require.NoError(t, s.Prober().Probe(t.Context()), "the probe needs no CONFIG")

		require.NoError(t, srv.Stop())
		rep, err = s.CheckMaxMemory(t.Context(), budget)
		require.NoError(t, err, "an unreachable server is a warning at boot")
		assert.False(t, rep.OK())
	})
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name  string
		cfg   redis.Config
		field string
	}{
		{"NoAddress", redis.Config{}, "redis.addrs"},
		{"AddrsAndURL", redis.Config{Addrs: []string{"a:1"}, URL: "redis://a:1"}, "redis.url"},
		{"BadURL", redis.Config{URL: "http://a:1"}, "redis.url"},
		{"EmptyAddr", redis.Config{Addrs: []string{""}}, "redis.addrs[0]"},
		{"NegativeTimeout", redis.Config{Addrs: []string{"a:1"}, Timeout: -1}, "redis.timeout"},
		{"NegativeDialTimeout", redis.Config{Addrs: []string{"a:1"}, DialTimeout: -1}, "redis.dial_timeout"},
		{"SubMillisecondMinTTL", redis.Config{Addrs: []string{"a:1"}, MinTTL: time.Microsecond}, "redis.min_ttl"},
		{"ClusterDB", redis.Config{Addrs: []string{"a:1"}, Mode: redis.ModeCluster, DB: 1}, "redis.db"},
		{"UnknownMode", redis.Config{Addrs: []string{"a:1"}, Mode: 9}, "redis.mode"},
		{"UnknownLogEncoding", redis.Config{Addrs: []string{"a:1"}, Log: 7}, "redis.log"},
		{"GraceBeyondAnyPeriod", redis.Config{Addrs: []string{"a:1"}, Grace: domain.MaxPeriod + time.Second}, "redis.grace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, c.field, ce.Field)
			_, err = redis.New(c.cfg)
			require.ErrorIs(t, err, domain.ErrInvalidConfig)
		})
	}
	require.NoError(t, redis.Config{URL: "redis://user:pw@127.0.0.1:6379/2"}.Validate())
}

// TestNewLoadsTheScriptOnEveryNode: the script is in every node's cache
// before the first decision, and LoadScript reloads it
// after a flush.
func TestNewLoadsTheScriptOnEveryNode(t *testing.T) {
	exists := func(addr string) int64 {
		v := do(t, addr, "SCRIPT", "EXISTS", lua.RateLimitV5SHA1)
		list, ok := v.([]any)
		require.True(t, ok, "SCRIPT EXISTS reply %T", v)
		require.Len(t, list, 1)
		return list[0].(int64)
	}
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.NewServer(t)
		s := newStore(t, redis.Config{Addrs: []string{srv.Addr()}, Timeout: testTimeout})
		assert.Equal(t, int64(1), exists(srv.Addr()))
		do(t, srv.Addr(), "SCRIPT", "FLUSH")
		require.Equal(t, int64(0), exists(srv.Addr()))
		require.NoError(t, s.LoadScript(t.Context()))
		assert.Equal(t, int64(1), exists(srv.Addr()))
	})
	t.Run("cluster", func(t *testing.T) {
		addrs := redistest.Cluster(t)
		for _, a := range addrs {
			do(t, a, "SCRIPT", "FLUSH")
		}
		newStore(t, topologies[1].cfg(t))
		for _, a := range addrs {
			assert.Equal(t, int64(1), exists(a), "node %s", a)
		}
	})
	t.Run("closed", func(t *testing.T) {
		s := newStore(t, topologies[0].cfg(t))
		require.NoError(t, s.Close())
		assert.ErrorIs(t, s.LoadScript(t.Context()), domain.ErrStoreClosed)
	})
}

// TestEvaluateRepeated: n identical requests in one call answer exactly
// as n sequential Evaluate calls on a twin key set (every request's own
// Result through domain.Repeated.For, and the state left behind), for
// both algorithms, cost > 1, n below, at and beyond what fits, and the
// largest n; n out of range is a *domain.LimitError.
func TestEvaluateRepeated(t *testing.T) {
	s := newStore(t, topologies[0].cfg(t))
	now := time.Now().Truncate(time.Second)
	windows := []domain.Window{
		sliding(10, time.Minute), gcra(10, time.Minute), sliding(50, 10*time.Second),
		gcra(7, 7*time.Second), sliding(2000, time.Minute), gcra(1000, time.Hour),
	}
	for _, n := range []int{1, 2, 3, 5, 6, 100, ports.MaxRepeat} {
		for _, cost := range []int64{1, 2} {
			t.Run(fmt.Sprintf("n=%d/cost=%d", n, cost), func(t *testing.T) {
				rep, seq := tag(t), tag(t)
				limitsOf := func(tg string) []domain.Limit {
					var ls []domain.Limit
					for i, w := range windows {
						ls = append(ls, domain.Limit{Key: fmt.Sprintf("rep:{%s}:%d", tg, i), Window: w, Cost: cost})
					}
					return ls
				}
				lr, ls := limitsOf(rep), limitsOf(seq)
				t.Cleanup(func() {
					for i := range lr {
						_ = s.Reset(context.Background(), lr[i].Key)
						_ = s.Reset(context.Background(), ls[i].Key)
					}
				})
				// Some units already spent, one key of each algorithm.
				for _, l := range []domain.Limit{{Key: lr[0].Key, Window: lr[0].Window, Cost: 3}, {Key: lr[1].Key, Window: lr[1].Window, Cost: 2}} {
					_, err := s.Evaluate(t.Context(), now.Add(-time.Second), []domain.Limit{l})
					require.NoError(t, err)
					l.Key = strings.Replace(l.Key, rep, seq, 1)
					_, err = s.Evaluate(t.Context(), now.Add(-time.Second), []domain.Limit{l})
					require.NoError(t, err)
				}
				got, err := s.EvaluateRepeated(t.Context(), now, lr, n)
				require.NoError(t, err)
				require.Equal(t, n, got.N)
				steps := min(n, 12) // past the admitted ones, every answer is the same refusal
				for i := range steps {
					want, err := s.Evaluate(t.Context(), now, ls)
					require.NoError(t, err)
					require.Equal(t, want, got.For(i, lr), "request %d of %d", i, n)
				}
				wantAdmitted := min(n, int((10-3)/cost), int((10-2)/cost))
				assert.Equal(t, wantAdmitted, got.Admitted)
				a, err := s.Peek(t.Context(), now, lr)
				require.NoError(t, err)
				b, err := s.Peek(t.Context(), now, ls)
				require.NoError(t, err)
				assert.Equal(t, b, a, "the state left behind")
			})
		}
	}
	t.Run("OutOfRange", func(t *testing.T) {
		limits := []domain.Limit{{Key: "rep:{x}", Window: gcra(1, time.Second), Cost: 1}}
		for _, n := range []int{0, -1, ports.MaxRepeat + 1} {
			_, err := s.EvaluateRepeated(t.Context(), now, limits, n)
			var le *domain.LimitError
			require.ErrorAs(t, err, &le, "n=%d", n)
			assert.Equal(t, "n", le.Field)
		}
	})
}

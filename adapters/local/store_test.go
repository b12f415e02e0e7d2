package local

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// t0 is the epoch of every timeline: a fixed instant, never the wall clock.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newStore(t testing.TB, cfg Config, opts ...Option) *Store {
	t.Helper()
	s, err := New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sliding(limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: domain.SlidingLog}
}

func gcra(limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: domain.GCRA}
}

func lim(key string, w domain.Window, cost int64) domain.Limit {
	return domain.Limit{Key: key, Window: w, Cost: cost}
}

// step is one request of a single-key timeline.
type step struct {
	at   time.Duration
	cost int64
	peek bool
	want domain.LimitStatus
}

func allowed(remaining int64, reset time.Duration) domain.LimitStatus {
	return domain.LimitStatus{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func refused(remaining int64, retry, reset time.Duration) domain.LimitStatus {
	return domain.LimitStatus{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func TestTimelines(t *testing.T) {
	ms, s := time.Millisecond, time.Second
	tests := []struct {
		name   string
		window domain.Window
		steps  []step
	}{
		{
			name:   "sliding log admits exactly the limit then slides",
			window: sliding(3, 10*s),
			steps: []step{
				{at: 0, cost: 1, want: allowed(2, 10*s)},
				{at: 1 * s, cost: 1, want: allowed(1, 10*s)},
				{at: 2 * s, cost: 1, want: allowed(0, 10*s)},
				// The oldest unit (t0) leaves at t0+10s; the newest at t0+12s.
				{at: 3 * s, cost: 1, want: refused(0, 7*s, 9*s)},
				{at: 10*s - time.Microsecond, cost: 1, want: refused(0, time.Microsecond, 2*s+time.Microsecond)},
				// (now-Period, now]: the unit admitted at t0 is out at t0+10s.
				{at: 10 * s, cost: 1, want: allowed(0, 10*s)},
				{at: 10 * s, cost: 1, want: refused(0, 1*s, 10*s)},
				{at: 11 * s, cost: 1, want: allowed(0, 10*s)},
			},
		},
		{
			name:   "sliding log cost above one",
			window: sliding(10, time.Minute),
			steps: []step{
				{at: 0, cost: 4, want: allowed(6, time.Minute)},
				{at: 10 * s, cost: 4, want: allowed(2, time.Minute)},
				// Needs 2 more units: the 4 of t0 leave at t0+60s.
				{at: 20 * s, cost: 4, want: refused(2, 40*s, 50*s)},
				{at: 20 * s, cost: 2, want: allowed(0, time.Minute)},
				// Needs 10 units back: every unit up to t0+20s must leave.
				{at: 30 * s, cost: 10, want: refused(0, 50*s, 50*s)},
				{at: 30 * s, cost: 1, peek: true, want: refused(0, 30*s, 50*s)},
			},
		},
		{
			name:   "gcra burst of the limit then one unit per emission interval",
			window: gcra(4, s), // T = 250ms
			steps: []step{
				{at: 0, cost: 1, want: allowed(3, 250*ms)},
				{at: 0, cost: 1, want: allowed(2, 500*ms)},
				{at: 0, cost: 1, want: allowed(1, 750*ms)},
				{at: 0, cost: 1, want: allowed(0, s)},
				{at: 0, cost: 1, want: refused(0, 250*ms, s)},
				{at: 250*ms - time.Microsecond, cost: 1, want: refused(0, time.Microsecond, 750*ms+time.Microsecond)},
				{at: 250 * ms, cost: 1, want: allowed(0, s)},
				{at: 2 * s, cost: 1, peek: true, want: allowed(4, 0)},
				{at: 2 * s, cost: 3, want: allowed(1, 750*ms)},
				{at: 2 * s, cost: 2, want: refused(1, 250*ms, 750*ms)},
			},
		},
		{
			name:   "gcra truncates the emission interval to the microsecond",
			window: gcra(3, s), // T = 333333µs
			steps: []step{
				{at: 0, cost: 3, want: allowed(0, 999999*time.Microsecond)},
				{at: 0, cost: 1, want: refused(0, 333333*time.Microsecond, 999999*time.Microsecond)},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t, Config{})
			for i, sp := range tc.steps {
				l := []domain.Limit{lim("k", tc.window, sp.cost)}
				call := st.Evaluate
				if sp.peek {
					call = st.Peek
				}
				r, err := call(t.Context(), at(sp.at), l)
				require.NoError(t, err, "step %d", i)
				assert.Equal(t, sp.want, r.Status(0), "step %d at t0+%v", i, sp.at)
				assert.Equal(t, sp.want.Allowed, r.Allowed, "step %d", i)
				assert.Equal(t, sp.want.Remaining, r.Remaining, "step %d", i)
				assert.Len(t, r.Statuses(), 1)
			}
		})
	}
}

func TestAllOrNothingAcrossNineKeys(t *testing.T) {
	for _, refusing := range []int{0, 3, 8} {
		t.Run(fmt.Sprintf("refusing key %d", refusing), func(t *testing.T) {
			st := newStore(t, Config{})
			limits := make([]domain.Limit, 9)
			for i := range limits {
				w := sliding(5, time.Minute)
				if i%2 == 1 {
					w = gcra(5, time.Minute)
				}
				// Keys out of sorted order, so the lock order differs from
				// the request order.
				limits[i] = lim(fmt.Sprintf("k%d", 8-i), w, 2)
			}
			// Exhaust one key alone.
			solo := limits[refusing]
			solo.Cost = 5
			r, err := st.Evaluate(t.Context(), at(0), []domain.Limit{solo})
			require.NoError(t, err)
			require.True(t, r.Allowed)

			r, err = st.Evaluate(t.Context(), at(time.Second), limits)
			require.NoError(t, err)
			assert.False(t, r.Allowed)
			assert.Equal(t, refusing, r.Limiting)
			assert.Len(t, r.Statuses(), 9)
			assert.Equal(t, int64(0), r.Remaining)
			for i, ps := range r.Statuses() {
				assert.Equal(t, i != refusing, ps.Allowed, "limit %d", i)
			}

			// Nothing was consumed on the eight others.
			for i, l := range limits {
				if i == refusing {
					continue
				}
				p, err := st.Peek(t.Context(), at(time.Second), []domain.Limit{l})
				require.NoError(t, err)
				assert.Equal(t, int64(5), p.Remaining, "key %s consumed by a refused request", l.Key)
			}

			// Once the refusing key recovers, all nine consume together.
			limits[refusing].Cost = 1
			r, err = st.Evaluate(t.Context(), at(2*time.Minute), limits)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			for i, ps := range r.Statuses() {
				want := int64(3)
				if i == refusing {
					want = 4
				}
				assert.Equal(t, want, ps.Remaining, "limit %d", i)
			}
		})
	}
}

func TestPeek(t *testing.T) {
	st := newStore(t, Config{})
	w := sliding(2, time.Minute)
	l := []domain.Limit{lim("p", w, 1)}

	r, err := st.Peek(t.Context(), at(0), l)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.Equal(t, int64(2), r.Remaining)
	assert.Equal(t, 0, st.Stats().Entries, "Peek created state for an unknown key")

	for range 2 {
		r, err = st.Evaluate(t.Context(), at(0), l)
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	for range 3 {
		r, err = st.Peek(t.Context(), at(time.Second), l)
		require.NoError(t, err)
		assert.False(t, r.Allowed)
		assert.Equal(t, 59*time.Second, r.RetryAfter)
	}
	r, err = st.Peek(t.Context(), at(time.Minute), l)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.Equal(t, int64(2), r.Remaining)
}

func TestReset(t *testing.T) {
	for _, w := range []domain.Window{sliding(2, time.Hour), gcra(2, time.Hour)} {
		t.Run(w.Algorithm.String(), func(t *testing.T) {
			st := newStore(t, Config{})
			a, b := lim("a", w, 2), lim("b", w, 2)
			for _, l := range []domain.Limit{a, b} {
				r, err := st.Evaluate(t.Context(), at(0), []domain.Limit{l})
				require.NoError(t, err)
				require.True(t, r.Allowed)
			}
			require.NoError(t, st.Reset(t.Context(), "a"))
			require.NoError(t, st.Reset(t.Context(), "never-seen"))

			r, err := st.Evaluate(t.Context(), at(time.Second), []domain.Limit{a})
			require.NoError(t, err)
			assert.True(t, r.Allowed, "reset key still throttled")
			r, err = st.Evaluate(t.Context(), at(time.Second), []domain.Limit{b})
			require.NoError(t, err)
			assert.False(t, r.Allowed, "Reset of a touched another key")

			var le *domain.LimitError
			assert.ErrorAs(t, st.Reset(t.Context(), ""), &le)
		})
	}
}

// TestAlgorithmChangeKeepsTheCount is issue 20's reproduction: 10 per
// 10 s, 6 units spent under one algorithm, then the other at the same
// instant. The store used to forget the other algorithm's state and admit
// 10 more (16 in one instant); rules S2 and S3 of docs/adr/009 admit 4.
func TestAlgorithmChangeKeepsTheCount(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after domain.Window
	}{
		{"sliding log then GCRA", sliding(10, 10*time.Second), gcra(10, 10*time.Second)},
		{"GCRA then sliding log", gcra(10, 10*time.Second), sliding(10, 10*time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newStore(t, Config{})
			r, err := st.Evaluate(t.Context(), at(0), []domain.Limit{lim("k", tt.before, 6)})
			require.NoError(t, err)
			require.True(t, r.Allowed)
			after := []domain.Limit{lim("k", tt.after, 1)}
			r, err = st.Peek(t.Context(), at(0), after)
			require.NoError(t, err)
			assert.Equal(t, int64(4), r.Remaining, "Peek reads the other algorithm's units")
			admitted := 0
			for range 12 {
				r, err := st.Evaluate(t.Context(), at(0), after)
				require.NoError(t, err)
				if r.Allowed {
					admitted++
				}
			}
			assert.Equal(t, 4, admitted, "admitted after the change, at the same instant")
		})
	}
}

func TestClockBackwardsNeverAdmitsMoreThanLimit(t *testing.T) {
	for _, w := range []domain.Window{sliding(3, time.Minute), gcra(3, time.Minute)} {
		t.Run(w.Algorithm.String(), func(t *testing.T) {
			st := newStore(t, Config{})
			l := []domain.Limit{lim("k", w, 1)}
			admitted := 0
			for _, d := range []time.Duration{10 * time.Second, 0, 5 * time.Second, -time.Hour, 10 * time.Second, 2 * time.Second} {
				r, err := st.Evaluate(t.Context(), at(d), l)
				require.NoError(t, err)
				if r.Allowed {
					admitted++
				}
			}
			assert.Equal(t, 3, admitted)
		})
	}
}

func TestClosedStore(t *testing.T) {
	st, err := New(Config{})
	require.NoError(t, err)
	l := []domain.Limit{lim("k", sliding(1, time.Second), 1)}
	_, err = st.Evaluate(t.Context(), at(0), l)
	require.NoError(t, err)

	require.NoError(t, st.Close())
	require.NoError(t, st.Close(), "Close must be idempotent")

	_, err = st.Evaluate(t.Context(), at(0), l)
	assert.ErrorIs(t, err, domain.ErrStoreClosed)
	_, err = st.Peek(t.Context(), at(0), l)
	assert.ErrorIs(t, err, domain.ErrStoreClosed)
	assert.ErrorIs(t, st.Reset(t.Context(), "k"), domain.ErrStoreClosed)
	assert.Equal(t, domain.CodeStoreUnavailable, domain.CodeOf(err))
}

func TestInvalidRequests(t *testing.T) {
	w := sliding(5, time.Second)
	many := make([]domain.Limit, domain.MaxLimits+1)
	for i := range many {
		many[i] = lim(fmt.Sprintf("m%d", i), w, 1)
	}
	tests := []struct {
		name   string
		limits []domain.Limit
		field  string
	}{
		{"no limits", nil, "limits"},
		{"too many limits", many, "limits"},
		{"empty key", []domain.Limit{lim("", w, 1)}, "key"},
		{"duplicate key", []domain.Limit{lim("a", w, 1), lim("a", w, 1)}, "key"},
		{"zero limit", []domain.Limit{lim("a", sliding(0, time.Second), 1)}, "limit"},
		{"negative limit", []domain.Limit{lim("a", gcra(-1, time.Second), 1)}, "limit"},
		{"period too short", []domain.Limit{lim("a", sliding(1, time.Microsecond), 1)}, "period"},
		{"zero cost", []domain.Limit{lim("a", w, 0)}, "cost"},
		{"cost above limit", []domain.Limit{lim("a", w, 6)}, "cost"},
		{"unknown algorithm", []domain.Limit{lim("a", domain.Window{Limit: 1, Period: time.Second, Algorithm: 9}, 1)}, "algorithm"},
	}
	st := newStore(t, Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, call := range []func(context.Context, time.Time, []domain.Limit) (domain.Result, error){st.Evaluate, st.Peek} {
				_, err := call(t.Context(), at(0), tc.limits)
				var le *domain.LimitError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, tc.field, le.Field)
				assert.ErrorIs(t, err, domain.ErrInvalidLimit)
			}
			assert.Equal(t, 0, st.Stats().Entries, "an invalid request created state")
		})
	}
}

func TestDoneContext(t *testing.T) {
	st := newStore(t, Config{})
	l := []domain.Limit{lim("k", sliding(1, time.Minute), 1)}

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), t0)
	defer cancel2()

	for _, tc := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		_, err := st.Evaluate(tc.ctx, at(0), l)
		assert.ErrorIs(t, err, tc.want)
		_, err = st.Peek(tc.ctx, at(0), l)
		assert.ErrorIs(t, err, tc.want)
		assert.ErrorIs(t, st.Reset(tc.ctx, "k"), tc.want)
	}
	r, err := st.Evaluate(t.Context(), at(0), l)
	require.NoError(t, err)
	assert.True(t, r.Allowed, "a cancelled call consumed")
}

func TestConfig(t *testing.T) {
	bad := []struct {
		cfg   Config
		opts  []Option
		field string
	}{
		{Config{MaxMemory: -1}, nil, "local.max_memory"},
		{Config{MaxMemory: MinMaxMemory - 1}, nil, "local.max_memory"},
		// ristretto's metrics take 9 MiB, more than half of this bound.
		{Config{MaxMemory: 16 << 20}, []Option{WithCacheMetrics()}, "local.max_memory"},
		{Config{SweepInterval: -time.Second}, nil, "local.sweep_interval"},
		{Config{SweepInterval: time.Microsecond}, nil, "local.sweep_interval"},
		{Config{IdleGrace: -time.Second}, nil, "local.idle_grace"},
		{Config{IdleGrace: domain.MaxPeriod + time.Second}, nil, "local.idle_grace"},
	}
	for _, tc := range bad {
		_, err := New(tc.cfg, tc.opts...)
		var ce *domain.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", tc.cfg)
		assert.Equal(t, tc.field, ce.Field)
		assert.True(t, errors.Is(err, domain.ErrInvalidConfig))
	}

	d := Config{}.withDefaults()
	assert.Equal(t, int64(DefaultMaxMemory), d.MaxMemory)
	assert.Equal(t, DefaultSweepInterval, d.SweepInterval)
	assert.Equal(t, DefaultIdleGrace, d.IdleGrace)
	for _, m := range []int64{MinMaxMemory, DefaultMaxMemory, 1 << 30} {
		p, err := newPlan(Config{MaxMemory: m}, options{})
		require.NoError(t, err)
		cache, out := p.shares(0)
		assert.Equal(t, m, p.fixed+cache+out, "the shares of %d bytes", m)
		assert.LessOrEqual(t, 4*p.counters, m/32, "the sketch of %d bytes", m)
		// The reservation of ristretto's index comes out of the shares.
		cache2, out2 := p.shares(1000)
		assert.Equal(t, m, p.reserved(1000)+cache2+out2)
	}
}

func TestSizeClass(t *testing.T) {
	for n, want := range map[int64]int64{0: 0, 1: 8, 8: 8, 9: 16, 86: 96, 500: 512, 512: 512, 513: 576, 32768: 32768, 32769: 40960} {
		assert.Equal(t, want, sizeClass(n), "sizeClass(%d)", n)
	}
	assert.Equal(t, int64(0), prevPow2(0))
	assert.Equal(t, int64(1024), prevPow2(2047))
	assert.Equal(t, int64(2048), prevPow2(2048))
}

// TestGrownLogIsCounted checks that a sliding log's size estimate follows
// its growth: one commit of a huge cost is one log entry, not a hundred
// thousand; a thousand commits at distinct instants hold a thousand
// entries, counted whether ristretto holds the key or it waits outside.
func TestGrownLogIsCounted(t *testing.T) {
	st := newStore(t, Config{})
	held := func() int64 {
		st.Wait()
		s := st.Stats()
		return s.CacheBytes + s.PendingBytes
	}
	big := []domain.Limit{lim("big", sliding(100_000, time.Hour), 100_000)}
	_, err := st.Evaluate(t.Context(), at(0), big)
	require.NoError(t, err)
	base := held()
	assert.Less(t, base, int64(1024))

	many := []domain.Limit{lim("many", sliding(1000, time.Hour), 1)}
	for i := range 1000 {
		r, err := st.Evaluate(t.Context(), at(time.Duration(i)*time.Millisecond), many)
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	grown := held() - base
	assert.Greater(t, grown, int64(1000*logEntryBytes), "the log's growth was not counted")
	assert.Less(t, grown, int64(4*1000*logEntryBytes))
	r, err := st.Peek(t.Context(), at(time.Second), many)
	require.NoError(t, err)
	assert.False(t, r.Allowed, "the grown key lost its state")

	// A grown key leaves ristretto's cache, to be admitted again at its
	// new size: once the sweeper has taken it out, its next access offers
	// it again.
	st.sweep()
	_, err = st.Peek(t.Context(), at(time.Second), many)
	require.NoError(t, err)
	st.Wait()
	stats := st.Stats()
	assert.Equal(t, 2, stats.Cached, "%+v", stats)
	assert.Zero(t, stats.Dropped)
}

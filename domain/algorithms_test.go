package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// step is one instant of a scripted timeline: at `at` (µs after t0), a
// request of `cost` units expects `ok`, `remaining`, and when refused
// `retry`.
type step struct {
	at        int64
	cost      int64
	ok        bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

const t0 = int64(1_700_000_000_000_000) // an arbitrary instant, in µs

// algorithm is what LogState and GCRAState have in common.
type algorithm interface {
	Check(now int64, w domain.Window, cost int64) domain.LimitStatus
	Committed(now int64, w domain.Window, cost int64, checked domain.LimitStatus) domain.LimitStatus
}

// replay runs a timeline on one key's state, committing what is allowed.
func replay(t *testing.T, s algorithm, w domain.Window, steps []step) {
	t.Helper()
	for i, st := range steps {
		now := t0 + st.at
		got := s.Check(now, w, st.cost)
		if got.Allowed {
			got = s.Committed(now, w, st.cost, got)
		}
		assert.Equal(t, st.ok, got.Allowed, "step %d allowed", i)
		assert.Equal(t, st.remaining, got.Remaining, "step %d remaining", i)
		assert.Equal(t, st.retry, got.RetryAfter, "step %d retry-after", i)
		assert.Equal(t, st.reset, got.ResetAfter, "step %d reset-after", i)
	}
}

func TestSlidingLogTimeline(t *testing.T) {
	w := domain.Window{Name: "burst", Limit: 3, Period: time.Second}
	steps := []step{
		{at: 0, cost: 1, ok: true, remaining: 2, reset: time.Second},
		{at: 100_000, cost: 1, ok: true, remaining: 1, reset: 1000 * time.Millisecond},
		{at: 200_000, cost: 1, ok: true, remaining: 0, reset: time.Second},
		// Full: the oldest unit (at 0) leaves at 1 s.
		{at: 300_000, cost: 1, ok: false, remaining: 0, retry: 700 * time.Millisecond, reset: 900 * time.Millisecond},
		// Two units need the two oldest to leave: at 1.1 s.
		{at: 300_000, cost: 2, ok: false, remaining: 0, retry: 800 * time.Millisecond, reset: 900 * time.Millisecond},
		// One microsecond before the oldest leaves: still full.
		{at: 999_999, cost: 1, ok: false, remaining: 0, retry: time.Microsecond, reset: 200_001 * time.Microsecond},
		// Exactly at t+period the unit has left the window (now-period, now].
		{at: 1_000_000, cost: 1, ok: true, remaining: 0, reset: time.Second},
		{at: 2_000_000, cost: 3, ok: true, remaining: 0, reset: time.Second},
		{at: 2_000_000, cost: 1, ok: false, remaining: 0, retry: time.Second, reset: time.Second},
	}
	replay(t, &domain.LogState{}, w, steps)
}

func TestSlidingLogClockBackwards(t *testing.T) {
	w := domain.Window{Limit: 2, Period: time.Second}
	var s domain.LogState
	for _, at := range []int64{t0, t0 - 5_000_000, t0 - 4_000_000, t0 + 10} {
		st := s.Check(at, w, 1)
		if st.Allowed {
			s.Committed(at, w, 1, st)
		}
	}
	// t0 and t0-5s are admitted; at t0-4s the window holds both (the future
	// unit counts) and refuses; at t0+10 the unit of t0-5s has left and one
	// more passes. Never more than the limit inside any window.
	assert.Equal(t, int64(2), s.Len())
	st := s.Check(t0+10, w, 1)
	assert.False(t, st.Allowed)
	assert.Greater(t, st.RetryAfter, time.Duration(0))
	assert.False(t, s.Idle(t0+10, w))
	assert.False(t, s.Idle(t0+1_000_000, w))
	assert.True(t, s.Idle(t0+1_000_010, w))
}

func TestSlidingLogMergesEqualInstants(t *testing.T) {
	w := domain.Window{Limit: 100, Period: time.Minute}
	var s domain.LogState
	for range 100 {
		st := s.Check(t0, w, 1)
		require.True(t, st.Allowed)
		s.Committed(t0, w, 1, st)
	}
	assert.Equal(t, int64(100), s.Len())
	s.Reset()
	assert.Equal(t, int64(0), s.Len())
	assert.True(t, s.Check(t0, w, 100).Allowed)
}

func TestGCRATimeline(t *testing.T) {
	// 4 per second: T = 250 ms, capacity 1 s.
	w := domain.Window{Name: "sustained", Limit: 4, Period: time.Second, Algorithm: domain.GCRA}
	steps := []step{
		{at: 0, cost: 1, ok: true, remaining: 3, reset: 250 * time.Millisecond},
		{at: 0, cost: 2, ok: true, remaining: 1, reset: 750 * time.Millisecond},
		{at: 0, cost: 1, ok: true, remaining: 0, reset: time.Second},
		{at: 0, cost: 1, ok: false, remaining: 0, retry: 250 * time.Millisecond, reset: time.Second},
		{at: 100_000, cost: 1, ok: false, remaining: 0, retry: 150 * time.Millisecond, reset: 900 * time.Millisecond},
		{at: 250_000, cost: 1, ok: true, remaining: 0, reset: time.Second},
		// Half a second later, two units have been emitted.
		{at: 750_000, cost: 3, ok: false, remaining: 2, retry: 250 * time.Millisecond, reset: 500 * time.Millisecond},
		{at: 750_000, cost: 2, ok: true, remaining: 0, reset: time.Second},
		// Idle for a long time: back to the full burst, no more.
		{at: 60_000_000, cost: 4, ok: true, remaining: 0, reset: time.Second},
	}
	replay(t, &domain.GCRAState{}, w, steps)
}

func TestGCRAClockBackwards(t *testing.T) {
	w := domain.Window{Limit: 3, Period: 3 * time.Second, Algorithm: domain.GCRA}
	var s domain.GCRAState
	admitted := 0
	for _, at := range []int64{t0, t0, t0, t0 - 10_000_000, t0 - 1, t0} {
		st := s.Check(at, w, 1)
		if st.Allowed {
			s.Committed(at, w, 1, st)
			admitted++
		}
	}
	assert.Equal(t, 3, admitted, "a clock going backwards admits nothing more")
	assert.False(t, s.Idle(t0))
	assert.True(t, s.Idle(t0+3_000_000))
}

func TestNewResult(t *testing.T) {
	mk := func(st ...domain.LimitStatus) domain.Result { return domain.NewResult(st) }
	allowed := mk(
		domain.LimitStatus{Allowed: true, Remaining: 5, ResetAfter: time.Second},
		domain.LimitStatus{Allowed: true, Remaining: 2, ResetAfter: time.Minute},
		domain.LimitStatus{Allowed: true, Remaining: 2, ResetAfter: time.Hour},
	)
	assert.True(t, allowed.Allowed)
	assert.Equal(t, 1, allowed.Limiting, "least remaining, lowest index on a tie")
	assert.Equal(t, int64(2), allowed.Remaining)
	assert.Equal(t, time.Duration(0), allowed.RetryAfter)
	assert.Equal(t, time.Minute, allowed.ResetAfter)
	assert.Len(t, allowed.Statuses(), 3)

	refused := mk(
		domain.LimitStatus{Allowed: true, Remaining: 0, ResetAfter: time.Second},
		domain.LimitStatus{Allowed: false, Remaining: 1, RetryAfter: 2 * time.Second, ResetAfter: 3 * time.Second},
		domain.LimitStatus{Allowed: false, Remaining: 0, RetryAfter: 5 * time.Second, ResetAfter: 6 * time.Second},
		domain.LimitStatus{Allowed: false, Remaining: 0, RetryAfter: 5 * time.Second, ResetAfter: 7 * time.Second},
	)
	assert.False(t, refused.Allowed)
	assert.Equal(t, 2, refused.Limiting, "longest retry-after among refusing limits, lowest index on a tie")
	assert.Equal(t, int64(0), refused.Remaining)
	assert.Equal(t, 5*time.Second, refused.RetryAfter)
	assert.Equal(t, 6*time.Second, refused.ResetAfter)
}

// TestSlidingLogSteadyStateStaysBounded: a log that keeps sliding neither
// loses exactness nor grows its backing array past a small multiple of
// what the window holds.
func TestSlidingLogSteadyStateStaysBounded(t *testing.T) {
	w := domain.Window{Limit: 100, Period: time.Second}
	var s domain.LogState
	admitted := 0
	for i := range int64(20_000) {
		now := t0 + i*2_500 // 400 attempts per second for a limit of 100
		st := s.Check(now, w, 1)
		if st.Allowed {
			s.Committed(now, w, 1, st)
			admitted++
		}
		require.LessOrEqual(t, s.Entries(), 100)
	}
	// 50 s of traffic: exactly 100 units per second.
	assert.Equal(t, 5_000, admitted)
	assert.LessOrEqual(t, s.Cap(), 2*100+64)
}

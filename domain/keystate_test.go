package domain_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

const sec = int64(time.Second / time.Microsecond)

// grace is the store grace of the KeyState tests: one minute, as the local
// store's default.
const grace = 60 * sec

func win(a domain.Algorithm, limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: a}
}

// spend evaluates cost-1 requests under w at now until one is refused or n
// were admitted, and returns how many were admitted.
func spend(k *domain.KeyState, now int64, w domain.Window, n int) int {
	for i := range n {
		st := k.Check(now, w, 1, grace)
		if !st.Allowed {
			return i
		}
		k.Committed(now, w, 1, grace, st)
	}
	return n
}

// TestKeyStateAcrossChanges scripts the changes of rules S1–S3 of
// docs/adr/009: a window's limit, period or algorithm changes on a key
// that holds units, and the key keeps them.
func TestKeyStateAcrossChanges(t *testing.T) {
	s := time.Second
	tests := []struct {
		name         string
		before       domain.Window
		spent        int
		at           int64 // µs after t0 of the second window's requests
		after        domain.Window
		wantAdmitted int
	}{
		// S1, the two examples that must hold in every store.
		{"GCRA limit lowered 10 to 5 after 8", win(domain.GCRA, 10, 10*s), 8, 0, win(domain.GCRA, 5, 10*s), 0},
		{"GCRA limit raised 5 to 10 after 5", win(domain.GCRA, 5, 10*s), 5, 0, win(domain.GCRA, 10, 10*s), 5},
		// S1 mid-window: 3 s after 8 units of 10 per 10 s, the TAT is 5 s
		// ahead: 5 units outstanding, at 2 s each under 5 per 10 s: full.
		{"GCRA limit lowered mid-window", win(domain.GCRA, 10, 10*s), 8, 3 * sec, win(domain.GCRA, 5, 10*s), 0},
		// Period doubled: 4 of 4 per 4 s (T 1 s) spent, read under 4 per
		// 8 s (T 2 s): 4 units outstanding, TAT' 8 s ahead: full.
		{"GCRA period doubled", win(domain.GCRA, 4, 4*s), 4, 0, win(domain.GCRA, 4, 8*s), 0},
		{"GCRA period halved", win(domain.GCRA, 4, 8*s), 2, 0, win(domain.GCRA, 4, 4*s), 2},
		// S4: a log's timestamps speak for themselves.
		{"log limit lowered", win(domain.SlidingLog, 10, 10*s), 6, 0, win(domain.SlidingLog, 5, 10*s), 0},
		{"log limit raised", win(domain.SlidingLog, 5, 10*s), 5, 0, win(domain.SlidingLog, 10, 10*s), 5},
		{"log period shortened mid-window", win(domain.SlidingLog, 5, 10*s), 5, 6 * sec, win(domain.SlidingLog, 5, 5*s), 5},
		// S2 and S3: issue 20's example, both directions.
		{"log to GCRA", win(domain.SlidingLog, 10, 10*s), 6, 0, win(domain.GCRA, 10, 10*s), 4},
		{"GCRA to log", win(domain.GCRA, 10, 10*s), 6, 0, win(domain.SlidingLog, 10, 10*s), 4},
		// S3 mid-window: 2.5 s after 6 GCRA units (T 1 s) the TAT is 3.5 s
		// ahead: 4 units outstanding (a partly drained unit counts whole).
		{"GCRA to log mid-window", win(domain.GCRA, 10, 10*s), 6, 2500 * 1000, win(domain.SlidingLog, 10, 10*s), 6},
		// S2 mid-window: the log's 6 units still count 5 s later.
		{"log to GCRA mid-window", win(domain.SlidingLog, 10, 10*s), 6, 5 * sec, win(domain.GCRA, 10, 10*s), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k domain.KeyState
			require.Equal(t, tt.spent, spend(&k, t0, tt.before, tt.spent), "setup")
			got := spend(&k, t0+tt.at, tt.after, 100)
			assert.Equal(t, tt.wantAdmitted, got, "admitted under the new window")
		})
	}
}

// TestKeyStateLimitRaisedFirstRequestSeesFourRemaining is issue 15's
// reproduction on the bare state: 5 of 5 per 10 s, then 10 per 10 s.
func TestKeyStateLimitRaisedFirstRequestSeesFourRemaining(t *testing.T) {
	var k domain.KeyState
	require.Equal(t, 5, spend(&k, t0, win(domain.GCRA, 5, 10*time.Second), 5))
	w := win(domain.GCRA, 10, 10*time.Second)
	st := k.Check(t0, w, 1, grace)
	require.True(t, st.Allowed, "first request under the raised limit")
	st = k.Committed(t0, w, 1, grace, st)
	assert.Equal(t, int64(4), st.Remaining)
	assert.Equal(t, 6*time.Second, st.ResetAfter)
}

// TestKeyStateCostAcrossAlgorithmChange: cost > 1 both ways, and the
// status of the first request after the change.
func TestKeyStateCostAcrossAlgorithmChange(t *testing.T) {
	s := time.Second
	logW, gcraW := win(domain.SlidingLog, 10, 10*s), win(domain.GCRA, 10, 10*s)
	var k domain.KeyState
	k.Committed(t0, logW, 6, grace, k.Check(t0, logW, 6, grace))
	st := k.Check(t0, gcraW, 5, grace)
	assert.False(t, st.Allowed, "cost 5 with 4 left")
	assert.Equal(t, domain.LimitStatus{Remaining: 4, RetryAfter: s, ResetAfter: 6 * s}, st)
	st = k.Committed(t0, gcraW, 4, grace, k.Check(t0, gcraW, 4, grace))
	assert.Equal(t, domain.LimitStatus{Allowed: true, Remaining: 0, ResetAfter: 10 * s}, st)
	assert.Equal(t, domain.GCRA, k.Algorithm())
	// Back to the log 1.5 s later: ⌈8.5 s / 1 s⌉ = 9 units outstanding.
	st = k.Check(t0+1500*1000, logW, 2, grace)
	assert.Equal(t, domain.LimitStatus{Remaining: 1, RetryAfter: 10 * s, ResetAfter: 10 * s}, st)
	st = k.Committed(t0+1500*1000, logW, 1, grace, k.Check(t0+1500*1000, logW, 1, grace))
	assert.Equal(t, domain.LimitStatus{Allowed: true, Remaining: 0, ResetAfter: 10 * s}, st)
	assert.Equal(t, domain.SlidingLog, k.Algorithm())
}

// TestGCRAFreshKeyBefore1970: the empty state is not a TAT of 0.
func TestGCRAFreshKeyBefore1970(t *testing.T) {
	w := win(domain.GCRA, 3, 3*time.Second)
	before := time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC).UnixMicro()
	var g domain.GCRAState
	st := g.Check(before, w, 3)
	assert.True(t, st.Allowed, "a fresh key admits its burst before 1970")
	assert.Equal(t, int64(3), st.Remaining)
	var k domain.KeyState
	assert.Equal(t, 3, spend(&k, before, w, 5))
}

// TestGCRAStateConversionIsBounded: a state converted to a longer
// emission interval reaches at most MaxPeriod ahead.
func TestGCRAStateConversionIsBounded(t *testing.T) {
	big := domain.Window{Limit: 1, Period: domain.MaxPeriod, Algorithm: domain.GCRA}
	g := domain.GCRAState{TAT: t0 + 1_000_000_000, Interval: 1}
	st := g.Check(t0, big, 1)
	assert.False(t, st.Allowed)
	assert.Equal(t, domain.Micros(domain.MaxPeriodMicros), st.ResetAfter, "capped at MaxPeriod")
}

// TestKeyStateGraceKeepsUnitsForLaggingCallers is issue 21's example: a
// limit of 2 per 10 s, 2 units at t0, 1 at t0+10 s, then a caller 6 s
// behind. Without grace the units of t0 were forgotten at t0+10 s and it
// admitted a third unit inside (t0−4 s, t0+4 s].
func TestKeyStateGraceKeepsUnitsForLaggingCallers(t *testing.T) {
	w := win(domain.SlidingLog, 2, 10*time.Second)
	for _, tt := range []struct {
		name  string
		grace int64
		want  bool
	}{
		{"grace of a minute", 60 * sec, false},
		{"grace of 7 s", 7 * sec, false},
		{"no grace: the units of t0 are gone", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var k domain.KeyState
			for _, at := range []int64{t0, t0, t0 + 10*sec} {
				st := k.Check(at, w, 1, tt.grace)
				require.True(t, st.Allowed)
				k.Committed(at, w, 1, tt.grace, st)
			}
			st := k.Check(t0+4*sec, w, 1, tt.grace)
			assert.Equal(t, tt.want, st.Allowed, "a caller 6 s behind the latest instant")
		})
	}
}

// TestKeyStateKeepsWhatTheLongestPeriodNeeds is issue 21's two-period
// key: a 1 h window, then a 1 s window on the same key, then the 1 h
// window again.
func TestKeyStateKeepsWhatTheLongestPeriodNeeds(t *testing.T) {
	hour, second := win(domain.SlidingLog, 1, time.Hour), win(domain.SlidingLog, 5, time.Second)
	var k domain.KeyState
	require.Equal(t, 1, spend(&k, t0, hour, 1))
	require.Equal(t, 1, spend(&k, t0+10*sec, second, 1))
	require.Equal(t, 1, spend(&k, t0+20*sec, second, 1))
	assert.False(t, k.Idle(t0+20*sec+2*sec), "the hour's unit still counts")
	assert.Equal(t, 0, spend(&k, t0+30*sec, hour, 1), "the 1 h window after the 1 s one")
	assert.True(t, k.Idle(t0+20*sec+time.Hour.Microseconds()))
}

// TestKeyStateFitMatchesSequentialRequests checks Fit against n sequential
// requests on random states of both algorithms, across changes.
func TestKeyStateFitMatchesSequentialRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	windows := []domain.Window{
		win(domain.SlidingLog, 10, 10*time.Second), win(domain.GCRA, 10, 10*time.Second),
		win(domain.GCRA, 7, 3*time.Second), win(domain.SlidingLog, 4, time.Second),
		win(domain.GCRA, 1000, time.Millisecond),
	}
	for i := range 2000 {
		var k domain.KeyState
		now := t0
		for range rng.IntN(6) {
			w := windows[rng.IntN(len(windows))]
			now += rng.Int64N(3 * sec)
			spend(&k, now, w, rng.IntN(12))
		}
		w := windows[rng.IntN(len(windows))]
		cost := 1 + rng.Int64N(w.Limit)
		now += rng.Int64N(2 * sec)
		k.Check(now, w, cost, grace)
		fit := k.Fit(now, w, cost, grace)
		n := int64(0)
		for {
			st := k.Check(now, w, cost, grace)
			if !st.Allowed {
				break
			}
			k.Committed(now, w, cost, grace, st)
			n++
		}
		require.Equal(t, n, fit, "case %d: Fit against sequential requests of cost %d under %+v", i, cost, w)
	}
}

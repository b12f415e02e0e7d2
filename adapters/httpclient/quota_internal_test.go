package httpclient

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

func TestWiden(t *testing.T) {
	log := func(l int64, p time.Duration) domain.Window {
		return domain.Window{Name: "quota", Limit: l, Period: p, Algorithm: domain.SlidingLog}
	}
	gcra := func(l int64, p time.Duration) domain.Window {
		return domain.Window{Name: "quota", Limit: l, Period: p, Algorithm: domain.GCRA}
	}
	tests := []struct {
		name   string
		w      domain.Window
		margin time.Duration
		want   domain.Window
	}{
		{name: "sliding log: the period plus the margin", w: log(5, time.Second), margin: 100 * time.Millisecond, want: log(5, 1100*time.Millisecond)},
		{name: "sliding log: the margin rounded up to the microsecond", w: log(5, time.Second), margin: time.Nanosecond, want: log(5, time.Second+time.Microsecond)},
		{name: "gcra: the burst gives up one emission interval", w: gcra(5, time.Second), margin: 100 * time.Millisecond, want: gcra(4, 800*time.Millisecond)},
		{name: "gcra: the burst gives up two emission intervals", w: gcra(5, time.Second), margin: 250 * time.Millisecond, want: gcra(3, 600*time.Millisecond)},
		{name: "gcra: the margin takes the whole burst", w: gcra(5, time.Second), margin: 800 * time.Millisecond, want: gcra(1, 200*time.Millisecond)},
		{name: "gcra without burst: one per interval plus the margin", w: gcra(1, time.Second), margin: 100 * time.Millisecond, want: gcra(1, 1100*time.Millisecond)},
		{name: "gcra: a margin past the burst slows the rate", w: gcra(2, 100*time.Millisecond), margin: 100 * time.Millisecond, want: gcra(1, 75*time.Millisecond)},
		{name: "gcra: the interval rounded up", w: gcra(3, time.Second), margin: 100 * time.Millisecond, want: gcra(2, 666668*time.Microsecond)},
		{name: "no margin", w: gcra(5, time.Second), margin: 0, want: gcra(5, time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, widen(tt.w, tt.margin))
		})
	}
}

// TestWidenKeepsArrivalsWithinTheUpstreamQuota checks the argument of the
// package documentation ("Margin") on simulated timelines: waiters decide
// on the widened window of a domain.KeyState as Wait does (each retrying
// at its refusal's retry instant, so that decisions crowd at the
// window's edges), and each admitted request reaches the upstream
// between 0 and margin after its decision (half the time at one end or
// the other). The upstream, counting arrivals against the window as
// configured, never sees more than its quota. The same timelines decided
// on the window as configured do overshoot: the check can fail.
func TestWidenKeepsArrivalsWithinTheUpstreamQuota(t *testing.T) {
	const margin = 100 * time.Millisecond
	windows := []domain.Window{
		{Name: "q", Limit: 5, Period: time.Second, Algorithm: domain.SlidingLog},
		{Name: "q", Limit: 2, Period: 300 * time.Millisecond, Algorithm: domain.SlidingLog},
		{Name: "q", Limit: 5, Period: time.Second, Algorithm: domain.GCRA},
		{Name: "q", Limit: 1, Period: time.Second, Algorithm: domain.GCRA},
		{Name: "q", Limit: 2, Period: 100 * time.Millisecond, Algorithm: domain.GCRA},
	}
	for _, w := range windows {
		t.Run(fmt.Sprintf("%s %d per %s", w.Algorithm, w.Limit, w.Period), func(t *testing.T) {
			unwidened := 0
			for seed := range uint64(20) {
				arrivals := simulate(seed, widen(w, margin), margin)
				assert.Zero(t, overshoots(arrivals, w), "seed %d: arrivals over the upstream's quota", seed)
				unwidened += overshoots(simulate(seed, w, margin), w)
			}
			assert.Positive(t, unwidened, "the window as configured lets arrivals moved by the margin overshoot")
		})
	}
}

// simulate returns the arrival instants (µs) at the upstream of requests
// that six waiters send for 30 s through window w, each arriving between
// 0 and margin after its decision.
func simulate(seed uint64, w domain.Window, margin time.Duration) []int64 {
	rng := rand.New(rand.NewPCG(seed, 37))
	m := int64(margin / time.Microsecond)
	var ks domain.KeyState
	next := make([]int64, 6)
	var arrivals []int64
	for {
		i := 0
		for j := range next {
			if next[j] < next[i] {
				i = j
			}
		}
		now := next[i]
		if now > int64(30*time.Second/time.Microsecond) {
			return arrivals
		}
		st := ks.Check(now, w, 1, w.PeriodMicros())
		if !st.Allowed {
			next[i] = now + max(int64(st.RetryAfter/time.Microsecond), 1)
			continue
		}
		ks.Committed(now, w, 1, w.PeriodMicros(), st)
		delay := rng.Int64N(m + 1)
		if rng.IntN(2) == 0 {
			delay = m * rng.Int64N(2)
		}
		arrivals = append(arrivals, now+delay)
		next[i] = now + rng.Int64N(int64(20*time.Millisecond/time.Microsecond))
	}
}

// overshoots counts the arrivals an upstream enforcing w on arrivals
// would refuse: for a sliding log, more than Limit in (a − Period, a];
// for GCRA (burst Limit, one every Period/Limit, exactly), two arrivals
// i < j, in order, closer than (j − i)·T − (Limit − 1)·T.
func overshoots(arrivals []int64, w domain.Window) int {
	a := slices.Sorted(slices.Values(arrivals))
	p, l := w.PeriodMicros(), w.Limit
	n := 0
	for j := range a {
		for i := range j {
			switch {
			case w.Algorithm == domain.SlidingLog && a[j]-a[i] < p && int64(j-i+1) > l:
				n++
			case w.Algorithm == domain.GCRA && l*(a[j]-a[i]) < int64(j-i-int(l)+1)*p:
				n++
			default:
				continue
			}
			break
		}
	}
	return n
}

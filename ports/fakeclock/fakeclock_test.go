package fakeclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ports/fakeclock"
)

func TestAdvanceFiresDueTicks(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := fakeclock.New(start)
	tk := c.NewTicker(10 * time.Second)
	assert.Equal(t, 1, c.Tickers())

	c.Advance(9 * time.Second)
	select {
	case <-tk.C():
		t.Fatal("ticked before its interval")
	default:
	}
	c.Advance(time.Second)
	select {
	case at := <-tk.C():
		assert.Equal(t, start.Add(10*time.Second), at)
	default:
		t.Fatal("no tick at the interval")
	}
	// Three intervals at once: one pending tick, as with time.Ticker.
	c.Advance(30 * time.Second)
	require.Len(t, tk.C(), 1)
	assert.Equal(t, start.Add(40*time.Second), c.Now())

	tk.Stop()
	assert.Equal(t, 0, c.Tickers())
	<-tk.C()
	c.Advance(time.Minute)
	assert.Len(t, tk.C(), 0, "no tick after Stop")
}

func TestBackwards(t *testing.T) {
	start := time.Unix(1000, 0)
	c := fakeclock.New(start)
	c.Advance(-time.Minute)
	assert.Equal(t, start.Add(-time.Minute), c.Now())
	c.Set(start)
	assert.Equal(t, start, c.Now())
}

func TestTimers(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		after []time.Duration // the timers, in creation order
		step  time.Duration   // one Advance
		fired []time.Time     // the instants delivered, per timer (zero: not fired)
	}{
		{name: "not yet due", after: []time.Duration{time.Second}, step: time.Second - time.Microsecond, fired: []time.Time{{}}},
		{name: "due exactly", after: []time.Duration{time.Second}, step: time.Second, fired: []time.Time{start.Add(time.Second)}},
		{name: "each at its own instant", after: []time.Duration{3 * time.Second, time.Second}, step: time.Minute,
			fired: []time.Time{start.Add(3 * time.Second), start.Add(time.Second)}},
		{name: "non-positive fires at once", after: []time.Duration{0, -time.Second}, step: 0, fired: []time.Time{start, start}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeclock.New(start)
			var timers []interface{ C() <-chan time.Time }
			for _, d := range tt.after {
				timers = append(timers, c.NewTimer(d))
			}
			c.Advance(tt.step)
			for i, tm := range timers {
				select {
				case at := <-tm.C():
					assert.Equal(t, tt.fired[i], at, "timer %d", i)
				default:
					assert.True(t, tt.fired[i].IsZero(), "timer %d did not fire", i)
				}
			}
			assert.Equal(t, start.Add(tt.step), c.Now())
		})
	}
}

func TestTimerStopAndCount(t *testing.T) {
	c := fakeclock.New(time.Unix(1000, 0))
	a, b := c.NewTimer(time.Second), c.NewTimer(2*time.Second)
	assert.Equal(t, 2, c.Timers())
	assert.True(t, a.Stop(), "a pending timer stops")
	assert.False(t, a.Stop(), "a second Stop has nothing to stop")
	assert.Equal(t, 1, c.Timers())
	c.Advance(2 * time.Second)
	assert.Len(t, a.C(), 0, "a stopped timer never fires")
	require.Len(t, b.C(), 1)
	assert.False(t, b.Stop(), "a fired timer does not stop")
	assert.Equal(t, 0, c.Timers())
}

// TestTimerBeforeTick: a timer and a tick due by one Advance fire in the
// order of their instants.
func TestTimerBeforeTick(t *testing.T) {
	start := time.Unix(1000, 0)
	c := fakeclock.New(start)
	tk := c.NewTicker(2 * time.Second)
	tm := c.NewTimer(time.Second)
	c.Advance(3 * time.Second)
	assert.Equal(t, start.Add(time.Second), <-tm.C())
	assert.Equal(t, start.Add(2*time.Second), <-tk.C())
}

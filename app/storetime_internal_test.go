package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStoreTimeCountsTheStoresTime: the store-time context of a call ends
// when the store has had its budget, the time the service could not run
// given back (docs/adr/008): at the budget without lag, later by the
// stolen time, at the shed bound when the stolen time passes it; the
// caller's end and stop end it at once, each with its reason.
func TestStoreTimeCountsTheStoresTime(t *testing.T) {
	const budget = 20 * time.Millisecond
	cases := []struct {
		name string
		// stolen is injected into the meter right after the start.
		stolen  time.Duration
		shed    time.Duration
		want    int32
		atLeast time.Duration
		below   time.Duration
	}{
		{"no lag: the budget", 0, time.Second, endStore, budget, 500 * time.Millisecond},
		{"lag given back", 40 * time.Millisecond, time.Second, endStore, budget + 40*time.Millisecond, 500 * time.Millisecond},
		{"lag past the shed bound", time.Hour, 80 * time.Millisecond, endShed, 80 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newLagMeter()
			defer m.close()
			start := time.Now()
			c := newStoreTime(context.Background(), m, start, budget, start.Add(tc.shed))
			// One stall of that length, within the call.
			m.stolen.Add(m.stall(start.Add(tc.stolen).UnixNano(), int64(tc.stolen)))
			<-c.Done()
			took := time.Since(start)
			assert.Equal(t, tc.want, c.stop())
			require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
			assert.GreaterOrEqual(t, took, tc.atLeast)
			assert.Less(t, took, tc.below, "a bound, not a hang")
			dl, ok := c.Deadline()
			assert.True(t, ok)
			assert.Equal(t, start.Add(budget), dl, "the deadline of a service that is not starved")
		})
	}
	t.Run("caller ends first", func(t *testing.T) {
		m := newLagMeter()
		defer m.close()
		parent, cancel := context.WithCancel(context.Background())
		c := newStoreTime(parent, m, time.Now(), time.Hour, time.Now().Add(time.Hour))
		cancel()
		<-c.Done()
		assert.ErrorIs(t, c.Err(), context.Canceled)
		assert.Equal(t, endCaller, c.stop())
	})
	t.Run("caller already gone", func(t *testing.T) {
		m := newLagMeter()
		defer m.close()
		parent, cancel := context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		c := newStoreTime(parent, m, time.Now(), time.Hour, time.Now().Add(time.Hour))
		assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
		assert.Equal(t, endCaller, c.stop())
	})
	t.Run("stopped", func(t *testing.T) {
		m := newLagMeter()
		defer m.close()
		type key struct{}
		parent := context.WithValue(context.Background(), key{}, "v")
		c := newStoreTime(parent, m, time.Now(), time.Hour, time.Now().Add(time.Hour))
		assert.NoError(t, c.Err())
		assert.Equal(t, "v", c.Value(key{}))
		assert.Equal(t, endCalled, c.stop())
		assert.ErrorIs(t, c.Err(), context.Canceled)
		assert.Zero(t, m.users.Load(), "released")
	})
}

// TestLagMeterCountsAStall: a stretch in which the meter cannot look at
// the clock counts as stolen, even before the meter runs again; a stall
// both witnesses see counts once.
func TestLagMeterCountsAStall(t *testing.T) {
	m := newLagMeter()
	// As if the meter ran, had last looked 30 ms ago and could not run
	// since (no goroutine of its own here: nothing moves last).
	m.running.Store(true)
	now := time.Now().UnixNano()
	m.last.Store(now - int64(30*time.Millisecond))
	got := lagMark{}.since(m.now(now))
	assert.GreaterOrEqual(t, got, 29*time.Millisecond)
	assert.Less(t, got, 31*time.Millisecond)
	m.pending.Store(now - int64(20*time.Millisecond))
	got = lagMark{}.since(m.now(now))
	assert.Less(t, got, 31*time.Millisecond, "the larger witness, not the sum")
}

// TestLagGivenBackIsBounded: a call gets back no more than lagHops times
// the longest stall during it, however many stalls the witnesses
// counted: a service whose cores are busy delays a call's reply once per
// hop, not at every tick.
func TestLagGivenBackIsBounded(t *testing.T) {
	m := newLagMeter()
	m.close() // no witness of its own: only the stalls recorded here count
	start := time.Now().Add(-100 * time.Millisecond)
	c := newStoreTime(context.Background(), m, start, time.Hour, start.Add(time.Hour))
	defer c.stop()
	for i := range 10 { // ten stalls of 8 ms, 80 ms counted
		end := start.Add(time.Duration(10*(i+1)) * time.Millisecond).UnixNano()
		m.stolen.Add(m.stall(end, int64(8*time.Millisecond)))
	}
	got := c.lagged()
	assert.GreaterOrEqual(t, got, lagHops*8*time.Millisecond-time.Millisecond)
	assert.LessOrEqual(t, got, lagHops*8*time.Millisecond+2*time.Millisecond, "lagHops × the longest, not the 80 ms sum")
}

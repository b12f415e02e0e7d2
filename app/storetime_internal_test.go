package app

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ports"
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
			m := newLagMeter(DefaultShedAfter)
			defer m.close()
			start := time.Now()
			c := newStoreTime(context.Background(), m, start, budget, start.Add(tc.shed), false)
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
			assert.Equal(t, start.Add(tc.shed), dl, "the latest instant it can end: the shed bound")
		})
	}
	t.Run("caller ends first", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		parent, cancel := context.WithCancel(context.Background())
		c := newStoreTime(parent, m, time.Now(), time.Hour, time.Now().Add(time.Hour), false)
		cancel()
		<-c.Done()
		assert.ErrorIs(t, c.Err(), context.Canceled)
		assert.Equal(t, endCaller, c.stop())
	})
	t.Run("caller already gone", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		parent, cancel := context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		c := newStoreTime(parent, m, time.Now(), time.Hour, time.Now().Add(time.Hour), false)
		assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
		assert.Equal(t, endCaller, c.stop())
	})
	t.Run("stopped", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		type key struct{}
		parent := context.WithValue(context.Background(), key{}, "v")
		c := newStoreTime(parent, m, time.Now(), time.Hour, time.Now().Add(time.Hour), false)
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
	m := newLagMeter(DefaultShedAfter)
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
	m := newLagMeter(DefaultShedAfter)
	m.close() // no witness of its own: only the stalls recorded here count
	start := time.Now().Add(-100 * time.Millisecond)
	c := newStoreTime(context.Background(), m, start, time.Hour, start.Add(time.Hour), false)
	defer c.stop()
	for i := range 10 { // ten stalls of 8 ms, 80 ms counted
		end := start.Add(time.Duration(10*(i+1)) * time.Millisecond).UnixNano()
		m.stolen.Add(m.stall(end, int64(8*time.Millisecond)))
	}
	got := c.lagged()
	assert.GreaterOrEqual(t, got, lagHops*8*time.Millisecond-time.Millisecond)
	assert.LessOrEqual(t, got, lagHops*8*time.Millisecond+2*time.Millisecond, "lagHops × the longest, not the 80 ms sum")
}

// TestStoreTimeWaitsForTheDispatch: for a store that queues its calls
// (ports.Dispatcher), the budget starts when the store sends the call
// (ports.Dispatched): a call still queued is ended by the shed bound
// only, and once sent it gets its whole budget from then (issue 35).
func TestStoreTimeWaitsForTheDispatch(t *testing.T) {
	const budget = 20 * time.Millisecond
	t.Run("queued past the budget, then sent", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		start := time.Now()
		c := newStoreTime(context.Background(), m, start, budget, start.Add(time.Second), true)
		select {
		case <-c.Done():
			t.Fatalf("ended while queued: %v", c.Err())
		case <-time.After(3 * budget):
		}
		sent := time.Now()
		ports.Dispatched(c, nil)
		ports.Dispatched(c, nil) // only the first counts
		<-c.Done()
		assert.Equal(t, endStore, c.stop())
		assert.GreaterOrEqual(t, time.Since(sent), budget, "the budget counts from the dispatch")
	})
	t.Run("never sent: the shed bound", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		start := time.Now()
		c := newStoreTime(context.Background(), m, start, budget, start.Add(4*budget), true)
		<-c.Done()
		assert.GreaterOrEqual(t, time.Since(start), 4*budget)
		assert.Equal(t, endShed, c.stop())
	})
	t.Run("found through a derived context", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		start := time.Now()
		c := newStoreTime(context.Background(), m, start, budget, start.Add(time.Second), true)
		derived, cancel := context.WithCancel(c)
		defer cancel()
		ports.Dispatched(derived, nil)
		<-c.Done()
		assert.Equal(t, endStore, c.stop())
	})
	t.Run("a context that does not wait ignores it", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		start := time.Now().Add(-budget)
		c := newStoreTime(context.Background(), m, start, budget, start.Add(time.Second), false)
		ports.Dispatched(c, nil)
		<-c.Done()
		assert.Equal(t, endStore, c.stop())
		assert.Less(t, time.Since(start), 500*time.Millisecond)
	})
}

// TestStallLogRemembersByTime: the lag meter keeps a call's early stall
// however many stalls follow it within the shed bound (a busy process
// records one every few milliseconds on each witness; a record of 256
// forgot a long call's first stall, issue 35), and forgets what ended
// before the call began.
func TestStallLogRemembersByTime(t *testing.T) {
	var log stallLog
	log.init(DefaultShedAfter)
	start := time.Now().UnixNano()
	log.add(start-int64(50*time.Millisecond), int64(40*time.Millisecond)) // before the call
	log.add(start+int64(30*time.Millisecond), int64(25*time.Millisecond))
	for i := range 5000 { // a stall of 2 ms every 0.3 ms, for 1.5 s
		log.add(start+int64(31*time.Millisecond)+int64(i)*int64(300*time.Microsecond), int64(2*time.Millisecond))
	}
	end := start + int64(1600*time.Millisecond)
	assert.Equal(t, int64(25*time.Millisecond), log.longest(start), "the early stall, remembered")
	assert.Equal(t, int64(2*time.Millisecond), log.longest(start+int64(40*time.Millisecond)))
	assert.Zero(t, log.longest(end), "nothing after")
	assert.Equal(t, int64(40*time.Millisecond), log.longest(start-int64(100*time.Millisecond)), "a stall before the call, from before it")
	var one stallLog
	one.init(DefaultShedAfter)
	one.add(start, int64(40*time.Millisecond))
	assert.Equal(t, int64(10*time.Millisecond), one.longest(start-int64(10*time.Millisecond)), "the part of a stall after the start")
}

// answers is a ports.Progress a test moves by hand.
type answers struct{ at, floor atomic.Int64 }

func (a *answers) Answered() (int64, time.Duration) {
	return a.at.Load(), time.Duration(a.floor.Load())
}

// TestStoreTimeFollowsTheNodesAnswers: a call sent to a node that keeps
// answering the calls ahead of it is not late while each answer comes
// within the budget of the one before (it waits in the node's input
// behind them, docs/adr/008); once the node stops answering, the call
// ends one budget after its last answer. A node whose every answer comes
// late (its latency floor above the budget: a slow link) gives no such
// credit.
func TestStoreTimeFollowsTheNodesAnswers(t *testing.T) {
	const budget = 30 * time.Millisecond
	t.Run("fast node, calls ahead", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		node := &answers{}
		node.floor.Store(int64(time.Millisecond))
		start := time.Now()
		c := newStoreTime(context.Background(), m, start, budget, start.Add(5*time.Second), true)
		ports.Dispatched(c, node)
		node.at.Store(time.Now().UnixNano())
		for range 6 { // answers every budget/2 for 3 budgets
			select {
			case <-c.Done():
				t.Fatalf("ended while the node answered: %v", c.Err())
			case <-time.After(budget / 2):
			}
			node.at.Store(time.Now().UnixNano())
		}
		last := time.Now()
		<-c.Done()
		assert.Equal(t, endStore, c.stop())
		assert.GreaterOrEqual(t, time.Since(last), budget-time.Millisecond, "one budget after the last answer")
		assert.Less(t, time.Since(last), 20*budget, "a bound, not a hang")
	})
	t.Run("slow link", func(t *testing.T) {
		m := newLagMeter(DefaultShedAfter)
		defer m.close()
		node := &answers{}
		node.floor.Store(int64(2 * budget))
		start := time.Now()
		c := newStoreTime(context.Background(), m, start, budget, start.Add(5*time.Second), true)
		ports.Dispatched(c, node)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				node.at.Store(time.Now().UnixNano())
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		<-c.Done()
		assert.Equal(t, endStore, c.stop())
		assert.Less(t, time.Since(start), 10*budget, "answers of a slow link extend nothing")
	})
}

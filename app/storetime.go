package app

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// The store deadline is the store's (docs/adr/008-failure-classes-and-breaker.md,
// "The store deadline is the store's"). A decision's store call gets
// Config.StoreTimeout of the store's time: wall time during the call
// minus the time the service itself could not run a goroutine (its CPU
// saturated by its own work or by another process), which lagMeter
// measures. A call still waiting when Config.ShedAfter has passed since
// the decision first waited for the store ends as a shed (ErrOverloaded),
// not as a store timeout: the instance, not the store, is what is late.

// ErrOverloaded is wrapped by the error of a decision that waited for the
// primary store past Config.ShedAfter (the instance is saturated). It is
// not the store's failure: it counts toward no breaker, and the decision
// is refused (DeniedDegraded, cause overloaded) without the degraded
// matrix. Its code is domain.CodeOverloaded.
var ErrOverloaded = domain.ErrOverloaded

// lagStall is the least wait a witness counts: the steady queueing of a
// busy service (a millisecond or two per wakeup) delays a call's reply
// once, not at every tick of the call, and is not given back; a stall
// of the process or of its scheduler (a wait of several milliseconds)
// delays everything the call needs, and is.
const lagStall = 2 * time.Millisecond

// lagIdle is how many ticks (lagTick, breaker.go) without a store call in flight the lag meter
// runs before it stops: an idle service pays nothing for it.
const lagIdle = 1000

// lagMeter measures, while store calls are in flight, the time the
// service could not run a goroutine of its own: what a store deadline
// gives back. Two witnesses, each counting what it waits beyond lagTick
// when it waits lagStall or more:
//
//   - a goroutine that wants to look at the wall clock every lagTick (a
//     timer wakes it): the process, or its thread, descheduled by the
//     operating system;
//   - a goroutine woken through the network poller by a byte the first
//     writes to a pipe, as a store client's reader is woken by a reply:
//     the time a ready goroutine waits behind the service's own work
//     (the Go scheduler polls the network only between other goroutines,
//     every 10 ms at worst, and runs what it finds after the queued
//     ones), which is what delays a reply that Redis sent in time.
//
// It runs only while calls use it (acquire, release), and stops after
// lagIdle idle ticks.
type lagMeter struct {
	stolen  atomic.Int64 // ns the ticking witness waited, since the meter began
	polled  atomic.Int64 // ns the polled witness waited, since the meter began
	last    atomic.Int64 // wall ns of the ticking goroutine's last look
	pending atomic.Int64 // wall ns of the byte the polled goroutine has not read yet; 0 without
	// stalls keeps the latest stalls (their end and length, ns) for
	// longest: what one call's waits cannot exceed.
	stalls  [lagStalls]atomic.Pointer[stallRec]
	nstalls atomic.Uint64
	users   atomic.Int64
	running atomic.Bool
	closed  atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// lagStalls is how many stalls the meter keeps for longest: more than a
// store call under ShedAfter meets (a stall lasts 5 ms or more).
const lagStalls = 256

// lagHops is how many times one store call waits for the service to run
// it: the batch's goroutine or the caller, the client's writer, the
// reply's reader, the caller's wakeup.
const lagHops = 4

// stallRec is one stall a witness counted.
type stallRec struct{ end, dur int64 }

func newLagMeter() *lagMeter { return &lagMeter{stop: make(chan struct{})} }

// lagMark is what each witness had counted at one instant.
type lagMark struct{ ticked, polled int64 }

// since is the time the service could not run between mark and now:
// the larger of the two witnesses' counts, since both see a stall of the
// whole process, and summing them would count it twice.
func (mark lagMark) since(now lagMark) time.Duration {
	return time.Duration(max(now.ticked-mark.ticked, now.polled-mark.polled))
}

// acquire registers a call that reads the meter, starting it if needed,
// and returns what the witnesses counted so far.
func (m *lagMeter) acquire() lagMark {
	m.users.Add(1)
	if !m.running.Load() && !m.closed.Load() && m.running.CompareAndSwap(false, true) {
		m.last.Store(time.Now().UnixNano())
		m.wg.Add(1)
		go m.run()
	}
	return m.now(time.Now().UnixNano())
}

// release ends a call that acquired the meter.
func (m *lagMeter) release() { m.users.Add(-1) }

// now is what the witnesses counted at wall instant t (ns), the waits
// they are in included: a meter that cannot run is itself the measure.
func (m *lagMeter) now(t int64) lagMark {
	mark := lagMark{ticked: m.stolen.Load(), polled: m.polled.Load()}
	if !m.running.Load() {
		return mark
	}
	mark.ticked += stalled(t - m.last.Load())
	if p := m.pending.Load(); p != 0 {
		mark.polled += stalled(t - p)
	}
	return mark
}

func (m *lagMeter) run() {
	defer m.wg.Done()
	r, w, err := os.Pipe()
	if err == nil {
		m.wg.Add(1)
		go m.poll(r)
		defer w.Close()
	}
	tk := time.NewTicker(lagTick)
	defer tk.Stop()
	idle := 0
	one := []byte{0}
	for {
		select {
		case <-m.stop:
			m.running.Store(false)
			return
		case <-tk.C:
		}
		t := time.Now().UnixNano()
		m.stolen.Add(m.stall(t, stalled(t-m.last.Load())))
		m.last.Store(t)
		if err == nil && m.pending.CompareAndSwap(0, t) {
			if _, werr := w.Write(one); werr != nil {
				m.pending.Store(0)
			}
		}
		if m.users.Load() > 0 {
			idle = 0
			continue
		}
		if idle++; idle < lagIdle {
			continue
		}
		m.running.Store(false)
		// A call that acquired meanwhile may have seen it running.
		if m.users.Load() == 0 || !m.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// poll is the witness woken through the network poller: it reads the
// pipe until its writer closes it, counting each byte's wait.
func (m *lagMeter) poll(r *os.File) {
	defer m.wg.Done()
	defer r.Close()
	buf := make([]byte, 64)
	for {
		if _, err := r.Read(buf); err != nil {
			m.pending.Store(0)
			return
		}
		if p := m.pending.Swap(0); p != 0 {
			t := time.Now().UnixNano()
			m.polled.Add(m.stall(t, stalled(t-p)))
		}
	}
}

// overdue reports whether a witness is in a stall at wall instant t
// (ns): the service cannot run a goroutine woken by a timer or by the
// network poller now.
func (m *lagMeter) overdue(t int64) bool {
	if !m.running.Load() {
		return false
	}
	p := m.pending.Load()
	return stalled(t-m.last.Load()) > 0 || (p != 0 && stalled(t-p) > 0)
}

// stall records a stall of d ns that ended at t (none when d is 0) and
// returns d.
func (m *lagMeter) stall(t, d int64) int64 {
	if d > 0 {
		m.stalls[m.nstalls.Add(1)%lagStalls].Store(&stallRec{end: t, dur: d})
	}
	return d
}

// longest is the longest stall, or part of one, since wall instant
// start (ns), up to t: the ones kept, and the waits the witnesses are in.
func (m *lagMeter) longest(start, t int64) int64 {
	var worst int64
	for i := range m.stalls {
		if r := m.stalls[i].Load(); r != nil && r.end > start {
			worst = max(worst, min(r.dur, r.end-start))
		}
	}
	if m.running.Load() {
		worst = max(worst, min(stalled(t-m.last.Load()), t-start))
		if p := m.pending.Load(); p != 0 {
			worst = max(worst, min(stalled(t-p), t-start))
		}
	}
	return worst
}

// stalled is what a witness that waited wait ns (for a look due every
// lagTick) counts: the wait beyond the tick, when it is a stall.
func stalled(wait int64) int64 {
	if wait < int64(lagStall) {
		return 0
	}
	return wait - int64(lagTick)
}

// close stops the meter for good: calls made later get no lag back.
func (m *lagMeter) close() {
	if m.closed.CompareAndSwap(false, true) {
		close(m.stop)
	}
	m.wg.Wait()
}

// Why a store-time context ended.
const (
	endNone   int32 = iota
	endStore        // the store used its StoreTimeout: a store timeout
	endShed         // ShedAfter passed first: the instance is overloaded
	endCaller       // the caller's context ended
	endCalled       // the call returned (stop)
)

// storeTime is the context of one store call: done when the store has
// used its budget of store time (endStore: at the shed bound too, when
// the store had its budget by then), when the shed bound passes with the
// store's budget not used up (endShed), or when the parent ends
// (endCaller), whichever is first. Deadline reports the earliest instant
// it may end (start + budget, or the parent's deadline if earlier): a
// socket deadline set from it is the store deadline of a service that is
// not starved. It is safe for simultaneous use.
type storeTime struct {
	parent context.Context
	lag    *lagMeter
	start  time.Time
	base   lagMark
	budget time.Duration
	shedAt time.Time
	dl     time.Time

	done       chan struct{}
	why        atomic.Int32
	mu         sync.Mutex // guards err, timer re-arming and the end
	err        error
	timer      *time.Timer
	stopParent func() bool
	released   atomic.Bool // the lag meter, once
}

var _ context.Context = (*storeTime)(nil)

// newStoreTime starts a store call's context at wall instant start:
// budget of store time, shed at shedAt.
func newStoreTime(parent context.Context, lag *lagMeter, start time.Time, budget time.Duration, shedAt time.Time) *storeTime {
	c := &storeTime{
		parent: parent, lag: lag, start: start, base: lag.acquire(), budget: budget, shedAt: shedAt,
		dl: start.Add(budget), done: make(chan struct{}),
	}
	if d, ok := parent.Deadline(); ok && d.Before(c.dl) {
		c.dl = d
	}
	if err := parent.Err(); err != nil {
		c.end(endCaller, err)
		return c
	}
	if !time.Now().Before(c.dl) {
		// Born past its budget (as context.WithDeadline is born done).
		c.check()
		if c.why.Load() != endNone {
			c.stopParent = func() bool { return true }
			return c
		}
	}
	c.mu.Lock()
	c.timer = time.AfterFunc(min(budget, time.Until(shedAt)), c.check)
	c.mu.Unlock()
	c.stopParent = context.AfterFunc(parent, func() { c.end(endCaller, parent.Err()) })
	return c
}

// check runs when the budget may be used: it ends the context, or
// re-arms for the store time still due.
func (c *storeTime) check() {
	now := time.Now()
	spent := now.Sub(c.start) - c.lagged()
	switch {
	case spent >= c.budget && c.lag.overdue(now.UnixNano()) && now.Before(c.shedAt):
		// The service cannot run right now: a reply may be waiting in
		// the socket for a reader that has not been scheduled. Look
		// again once it runs.
	case spent >= c.budget:
		c.end(endStore, context.DeadlineExceeded)
		return
	case !now.Before(c.shedAt):
		c.end(endShed, context.DeadlineExceeded)
		return
	}
	c.mu.Lock()
	if c.why.Load() == endNone && c.timer != nil {
		c.timer.Reset(max(min(c.budget-spent, c.shedAt.Sub(now)), lagTick))
	}
	c.mu.Unlock()
}

// end ends the context for why, once.
func (c *storeTime) end(why int32, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.why.Load() != endNone {
		return
	}
	c.err = err
	c.why.Store(why)
	close(c.done)
}

// stop releases the context once the call has returned, as a CancelFunc
// does, and reports why it ended: endCalled when it had not.
func (c *storeTime) stop() int32 {
	c.end(endCalled, context.Canceled)
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if c.stopParent != nil {
		c.stopParent()
	}
	if c.released.CompareAndSwap(false, true) {
		c.lag.release()
	}
	return c.why.Load()
}

// lagged is the time the service could not run since the context
// started, as far as it delayed the call: the stalls the lag meter
// counted, but no more than lagHops times the longest of them. A call
// waits for the service a few times (lagHops), not at every tick: a
// service that polls the network only every 10 ms (its cores busy)
// stalls a witness at every tick, and the call's reply once.
func (c *storeTime) lagged() time.Duration {
	now := time.Now().UnixNano()
	sum := c.base.since(c.lag.now(now))
	return min(sum, time.Duration(lagHops*c.lag.longest(c.start.UnixNano(), now)))
}

// Deadline is the store deadline of a service that is not starved, or
// the parent's if earlier.
func (c *storeTime) Deadline() (time.Time, bool) { return c.dl, true }

// Done is closed when the context ends.
func (c *storeTime) Done() <-chan struct{} { return c.done }

// Err is nil until the context ends; then context.DeadlineExceeded (the
// budget or the shed bound), the parent's error, or context.Canceled
// after stop.
func (c *storeTime) Err() error {
	if c.why.Load() == endNone {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value is the parent's.
func (c *storeTime) Value(key any) any { return c.parent.Value(key) }

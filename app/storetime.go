package app

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
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
	// polledWrite is when the byte the polled goroutine read last was
	// written (wall ns).
	polledWrite atomic.Int64
	// stalls keeps the stalls of the last lagMemory for longest: what
	// one call's waits cannot exceed.
	stalls  stallLog
	users   atomic.Int64
	running atomic.Bool
	closed  atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// lagHops is how many times one store call waits for the service to run
// it: the batch's goroutine or the caller, the client's writer, the
// reply's reader, the caller's wakeup.
const lagHops = 4

// newLagMeter returns a meter that remembers the stalls of the last
// memory: at least the longest a call it measures can last (the shed
// bound).
func newLagMeter(memory time.Duration) *lagMeter {
	m := &lagMeter{stop: make(chan struct{})}
	m.stalls.init(memory)
	return m
}

// stallLog keeps the longest stall that ended in each span of width of
// the last memory: a record bounded by time, not by a count of stalls,
// which a busy process (a stall every few milliseconds on each witness)
// would fill long before its longest call ends, forgetting the call's
// early stalls (issue 35). Its methods are safe for simultaneous use.
type stallLog struct {
	mu     sync.Mutex
	width  int64        // ns per span
	spans  []stallRec   // span b is at spans[b%len(spans)] while it is b
	latest atomic.Int64 // the latest end recorded
}

// latestEnd is when the latest stall recorded ended (wall ns; 0: none).
func (s *stallLog) latestEnd() int64 { return s.latest.Load() }

// stallRec is the longest stall that ended in span b: its end and length
// (ns).
type stallRec struct{ b, end, dur int64 }

// stallSpans is how many spans a stallLog keeps; their width is
// memory/stallSpans, and never under lagStall.
const stallSpans = 512

func (s *stallLog) init(memory time.Duration) {
	s.width = max(int64(memory)/stallSpans+1, int64(lagStall))
	s.spans = make([]stallRec, int64(memory)/s.width+2)
}

// add records a stall of dur ns that ended at end (ns).
func (s *stallLog) add(end, dur int64) {
	b := end / s.width
	s.mu.Lock()
	r := &s.spans[b%int64(len(s.spans))]
	if r.b != b || dur > r.dur {
		*r = stallRec{b: b, end: end, dur: dur}
	}
	s.latest.Store(max(s.latest.Load(), end))
	s.mu.Unlock()
}

// longest is the longest stall, or part of one, that ended after start
// (ns), as far as the log remembers: within a span the longest stall
// stands for the others.
func (s *stallLog) longest(start int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last := start/s.width, s.latest.Load()/s.width
	first = max(first, last-int64(len(s.spans))+1)
	var worst int64
	for b := first; b <= last; b++ {
		if r := s.spans[b%int64(len(s.spans))]; r.b == b && r.end > start {
			worst = max(worst, min(r.dur, r.end-start))
		}
	}
	return worst
}

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
			m.polledWrite.Store(p)
		}
	}
}

// overdue reports whether a witness is in a stall at wall instant t
// (ns): the service cannot run a goroutine woken by a timer or by the
// network poller now; or whether the network poller has not run since
// the latest stall ended (no byte written after it was read yet): a
// reply that came during the stall may still wait in its socket, its
// reader not woken yet, as the service resumes.
func (m *lagMeter) overdue(t int64) bool {
	if !m.running.Load() {
		return false
	}
	p := m.pending.Load()
	return stalled(t-m.last.Load()) > 0 || (p != 0 && stalled(t-p) > 0) ||
		m.polledWrite.Load() < m.stalls.latestEnd()
}

// stall records a stall of d ns that ended at t (none when d is 0) and
// returns d.
func (m *lagMeter) stall(t, d int64) int64 {
	if d > 0 {
		m.stalls.add(t, d)
	}
	return d
}

// longest is the longest stall, or part of one, since wall instant
// start (ns), up to t: the ones kept, and the waits the witnesses are in.
func (m *lagMeter) longest(start, t int64) int64 {
	worst := m.stalls.longest(start)
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
// (endCaller), whichever is first.
//
// Its Deadline is the latest instant it can end, the shed bound or the
// parent's deadline if earlier, which is true of it: the end of the
// store's budget moves later with every stall of the service, and no
// fixed instant states it (ports/storetime.go). A store derives its own
// bounds from the context, never from Deadline.
//
// For a store that queues calls before it sends them (ports.Dispatcher),
// the budget starts when the store says the call is sent
// (ports.Dispatched): until then only the parent and the shed bound end
// the context. It is safe for simultaneous use.
type storeTime struct {
	parent context.Context
	lag    *lagMeter
	budget time.Duration
	shedAt time.Time
	dl     time.Time

	done chan struct{}
	why  atomic.Int32
	mu   sync.Mutex // guards what follows, timer re-arming and the end
	// start is when the budget started (the call's start, or its
	// dispatch), base what the lag meter had counted then; waiting is
	// set while the budget waits for the dispatch.
	start      time.Time
	base       lagMark
	waiting    bool
	sent       bool
	progress   ports.Progress // the node's answers, once sent; nil without
	err        error
	timer      *time.Timer
	stopParent func() bool
	released   atomic.Bool // the lag meter, once
}

var (
	_ context.Context        = (*storeTime)(nil)
	_ ports.DispatchNotifier = (*storeTime)(nil)
)

// newStoreTime starts a store call's context at wall instant start:
// budget of store time, from start or, with dispatch set, from the
// call's dispatch (ports.Dispatched); shed at shedAt.
func newStoreTime(parent context.Context, lag *lagMeter, start time.Time, budget time.Duration, shedAt time.Time, dispatch bool) *storeTime {
	c := &storeTime{
		parent: parent, lag: lag, start: start, base: lag.acquire(), budget: budget, shedAt: shedAt,
		dl: shedAt, waiting: dispatch, done: make(chan struct{}),
	}
	if d, ok := parent.Deadline(); ok && d.Before(c.dl) {
		c.dl = d
	}
	if err := parent.Err(); err != nil {
		c.end(endCaller, err)
		return c
	}
	first := time.Until(shedAt)
	if !dispatch {
		first = min(first, time.Until(start.Add(budget)))
	}
	if first <= 0 {
		// Born past its budget or its bound (as context.WithDeadline is
		// born done).
		c.check()
		if c.why.Load() != endNone {
			c.stopParent = func() bool { return true }
			return c
		}
		first = lagTick
	}
	c.mu.Lock()
	c.timer = time.AfterFunc(first, c.check)
	c.mu.Unlock()
	c.stopParent = context.AfterFunc(parent, func() { c.end(endCaller, parent.Err()) })
	return c
}

// Dispatched marks the call sent now, to the node whose answers p
// records: the budget of a context that waits for the dispatch starts
// now, and from then on counts from the node's latest answer when it is
// later (ports.Progress). Only the first call counts.
func (c *storeTime) Dispatched(p ports.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent || c.why.Load() != endNone {
		return
	}
	c.sent, c.progress = true, p
	if !c.waiting {
		return
	}
	now := time.Now()
	c.waiting = false
	c.start, c.base = now, c.lag.now(now.UnixNano())
	if c.timer != nil {
		c.timer.Reset(max(min(c.budget, c.shedAt.Sub(now)), 0))
	}
}

// check runs when the budget may be used: it ends the context, or
// re-arms for the store time still due.
func (c *storeTime) check() {
	now := time.Now()
	c.mu.Lock()
	waiting := c.waiting
	lagged := c.laggedSince(c.start, c.base, now.UnixNano())
	spent := now.Sub(c.start) - lagged
	if c.progress != nil {
		// The node answered the calls ahead of this one meanwhile, and is
		// fast with a call that waits behind nothing: its time for this
		// one starts at its latest answer, less the stalls since (no more
		// than the call's, nor than lagHops times the longest since then).
		if a, floor := c.progress.Answered(); a > c.start.UnixNano() && floor >= 0 && floor < c.budget {
			since := min(lagged, time.Duration(lagHops*c.lag.longest(a, now.UnixNano())))
			spent = min(spent, now.Sub(time.Unix(0, a))-since)
		}
	}
	c.mu.Unlock()
	switch {
	case waiting:
		// Queued in the store: no store time is spent yet.
		if !now.Before(c.shedAt) {
			c.end(endShed, context.DeadlineExceeded)
			return
		}
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
		next := c.shedAt.Sub(now)
		if !c.waiting {
			next = min(c.budget-spent, next)
		}
		c.timer.Reset(max(next, lagTick))
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

// lagged is the time the service could not run since the budget started,
// as far as it delayed the call (laggedSince).
func (c *storeTime) lagged() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.laggedSince(c.start, c.base, time.Now().UnixNano())
}

// laggedSince is the time the service could not run between start (when
// the meter had counted base) and now (ns): the stalls the lag meter
// counted, but no more than lagHops times the longest of them. A call
// waits for the service a few times (lagHops), not at every tick: a
// service that polls the network only every 10 ms (its cores busy)
// stalls a witness at every tick, and the call's reply once.
func (c *storeTime) laggedSince(start time.Time, base lagMark, now int64) time.Duration {
	sum := base.since(c.lag.now(now))
	return min(sum, time.Duration(lagHops*c.lag.longest(start.UnixNano(), now)))
}

// Deadline is the latest instant the context can end: the shed bound,
// or the parent's deadline if earlier. It ends earlier when the store has
// used its budget (see storeTime).
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

// Value is the parent's, but for ports.DispatchKey: the context itself.
func (c *storeTime) Value(key any) any {
	if _, ok := key.(ports.DispatchKey); ok {
		return c
	}
	return c.parent.Value(key)
}

package app

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// storeContext is the context a decision's store call runs under: its
// parent bounded by the store deadline (Config.StoreTimeout, the one
// deadline of docs/adr/005). It behaves as context.WithDeadline(parent,
// deadline) would, but arms that deadline's timer only when the store asks
// for something only a timer can give: the Done channel, or a Value (which
// is how a context derived from it attaches to its cancellation). A store
// that decides in process and only checks Err (adapters/local) then costs
// the decision no timer, which context.WithTimeout would have started and
// stopped on every call: measured as the largest single cost of an
// in-process decision after the store's own work.
//
// It is safe for simultaneous use: a store may hand it to goroutines of its
// own, which may outlive the call.
type storeContext struct {
	parent   context.Context
	deadline time.Time
	// With lag set (storeTime), the armed context counts the store's
	// time (storetime.go) from start, shed at shedAt; without, it is
	// context.WithDeadline(parent, deadline).
	lag      *lagMeter
	start    time.Time
	shedAt   time.Time
	dispatch bool
	st       *storeTime

	// armed is set once actx, the context.WithDeadline that stands in for
	// this one, and its cancel are, under mu: a reader that sees it set
	// reads them without the lock.
	armed   atomic.Bool
	actx    context.Context
	acancel context.CancelFunc
	mu      sync.Mutex
	// stopped is set by stop, under mu: a context armed after the call
	// returned is born cancelled, as a cancelled WithDeadline context is.
	stopped atomic.Bool
}

var _ context.Context = (*storeContext)(nil)

// newStoreContext returns parent bounded by deadline, an instant of the
// wall clock. stop releases it once the call has returned.
func newStoreContext(parent context.Context, deadline time.Time) *storeContext {
	return &storeContext{parent: parent, deadline: deadline}
}

// storeTime makes the armed context count the store's time from start,
// or from the call's dispatch with dispatch set (storetime.go), shed at
// shedAt, where deadline is start + the budget.
func (c *storeContext) storeTime(lag *lagMeter, start, shedAt time.Time, dispatch bool) *storeContext {
	c.lag, c.start, c.shedAt, c.dispatch = lag, start, shedAt, dispatch
	return c
}

// why is why the armed store-time context ended (endNone when it was
// not armed, or counts no store time); call it after stop.
func (c *storeContext) why() int32 {
	if !c.armed.Load() || c.st == nil {
		return endNone
	}
	return c.st.why.Load()
}

// arm returns the standard context that stands in for c, creating it on
// the first call.
func (c *storeContext) arm() context.Context {
	if c.armed.Load() {
		return c.actx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed.Load() {
		return c.actx
	}
	if c.lag != nil {
		c.st = newStoreTime(c.parent, c.lag, c.start, c.deadline.Sub(c.start), c.shedAt, c.dispatch)
		c.actx, c.acancel = c.st, func() { c.st.stop() }
	} else {
		c.actx, c.acancel = context.WithDeadline(c.parent, c.deadline)
	}
	if c.stopped.Load() {
		c.acancel()
	}
	c.armed.Store(true)
	return c.actx
}

// stop releases the context at now, an instant of the wall clock, as the
// CancelFunc of context.WithDeadline does: from then on Err reports
// context.Canceled unless the context was already done.
func (c *storeContext) stop(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed.Load() {
		c.acancel()
		return
	}
	if c.parent.Err() == nil && now.Before(c.deadline) {
		c.stopped.Store(true)
	}
}

// Deadline is the earlier of the parent's deadline and the store's; for
// a context that counts store time, the latest instant it can end, as
// storeTime's Deadline.
func (c *storeContext) Deadline() (time.Time, bool) {
	dl := c.deadline
	if c.lag != nil {
		dl = c.shedAt
	}
	if d, ok := c.parent.Deadline(); ok && d.Before(dl) {
		return d, true
	}
	return dl, true
}

// Done arms the deadline's timer and returns the channel it closes.
func (c *storeContext) Done() <-chan struct{} { return c.arm().Done() }

// Err reports why the context is done, without arming it: the parent's
// error first, as a derived context inherits it, then the deadline.
func (c *storeContext) Err() error {
	if c.armed.Load() {
		return c.actx.Err()
	}
	if c.stopped.Load() {
		return context.Canceled
	}
	return c.errUnarmed()
}

// errUnarmed is Err of a context that was neither armed nor stopped.
func (c *storeContext) errUnarmed() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value arms the context (the context package finds a parent's
// cancellation through Value) and asks the armed context.
func (c *storeContext) Value(key any) any { return c.arm().Value(key) }

package ports

import (
	"context"
	"errors"
	"time"
)

// Store time (docs/adr/008-failure-classes-and-breaker.md, "The store
// deadline is the store's"). The context a Limiter hands a store for one
// call ends when the store has used its budget of store time: the wall
// time of the call less the time the service itself could not run. That
// instant moves later with every stall of the service, so no fixed
// instant states it: the context's Deadline is the latest instant it can
// end (the shed bound, or the caller's deadline if earlier), and it may
// end before it, with context.DeadlineExceeded, when the budget is spent.
//
// A store therefore derives whatever bounds its own work from the
// context itself (its Done channel, context.WithCancel,
// context.AfterFunc), never from Deadline: a context rebuilt from
// Deadline outlives the store's budget, or, from a deadline read before a
// stall, ends before the store had its time.

// Dispatcher is an optional capability of a Store, found by type
// assertion: its calls may wait in a queue of the store's own before they
// are sent (the Redis store's batches, docs/adr/018-batches.md), and it
// calls Dispatched on a call's context when it sends the call. The
// store deadline of such a call starts there: the wait in the store's
// queue is the service's time, not the store's. Until then only the
// caller's context and the shed bound end the call, and a call that
// leaves the queue unsent fails with an error wrapping ErrNotRun.
type Dispatcher interface {
	Store
	// Dispatches reports whether the store may queue calls, and so calls
	// Dispatched on every call it sends.
	Dispatches() bool
}

// Progress is a store's record of one node's answers, which a store that
// pipelines its calls to a node hands the context of each call it sends
// (Dispatched). Calls sent to one node are answered in order: a call
// waits in the node's input behind the calls sent before it, and the
// node's time for it starts when it has answered them. So the store
// deadline of a call counts from the node's latest answer, when that is
// later than the call's dispatch, provided the node is fast with a call
// that waits behind nothing: a node that keeps answering the calls ahead
// of a call is not late with it, a node that stops answering is late one
// store deadline after its last answer, and a node that answers every
// call late (a slow link: answers keep coming, each later than the
// deadline after its call) is late with every call (docs/adr/008, "The
// store deadline is the store's").
type Progress interface {
	// Answered returns the latest wall instant (Unix ns) at which the
	// node answered a call whose caller still waited for the answer (0
	// before any), and floor, the least time the node took over the last
	// second to answer a call from its dispatch (its latency when little
	// or nothing was ahead; -1 when it answered none). It is safe for
	// simultaneous use.
	Answered() (at int64, floor time.Duration)
}

// DispatchKey is the context key under which a store call's context
// carries its DispatchNotifier: Dispatched finds it through any context
// derived from the call's.
type DispatchKey struct{}

// DispatchNotifier is told when the store call made under its context is
// sent.
type DispatchNotifier interface {
	// Dispatched marks the call as sent to the store now, to the node
	// whose answers p records (nil when the store keeps no such record).
	// Only the first call counts; it is safe for simultaneous use.
	Dispatched(p Progress)
}

// Dispatched tells ctx's DispatchNotifier, if it has one, that the store
// call made under ctx is being sent now, to the node whose answers p
// records (nil for none): see Dispatcher and Progress. A store calls it
// just before it hands the call to its connection.
func Dispatched(ctx context.Context, p Progress) {
	if n, ok := ctx.(DispatchNotifier); ok {
		n.Dispatched(p)
		return
	}
	if n, ok := ctx.Value(DispatchKey{}).(DispatchNotifier); ok {
		n.Dispatched(p)
	}
}

// ErrInFlight is wrapped by the error of a store call whose caller's
// context ended after the call was sent and before its answer came: the
// store may have run it (its units counted) or not. Like a lost reply, it
// is never retried (docs/adr/008), and it is the store's fault only when
// the context ended on the store's own budget.
var ErrInFlight = errors.New("sluice: the call was sent and its answer did not come in time (the store may have run it)")

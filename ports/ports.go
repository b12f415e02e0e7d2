// Package ports holds the interfaces the sluice core needs from the outside
// world: a Store that counts, a Clock that tells time, a Prober that checks
// the store's health and a Recorder that observes every decision. Adapters
// implement them; the app package depends on nothing else.
package ports

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Store counts units of cost against windows, atomically across every limit
// of one request.
//
// Every method is safe for simultaneous use by any number of goroutines
// (and, for a shared store such as Redis, by any number of processes).
// Context comes first; a cancelled or expired context makes a method return
// promptly with an error wrapping ctx.Err() (or domain.ErrStoreTimeout for a
// deadline the store itself imposes). After Close, every method returns an
// error wrapping domain.ErrStoreClosed.
type Store interface {
	// Evaluate checks limits at now and, only if every one of them admits
	// its cost, consumes the cost on every key: all or nothing. When one
	// limit refuses, nothing is consumed anywhere, and the result says which
	// limit refused (Result.Limiting) and when to retry (Result.RetryAfter).
	// A refusal is a result with Allowed false, not an error.
	//
	// now is the instant of the decision; a store may be configured to use
	// its own clock instead (e.g. Redis TIME), and must then say so in its
	// documentation. A now earlier than a previous call's (a clock that went
	// backwards, or callers whose clocks disagree) must neither hang nor
	// admit more than a window's limit over the units the store still
	// holds: units recorded at a later instant count. A store may forget
	// units that had already left their window at the latest instant it
	// saw (a sliding log trims them, Redis expires them), so a jump back by
	// more than a period can find them gone.
	//
	// A request that breaks the contract of domain.ValidateLimits is refused
	// with a *domain.LimitError before anything is read or written.
	//
	// Limits that name the same key are sliding-log windows sharing one
	// log (domain.Limit, docs/adr/015): an admitted request records its
	// units in that log once, and each window counts the log's units in
	// its own period. Every method (Peek, EvaluateRepeated, Reserve,
	// Settle, Renew) reads and writes such a key once per call.
	//
	// The store must not keep limits (the slice) once the call returns: the
	// caller reuses its memory. Keeping a key string is fine.
	Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error)

	// Peek answers as Evaluate would at now, consuming nothing. Remaining
	// counts are those before consumption.
	Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error)

	// Reset forgets every unit counted on key, whatever its algorithm.
	// Resetting an unknown key is not an error; an empty key is refused
	// with a *domain.LimitError.
	Reset(ctx context.Context, key string) error

	// Close releases the store's resources. Further calls of the other
	// methods return domain.ErrStoreClosed. Close is idempotent: a second
	// Close returns nil.
	Close() error
}

// Repeater is an optional capability of a Store, found by type assertion:
// it decides n identical requests in one call. The Limiter uses it to
// coalesce the decisions that arrive for one key set while a store call
// for it is in flight (docs/adr/007).
type Repeater interface {
	// EvaluateRepeated decides n (1 ≤ n ≤ MaxRepeat) requests, each
	// carrying limits, at now, in order, exactly as n sequential Evaluate
	// calls at now would: the first Admitted consume their cost, all or
	// nothing each, and the rest are refused and consume nothing. The
	// contract of Evaluate applies to each request (validation, errors,
	// Close, the store's own clock); n out of range is a
	// *domain.LimitError. domain.Repeated.For gives each request its own
	// Result.
	EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error)
}

// Reserver is an optional capability of a Store, found by type assertion:
// reservations that settle (docs/adr/012). A reservation takes a request's
// windows as Evaluate does, all or nothing, and holds them under a lease
// until Settle says what the request really cost, or until the lease
// expires. It is what lets a service charge a cost it learns only after
// serving the request (tokens, bytes), bound requests in flight
// (domain.Concurrency windows) and decide, all or nothing, a request
// whose keys span two partitions (a Redis Cluster's slots).
//
// The contract of Evaluate applies to each method (context, errors,
// Close, the store's own clock, not keeping the limits slice).
type Reserver interface {
	// Reserve decides limits at now exactly as Evaluate would, and
	// accepts Concurrency windows too (domain.ValidateHeld; ttl by
	// domain.ValidateLeaseTTL). When every window admits, it consumes
	// each rate window's cost and takes Cost slots of each concurrency
	// window, under a new lease that expires at the store's instant plus
	// ttl. A refusal consumes nothing and returns the zero Lease.
	//
	// A concurrency window admits when the slots held by unexpired
	// leases plus Cost stay within Limit. Its Remaining is Limit minus
	// the slots held; when it refuses, its RetryAfter is the wait until
	// the earliest held slot's lease expires (the latest a slot surely
	// comes back), and its ResetAfter the wait until the last one does.
	Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error)

	// Settle ends lease, which Reserve returned for limits (the same
	// slice contents: keys, windows and costs). Each rate window then
	// counts actual units instead of its reserved Cost: the difference is
	// refunded (the reservation's own units, stamped at lease.At, never
	// more than are still counted: a window never goes below zero) or
	// charged (stamped at now, even past the limit: a charge is recorded,
	// never refused). Its concurrency slots come back.
	//
	// Settle is idempotent: a second call changes nothing and returns
	// domain.AlreadySettled. A lease that expired first counted as
	// settled at its reserved cost: Settle changes nothing and returns
	// domain.Expired. Neither is an error. actual is checked by
	// domain.ValidateActual, lease by Lease.Valid (a *domain.LimitError).
	Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error)

	// Renew moves lease's expiry to now plus ttl, for a request that
	// outlives it: its concurrency slots stay held, its rate units stay
	// unsettled. A lease already settled or expired is not renewed: the
	// error wraps domain.ErrLeaseEnded. It returns the renewed lease.
	Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error)
}

// Forgetter is an optional capability of a Store, found by type
// assertion: a reset that says whether there was anything to forget. The
// Limiter reports with it how many keys a reset deleted (app.ResetResult),
// so that a reset that matched nothing (keys built under another HMAC
// secret, a user reset without the tenant that scopes the user's windows)
// is told apart from one that unblocked someone.
type Forgetter interface {
	// Forget does what Reset does and reports whether key held state:
	// units counted or slots held, which it forgot. A key never written,
	// or already reset, reports false. A store may keep a key some time
	// after its units left their windows (Redis until the key's TTL, the
	// local store until its sweeper passes) and report true for it. The
	// contract of Reset applies (an empty key, context, Close).
	Forget(ctx context.Context, key string) (existed bool, err error)
}

// Partitioned is an optional capability of a Store whose atomic calls
// each reach one partition: a Redis Cluster serves one call from one hash
// slot. A store that does not implement it takes any keys in one call.
// The Limiter decides a request whose keys span partitions with one
// reservation per partition, released everywhere when any refuses
// (docs/adr/013).
type Partitioned interface {
	// Partition returns the partition key's calls go to (a cluster's hash
	// slot), and false when every key shares one (a standalone server).
	Partition(key string) (partition int, partitioned bool)
}

// MaxRepeat bounds the n of one EvaluateRepeated call.
const MaxRepeat = 1 << 16

// Batcher is an optional capability of a Store, found by type assertion:
// it decides independent requests in one call (docs/adr/018), as a
// Redis store decides the requests that reach a node together in one
// script call.
type Batcher interface {
	// EvaluateBatch decides reqs (at most MaxBatch), each carrying its own
	// limits, at now, in order, exactly as len(reqs) sequential Evaluate
	// calls at now would: each all or nothing on its own limits, each
	// seeing what the ones before it consumed. It returns one Result and
	// one error per request. A request's own fault (limits that do not
	// validate, a key holding a value the store cannot read) is its error
	// alone, and the others are decided as if it were absent; a failure
	// of the call (Close, a deadline, an outage) is the error of every
	// request it reached. More than MaxBatch requests is a
	// *domain.LimitError for each, and nothing is decided.
	EvaluateBatch(ctx context.Context, now time.Time, reqs [][]domain.Limit) ([]domain.Result, []error)
}

// MaxBatch bounds the requests of one EvaluateBatch call.
const MaxBatch = 1024

// Clock tells time. Production uses SystemClock; tests use
// ports/fakeclock, which moves only when told to.
type Clock interface {
	// Now returns the current instant.
	Now() time.Time
	// NewTicker returns a ticker that fires every d (d > 0) on this clock.
	NewTicker(d time.Duration) Ticker
	// NewTimer returns a timer that fires once, d after Now on this clock
	// (at once when d <= 0). Limiter.Wait sleeps on it (docs/adr/010).
	NewTimer(d time.Duration) Timer
}

// Timer delivers one instant of a Clock.
type Timer interface {
	// C returns the channel on which the one instant arrives; it has room
	// for it, so the timer never blocks on a reader.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It returns true when it did,
	// false when the timer had already fired or been stopped, as with
	// time.Timer.
	Stop() bool
}

// Ticker delivers ticks of a Clock.
type Ticker interface {
	// C returns the channel on which ticks arrive. A tick that finds the
	// channel full is dropped, as with time.Ticker.
	C() <-chan time.Time
	// Stop stops the ticker; no tick is sent after Stop returns.
	Stop()
}

// Prober checks a store's health. The health loop calls it on every
// interval.
type Prober interface {
	// Probe returns nil when the store answers (Redis: PING and INFO
	// memory), an error otherwise. It honours ctx's deadline.
	Probe(ctx context.Context) error
}

// DecisionRecord is what the Recorder learns of one decision.
type DecisionRecord struct {
	Decision domain.Decision
	// TenantID is the tenant's pseudonym ("" for anonymous traffic); never a
	// raw identifier, so it is safe as a metric label.
	TenantID string
	// ClientIP is the raw client address. Only the security-audit channel
	// may write it, and only for THROTTLED and DENIED_DEGRADED decisions.
	ClientIP netip.Addr
	// Route is the route template as received; it may be invalid, so it is
	// for the security-audit channel and never a metric label.
	Route string
	// Method and Path are the request as the entry point received it (the
	// HTTP method and URL path), "" when unknown: raw client input, for
	// the security-audit record of an invalid context only (the path no
	// route matched), bounded and escaped there; never the application
	// log or a metric label.
	Method, Path string
	// StoreLatency is the time spent in the store; zero when the store was
	// not called.
	StoreLatency time.Duration
	// At is the decision's instant on the Limiter's clock: the instant its
	// windows were counted at, and an admitted request's (an admission
	// from an allotment is at its own instant, docs/adr/019).
	At time.Time
	// Err is the error that shaped the decision (invalid context, store
	// failure), nil otherwise.
	Err error
}

// StoreOp names a store method in a StoreCall.
type StoreOp uint8

// Store operations.
const (
	OpEvaluate StoreOp = iota + 1
	OpPeek
	OpReset
	OpReserve
	OpSettle
	OpRenew
	// OpAllot is an allotment taken (Allotter.ReserveAhead,
	// docs/adr/019); giving back what it did not spend is an OpSettle.
	OpAllot
)

// String returns "evaluate", "peek", "reset", "reserve", "settle",
// "renew" or "allot".
func (o StoreOp) String() string {
	switch o {
	case OpAllot:
		return "allot"
	case OpReserve:
		return "reserve"
	case OpSettle:
		return "settle"
	case OpRenew:
		return "renew"
	case OpEvaluate:
		return "evaluate"
	case OpPeek:
		return "peek"
	case OpReset:
		return "reset"
	}
	return "unknown"
}

// StoreCall is what the Recorder learns of one call of the primary store.
type StoreCall struct {
	Op StoreOp
	// Start is when the call began and Latency how long it took, on the
	// Limiter's clock.
	Start   time.Time
	Latency time.Duration
	// Keys is the number of keys the call carried.
	Keys int
	// Err is the call's error: nil, or one carrying a domain code
	// (domain.CodeOf): store unavailable, store timeout, invalid limit...
	Err error
}

// ResetRecord is what the Recorder learns of one administrative reset
// (Limiter.Reset): an act of support staff, for the security-audit channel.
// Each reset is recorded twice: before any key is deleted (Done false: who
// asked, whose windows, how many keys), and after, with the outcome (Done
// true: Deleted, Err). A reset whose first record cannot be written
// deletes nothing, so that no reset goes unaudited, even one whose process
// dies half way (the first record without a second one says so).
type ResetRecord struct {
	// Done is false in the record written before the reset, true in the
	// one written after it.
	Done bool
	// Dimension is the dimension whose windows are reset.
	Dimension domain.Dimension
	// SubjectID is the pseudonym of the identity reset; TenantID the
	// tenant's pseudonym when the reset is scoped to a tenant (never for
	// an ip, whose windows count per ip in every tenant, docs/adr/013).
	SubjectID string
	TenantID  string
	// ClientIP is the raw address when an ip is reset (or was given with
	// the identity reset): the security-audit channel may write it for a
	// reset.
	ClientIP netip.Addr
	// ClientPrefix is, for a reset of the ip dimension, the addresses
	// whose windows it resets: ClientIP's /64 for an IPv6 address (the
	// addresses one client counts as, domain.IPv6GroupBits), the address
	// alone for IPv4. The zero Prefix for any other reset.
	ClientPrefix netip.Prefix
	// Actor says who asked for the reset, as the caller supplied it.
	Actor string
	// Keys is how many store keys the reset names.
	Keys int
	// Deleted, with Done, is how many of them held state on the primary
	// store and were forgotten; -1 when the store cannot say (it is not a
	// Forgetter), and before the reset.
	Deleted int
	// Err, with Done, is the failure, if the reset did not complete.
	Err error
}

// Recorder observes decisions, health transitions, store calls and
// administrative resets: metrics and the two log channels. It is called on
// every path, errors included. Its methods are safe for simultaneous use;
// an error they return is propagated to the caller, never swallowed.
//
// A Recorder may also implement DecisionTracer.
type Recorder interface {
	RecordDecision(ctx context.Context, rec DecisionRecord) error
	RecordTransition(ctx context.Context, change domain.StateChange, at time.Time) error
	// RecordStoreCall observes one call of the primary store.
	RecordStoreCall(ctx context.Context, call StoreCall)
	// RecordReset observes each of a reset's two records (ResetRecord):
	// an error from the first one stops the reset before it deletes
	// anything.
	RecordReset(ctx context.Context, rec ResetRecord) error
}

// DeadlineObserver is an optional capability of a Recorder, found by
// type assertion: app.New tells it the store deadline the Limiter keeps
// (Config.StoreTimeout), so that a Recorder exporting it (the otel
// adapter's store_deadline_seconds, which the store-latency alert
// compares with) needs no second setting that could disagree.
type DeadlineObserver interface {
	ObserveStoreDeadline(d time.Duration)
}

// DecisionTracer is an optional capability of a Recorder, found by type
// assertion. The Limiter calls StartDecision when a decision begins and
// uses the returned context for the store calls, the RecordStoreCall and
// the RecordDecision of that decision, so a tracing
// Recorder can open a span here and end it in RecordDecision. It must not
// fail: tracing is best effort, metrics and logs are not.
type DecisionTracer interface {
	StartDecision(ctx context.Context) context.Context
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (SystemClock) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTicker struct{ t *time.Ticker }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time { return s.t.C }
func (s systemTimer) Stop() bool          { return s.t.Stop() }

func (s systemTicker) C() <-chan time.Time { return s.t.C }
func (s systemTicker) Stop()               { s.t.Stop() }

var _ Clock = SystemClock{}

// CheckBatch returns the *domain.LimitError of a batch of n requests
// when n exceeds MaxBatch, else nil.
func CheckBatch(n int) error {
	if n > MaxBatch {
		return &domain.LimitError{Index: -1, Field: "batch", Reason: fmt.Sprintf("at most %d requests, got %d", MaxBatch, n)}
	}
	return nil
}

// EvaluateEach implements EvaluateBatch with sequential Evaluate calls on
// s: for a store whose Evaluate is already in process, where a batch has
// no call to save.
func EvaluateEach(ctx context.Context, s Store, now time.Time, reqs [][]domain.Limit) ([]domain.Result, []error) {
	res, errs := make([]domain.Result, len(reqs)), make([]error, len(reqs))
	if err := CheckBatch(len(reqs)); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	for i, limits := range reqs {
		res[i], errs[i] = s.Evaluate(ctx, now, limits)
	}
	return res, errs
}

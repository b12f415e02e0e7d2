package domain

import (
	"fmt"
	"time"
)

// State is the terminal state of a decision. Once a Decision is returned
// its state never changes: Decision has no mutating method.
type State uint8

const (
	// Allowed: every window admitted the request; its cost was consumed.
	Allowed State = iota + 1
	// Throttled: a window refused; nothing was consumed (HTTP 429).
	Throttled
	// BypassDegraded: the store could not answer and the route family lets
	// the request through under the per-instance local cap.
	BypassDegraded
	// DeniedDegraded: the store could not answer and the route family fails
	// closed (HTTP 503, Retry-After 1 s).
	DeniedDegraded
	// RejectedInvalidContext: the request's context could not be evaluated
	// (HTTP 400 with the uniform body {"error":"invalid_context"}).
	RejectedInvalidContext
)

var stateNames = [...]string{
	Allowed:                "ALLOWED",
	Throttled:              "THROTTLED",
	BypassDegraded:         "BYPASS_DEGRADED",
	DeniedDegraded:         "DENIED_DEGRADED",
	RejectedInvalidContext: "REJECTED_INVALID_CONTEXT",
}

// String returns the upper-case name used in logs and metric labels, e.g.
// "THROTTLED".
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("STATE(%d)", uint8(s))
}

// Passes reports whether the protected handler runs for this state.
func (s State) Passes() bool { return s == Allowed || s == BypassDegraded }

// Cause is a bounded reason attached to a decision. The set is closed so
// that it is safe as a metric label; it never carries an identifier.
type Cause string

// Causes.
const (
	CauseNone             Cause = "none"
	CauseLimitExceeded    Cause = "limit_exceeded"
	CauseRouteInvalid     Cause = "route_invalid"
	CauseIPUnresolved     Cause = "ip_unresolved"
	CauseDimensionInvalid Cause = "dimension_invalid"
	CauseProfileMissing   Cause = "profile_missing"
	CauseStoreUnavailable Cause = "store_unavailable"
	CauseStoreTimeout     Cause = "store_timeout"
	CauseBreakerOpen      Cause = "breaker_open"
	CauseLocalCapExceeded Cause = "local_cap_exceeded"
	CauseLocalLimit       Cause = "local_limit"
	CauseInvalidLimit     Cause = "invalid_limit"
	// CauseStoreValue: a key of the request holds a value the store cannot
	// interpret (domain.StoreValueError).
	CauseStoreValue Cause = "store_value"
	// CauseNoWindow: none of the profile's windows applies to the request
	// (e.g. user windows only, and an anonymous request): nothing was
	// counted, and the request is Allowed.
	CauseNoWindow Cause = "no_window"
	// CauseOverloaded: the instance is saturated: the decision waited
	// past app.Config.ShedAfter for its store call to be dispatched and
	// answered, and was refused (DeniedDegraded) without the degraded
	// matrix, whatever the route family: shedding never admits past a
	// limit (docs/adr/008-failure-classes-and-breaker.md).
	CauseOverloaded Cause = "overloaded"
	// CauseCallerGone: the caller's own context ended (its deadline or a
	// cancellation) before the store answered; the decision is refused
	// (DeniedDegraded), never a bypass (docs/adr/008).
	CauseCallerGone Cause = "caller_gone"
)

// Causes lists every Cause, for metric pre-registration and tests.
func Causes() []Cause {
	return []Cause{CauseNone, CauseLimitExceeded, CauseRouteInvalid, CauseIPUnresolved,
		CauseDimensionInvalid, CauseProfileMissing, CauseStoreUnavailable, CauseStoreTimeout,
		CauseBreakerOpen, CauseLocalCapExceeded, CauseLocalLimit, CauseInvalidLimit, CauseStoreValue, CauseNoWindow,
		CauseOverloaded, CauseCallerGone}
}

// Layer names one layer of the dual-layer (ADR-002) check.
type Layer uint8

const (
	// LayerNone: the decision was not limited by a layer.
	LayerNone Layer = iota
	// LayerTenant: the tenant's shared quota.
	LayerTenant
	// LayerUser: the user's or api key's own quota.
	LayerUser
)

// String returns "none", "tenant" or "user".
func (l Layer) String() string {
	switch l {
	case LayerTenant:
		return "tenant"
	case LayerUser:
		return "user"
	}
	return "none"
}

// Decision is the terminal answer for one request.
type Decision struct {
	State State
	// Limit is the limit of the limiting window (the one that refused, or
	// the one with the least remaining).
	Limit int64
	// Remaining is the minimum remaining across every window checked.
	Remaining int64
	// RetryAfter is when the same request could pass (Throttled,
	// DeniedDegraded); zero otherwise.
	RetryAfter time.Duration
	// ResetAfter is when the limiting window is back to its full quota.
	ResetAfter time.Duration
	// LimitingDimension and LimitingWindow name the window that decided.
	LimitingDimension Dimension
	LimitingWindow    string
	// LimitingPeriod is the period of the limiting window (for the IETF
	// RateLimit-Policy field).
	LimitingPeriod time.Duration
	// Layer is the dual-layer layer that decided, LayerNone outside it.
	Layer Layer
	// TenantRemaining and UserRemaining keep the per-layer remaining of the
	// dual-layer API; -1 when the layer was not checked.
	TenantRemaining int64
	UserRemaining   int64
	// SystemState is the health state the decision was taken in.
	SystemState SystemState
	// Cause is the bounded reason (logs and metrics only).
	Cause Cause
	// Profile and Family are the resolved route profile, empty when the
	// context was rejected before resolution.
	Profile string
	Family  RouteFamily
	// Shadow is true when shadow mode is on: State is what would have been
	// enforced, and the caller lets the request through regardless.
	Shadow bool
	// Degraded is true when the primary store did not decide: the breaker
	// was open, or the store call failed or timed out, and the degraded
	// matrix answered instead. A degraded Allowed or BypassDegraded
	// decision passes, but its counts are at best per instance (Source).
	Degraded bool
	// Source is where the counts behind the decision come from.
	Source Source
	// Plan names the plan whose limits applied, "" for the profile's own.
	Plan string
	// Windows lists every window checked, in check order, with its own
	// status: the source of the RateLimit-Policy and RateLimit fields.
	Windows WindowChecks
}

// Source says where the counts behind a decision come from.
type Source uint8

const (
	// SourceNone: no store was asked (the context was rejected, no window
	// applied, or the degraded matrix denied without counting).
	SourceNone Source = iota
	// SourcePrimary: the shared store answered; counts are exact across
	// every instance.
	SourcePrimary
	// SourceFallback: the in-process fallback store answered (the degraded
	// local action, or the cap of a degraded bypass); counts are per
	// instance.
	SourceFallback
	// SourceRefusalCache: the primary store refused the same key moments
	// ago, until an instant not yet reached; the instance repeats that
	// refusal, with the remaining wait, without asking the store again.
	// Exact: units only leave a window with time.
	SourceRefusalCache
	// SourceAllotment: the instance admitted the request in process, from
	// an allotment the primary store gave it (docs/adr/019-allotments.md):
	// units reserved there for this instance's next requests of the key
	// set. Exact across every instance, as the store's own decisions.
	SourceAllotment
)

// String returns "none", "primary", "fallback", "refusal_cache" or
// "allotment".
func (s Source) String() string {
	switch s {
	case SourceAllotment:
		return "allotment"
	case SourceRefusalCache:
		return "refusal_cache"
	case SourceNone:
		return "none"
	case SourcePrimary:
		return "primary"
	case SourceFallback:
		return "fallback"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// WindowCheck is one window of a decision with its own answer.
type WindowCheck struct {
	Dimension Dimension
	Window    Window
	// Allowed says whether this window alone admitted the request.
	Allowed bool
	// Remaining, RetryAfter and ResetAfter are the window's own, as in
	// LimitStatus.
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// WindowChecks holds the windows of one decision in a fixed array, so that
// a decision does not allocate. The zero value is empty.
type WindowChecks struct {
	n      int
	checks [MaxLimits]WindowCheck
}

// Add appends a check; past MaxLimits it is dropped (no request has more).
func (w *WindowChecks) Add(c WindowCheck) {
	if w.n < len(w.checks) {
		w.checks[w.n] = c
		w.n++
	}
}

// All returns the checks in order.
func (w *WindowChecks) All() []WindowCheck { return w.checks[:w.n] }

// Len returns how many windows were checked.
func (w *WindowChecks) Len() int { return w.n }

// Blocks reports whether the caller must refuse the request: the state
// does not pass (Throttled, DeniedDegraded, RejectedInvalidContext) and
// shadow mode is off. In shadow mode nothing blocks.
func (d Decision) Blocks() bool { return !d.Shadow && !d.State.Passes() }

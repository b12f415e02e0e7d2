package domain

import (
	"fmt"
	"time"
)

// RouteFamily groups routes by what must happen when the store cannot
// answer.
type RouteFamily uint8

const (
	// FamilyRead: reads; fail open by default.
	FamilyRead RouteFamily = iota + 1
	// FamilyAuth: authentication; fail closed by default.
	FamilyAuth
	// FamilyCostly: expensive operations; fail closed by default.
	FamilyCostly
)

// String returns "read", "auth" or "costly" ("" for the zero value).
func (f RouteFamily) String() string {
	switch f {
	case FamilyRead:
		return "read"
	case FamilyAuth:
		return "auth"
	case FamilyCostly:
		return "costly"
	case 0:
		return ""
	}
	return fmt.Sprintf("family(%d)", uint8(f))
}

// ParseRouteFamily reads "read", "auth" or "costly".
func ParseRouteFamily(s string) (RouteFamily, error) {
	switch s {
	case "read":
		return FamilyRead, nil
	case "auth":
		return FamilyAuth, nil
	case "costly":
		return FamilyCostly, nil
	}
	return 0, &UnknownNameError{Kind: "route family", Name: s, Valid: "read, auth or costly"}
}

// Families lists the route families.
func Families() []RouteFamily { return []RouteFamily{FamilyRead, FamilyAuth, FamilyCostly} }

// DegradedAction is what a route family does while the store cannot answer.
type DegradedAction uint8

const (
	// ActionBypass lets the request through (BypassDegraded) under a
	// per-instance local cap of DegradedCapFactor × burst per
	// DegradedCapPeriod; past the cap it is DeniedDegraded.
	ActionBypass DegradedAction = iota + 1
	// ActionDeny refuses the request (DeniedDegraded, 503, Retry-After 1 s).
	ActionDeny
	// ActionLocal keeps enforcing the profile's limits on the in-process
	// store, per instance (ADR-002's LocalDualLimiter): the effective limit
	// across a fleet is about limit × replicas.
	ActionLocal
)

// String returns "bypass", "deny" or "local".
func (a DegradedAction) String() string {
	switch a {
	case ActionBypass:
		return "bypass"
	case ActionDeny:
		return "deny"
	case ActionLocal:
		return "local"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseDegradedAction reads "bypass", "deny" or "local".
func ParseDegradedAction(s string) (DegradedAction, error) {
	switch s {
	case "bypass":
		return ActionBypass, nil
	case "deny":
		return ActionDeny, nil
	case "local":
		return ActionLocal, nil
	}
	return 0, &UnknownNameError{Kind: "degraded action", Name: s, Valid: "bypass, deny or local"}
}

// Degraded-mode constants (docs/adr/005).
const (
	// DegradedCapFactor × the burst limit is the per-instance cap of a
	// bypassed family, per DegradedCapPeriod.
	DegradedCapFactor = 2
	DegradedCapPeriod = 60 * time.Second
	// DeniedRetryAfter is the Retry-After of DeniedDegraded
	// (retry_after_fail_closed_seconds).
	DeniedRetryAfter = time.Second
)

// DegradedMatrix maps a route family to its degraded action.
type DegradedMatrix struct {
	Read, Auth, Costly DegradedAction
}

// DefaultDegradedMatrix is docs/adr/005's: read bypasses, auth and costly
// deny.
func DefaultDegradedMatrix() DegradedMatrix {
	return DegradedMatrix{Read: ActionBypass, Auth: ActionDeny, Costly: ActionDeny}
}

// Action returns the action for f; an unset cell or unknown family denies
// (fail closed).
func (m DegradedMatrix) Action(f RouteFamily) DegradedAction {
	var a DegradedAction
	switch f {
	case FamilyRead:
		a = m.Read
	case FamilyAuth:
		a = m.Auth
	case FamilyCostly:
		a = m.Costly
	}
	if a == 0 {
		return ActionDeny
	}
	return a
}

// DimensionWindows are the windows checked for one dimension.
type DimensionWindows struct {
	Dimension Dimension
	Windows   []Window
}

// RouteProfile is what a route is limited by: a name (also its route key in
// store keys and its metric label), a family and the windows per dimension.
type RouteProfile struct {
	Name   string
	Family RouteFamily
	// Dimensions lists, per dimension, the windows to check. A dimension
	// absent from the list is not checked for this route.
	Dimensions []DimensionWindows
	// Cost is the units one request consumes; 0 means 1.
	Cost int64
}

// BurstLimit returns the smallest limit among the windows named "burst",
// or, without one, the smallest limit of any window: the base of the
// degraded local cap.
func (p RouteProfile) BurstLimit() int64 {
	var burst, any int64
	for _, d := range p.Dimensions {
		for _, w := range d.Windows {
			if any == 0 || w.Limit < any {
				any = w.Limit
			}
			if w.Name == WindowBurst && (burst == 0 || w.Limit < burst) {
				burst = w.Limit
			}
		}
	}
	if burst != 0 {
		return burst
	}
	return any
}

// MaxRouteLen is the longest route template accepted.
const MaxRouteLen = 255

// ValidateRoute checks a route template against the pattern of docs/adr/005
// ^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]{1,255}$ without a regexp on the hot
// path. It returns a *ContextError with CauseRouteInvalid.
func ValidateRoute(route string) error {
	if len(route) < 2 || len(route) > MaxRouteLen+1 || route[0] != '/' {
		return &ContextError{Cause: CauseRouteInvalid, Detail: "route length or leading slash"}
	}
	for i := 1; i < len(route); i++ {
		if !routeChar[route[i]] {
			return &ContextError{Cause: CauseRouteInvalid, Detail: "route character outside the allowed set"}
		}
	}
	return nil
}

// RoutePattern is the pattern ValidateRoute implements, for documentation
// and for tests that compare the two.
const RoutePattern = `^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]{1,255}$`

var routeChar = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "._~!$&'()*+,;=:@%/-" {
		t[c] = true
	}
	return t
}()

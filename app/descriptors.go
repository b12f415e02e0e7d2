package app

import (
	"cmp"
	"context"
	"net/netip"
	"unicode/utf8"

	"github.com/sluicehq/sluice/domain"
)

// MaxSubjectLen bounds CountedWindow.Subject, in bytes: an Envoy
// descriptor's entries joined, which header values make longer than a
// user id (domain.MaxIdentifierLen).
const MaxSubjectLen = 4096

// WindowsRequest is a decision on windows the caller names, rather than
// on a route profile's: the Envoy door decides a request's descriptors
// with it (docs/adr/011). It goes through the pipeline of Evaluate: one
// all-or-nothing store call under one deadline, the breaker, the refusal
// cache, coalescing, the degraded matrix and the Recorder.
type WindowsRequest struct {
	// RouteKey names the set of windows: the route key of every key and
	// the profile label of the decision. 1 to 64 of [a-z0-9_-].
	RouteKey string
	// Family is the decision's route family, for metrics; zero means
	// FamilyRead.
	Family domain.RouteFamily
	// Action is what the degraded matrix does for this decision while the
	// store cannot answer; zero denies (fail closed).
	Action domain.DegradedAction
	// Scope is the raw identifier that scopes every key of the decision:
	// its pseudonym, with RouteKey, is the keys' Redis Cluster hash tag,
	// so the decision is one slot. "" scopes the keys by RouteKey alone.
	Scope string
	// Windows are the windows to decide, 1 to domain.MaxLimits, no two
	// with the same (Subject, Window.Name).
	Windows []CountedWindow
	// Shadow decides and records without blocking: Decision.Shadow is set
	// whatever Config.ShadowMode says.
	Shadow bool
	// ClientIP is the client's address when the caller knows it: it
	// reaches the security-audit record only, never a key.
	ClientIP netip.Addr
}

// CountedWindow is one window of a WindowsRequest: Cost units of Window,
// counted per Subject.
type CountedWindow struct {
	// Subject is the raw identity the window counts (for Envoy, the
	// descriptor's entries). It is pseudonymised like every identifier and
	// never reaches a key, a label or a log. 1 to MaxSubjectLen bytes of
	// valid UTF-8.
	Subject string
	// Window is the rate; its Name (1 to 32 of [a-z0-9_-]) ends the key
	// and names the window in the decision's rate-limit fields.
	Window domain.Window
	// Cost is the units consumed, 1 to Window.Limit.
	Cost int64
	// Scope, when not "", scopes this window's key in place of the
	// request's Scope (same bounds): windows of one request may then live
	// under different hash tags, and on a partitioned store (a Redis
	// Cluster) the request is decided across partitions, all or nothing
	// (docs/adr/013).
	Scope string
	// NoAllotments keeps every request that counts this window out of
	// allotments (docs/adr/019): each decided at the store.
	NoAllotments bool
}

// EvaluateWindows decides req's windows all or nothing: if one refuses,
// nothing is consumed on any. Every key is rl:{tag}:descriptor:<subject
// pseudonym>:<route key>:<window>, the tag being the pseudonym of
// (RouteKey, Scope), the window's own Scope when it has one. Windows
// whose tags fall in different partitions of the store are decided
// through one reservation per partition, released everywhere when one
// refuses (docs/adr/013): still all or nothing. Each window has a key of
// its own, never a shared log: the caller names every window, and an
// Envoy descriptor carries one rate (docs/adr/015). The Decision lists
// the windows in request order
// (Decision.Windows), so a caller reads each window's own remaining and
// reset. A request the store could never admit (a bad window, a cost above
// its limit, a subject out of bounds) is RejectedInvalidContext with cause
// invalid_limit or dimension_invalid. The error is as for Evaluate: only a
// recording failure.
func (l *Limiter) EvaluateWindows(ctx context.Context, req WindowsRequest) (domain.Decision, error) {
	ctx = l.startDecision(ctx)
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	ev.d.Shadow = ev.d.Shadow || req.Shadow
	// Every window's own status is read (Decision.Windows), which a
	// remembered refusal, keeping the limiting window only, cannot give:
	// the refusal cache is left out, as for the dual façade.
	ev.exactLayers = true
	if err := l.prepareWindows(ev, &req); err != nil {
		ev.reject(err)
	} else {
		l.run(ctx, ev)
	}
	return ev.d, l.record(ctx, ev, &Request{Route: req.RouteKey, ClientIP: req.ClientIP})
}

// The lengths of routeKeyRE's and windowNameRE's names.
const (
	maxRouteKeyLen   = 64
	maxWindowNameLen = 32
)

// isName reports whether s is 1 to max bytes of [a-z0-9_-]: routeKeyRE
// (max 64) and windowNameRE (max 32) without a regexp, whose two matches
// per request cost the Envoy door a tenth of its CPU in process.
func isName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// prepareWindows checks req and builds its keys.
func (l *Limiter) prepareWindows(ev *evaluation, req *WindowsRequest) error {
	if !isName(req.RouteKey, maxRouteKeyLen) {
		// Never a label: the route key is checked before it names anything.
		return &domain.ContextError{Cause: domain.CauseRouteInvalid, Detail: "route key outside [a-z0-9_-]{1,64}"}
	}
	ev.d.Profile, ev.d.Family = req.RouteKey, cmp.Or(req.Family, domain.FamilyRead)
	switch {
	case len(req.Windows) == 0 || len(req.Windows) > domain.MaxLimits:
		return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: "1 to domain.MaxLimits windows"}
	case len(req.Scope) > MaxSubjectLen || !utf8.ValidString(req.Scope):
		return &domain.ContextError{Cause: domain.CauseDimensionInvalid, Detail: "scope out of bounds"}
	}
	tag := l.pseudonym(domain.DimensionDescriptor, req.RouteKey+"\x00"+req.Scope)
	ev.allot = ev.mode == modeEvaluate
	for _, cw := range req.Windows {
		ev.allot = ev.allot && !cw.NoAllotments
		switch {
		case cw.Subject == "" || len(cw.Subject) > MaxSubjectLen || !utf8.ValidString(cw.Subject):
			return &domain.ContextError{Cause: domain.CauseDimensionInvalid, Detail: "subject out of bounds"}
		case len(cw.Scope) > MaxSubjectLen || !utf8.ValidString(cw.Scope):
			return &domain.ContextError{Cause: domain.CauseDimensionInvalid, Detail: "window scope out of bounds"}
		case !isName(cw.Window.Name, maxWindowNameLen):
			return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: "window name outside [a-z0-9_-]{1,32}"}
		}
		wtag := tag
		if cw.Scope != "" {
			wtag = l.pseudonym(domain.DimensionDescriptor, req.RouteKey+"\x00"+cw.Scope)
		}
		key := domain.KeyParts{
			Tag: wtag, Dimension: domain.DimensionDescriptor, ID: l.pseudonym(domain.DimensionDescriptor, cw.Subject),
			RouteKey: req.RouteKey, Window: cw.Window.Name,
		}.Key()
		ev.add(domain.Limit{Key: key, Window: cw.Window, Cost: cw.Cost}, domain.DimensionDescriptor)
	}
	if err := domain.ValidateLimits(ev.limits[:ev.n]); err != nil {
		return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: err.Error()}
	}
	ev.action, ev.routeKey = req.Action, req.RouteKey
	if ev.action == 0 {
		ev.action = domain.ActionDeny
	}
	// The bypass cap counts per scope: one tenant cannot use up another's.
	ev.capDim, ev.capID = domain.DimensionDescriptor, tag
	ev.capWindow = capWindow(ev.minLimit())
	return nil
}

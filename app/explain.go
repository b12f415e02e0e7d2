package app

import (
	"context"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Explanation is what a decision would check, read without a store: the
// profile and plan a request resolves to and each window with the key it
// counts on. An operator's tool prints it (cmd/sluice explain); its keys
// hold pseudonyms only, never a raw identity.
type Explanation struct {
	// Profile is the profile's name (a WindowsRequest's route key), Family
	// its route family and Plan the plan whose limits apply ("" for the
	// profile's own).
	Profile string
	Family  domain.RouteFamily
	Plan    string
	// Degraded is what the degraded matrix does for the request while the
	// store cannot answer.
	Degraded domain.DegradedAction
	// Cost is the units the request consumes in each rate window (a
	// concurrency window holds one slot).
	Cost int64
	// Reserving is set when the route decides through Limiter.Reserve
	// (settle rules or a concurrency window, docs/adr/012).
	Reserving bool
	// Windows are the request's windows in the order the store receives
	// them, concurrency windows included.
	Windows []ExplainedWindow
}

// ExplainedWindow is one window of an Explanation.
type ExplainedWindow struct {
	Dimension domain.Dimension
	Window    domain.Window
	// Key is the store key the window counts on: the sliding-log windows
	// of one principal share one (docs/adr/015).
	Key string
}

// Explain resolves req as Evaluate would, without a store and without
// recording anything: its profile, plan and every window with its key,
// concurrency windows included. A request Evaluate would reject (a route
// without a profile, a malformed identity, a cost out of bounds) returns
// its *domain.ContextError.
func (l *Limiter) Explain(req Request) (Explanation, error) {
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	ev.mode = modePeek // every window, as Peek and Reserve see them
	if err := l.prepare(ev, req); err != nil {
		return Explanation{}, err
	}
	x := Explanation{
		Profile: ev.d.Profile, Family: ev.d.Family, Plan: ev.d.Plan,
		Degraded: ev.action, Cost: ev.cost, Reserving: ev.prof.reserving,
	}
	x.Windows = explained(ev)
	return x, nil
}

// ExplainWindows is Explain for a WindowsRequest (the Envoy door's
// descriptors): the keys EvaluateWindows would count on.
func (l *Limiter) ExplainWindows(req WindowsRequest) (Explanation, error) {
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	if err := l.prepareWindows(ev, &req); err != nil {
		return Explanation{}, err
	}
	x := Explanation{Profile: ev.d.Profile, Family: ev.d.Family, Degraded: ev.action, Cost: 1}
	if len(req.Windows) > 0 {
		x.Cost = req.Windows[0].Cost
	}
	x.Windows = explained(ev)
	return x, nil
}

func explained(ev *evaluation) []ExplainedWindow {
	ws := make([]ExplainedWindow, ev.n)
	for i, lim := range ev.limits[:ev.n] {
		ws[i] = ExplainedWindow{Dimension: ev.dims[i], Window: lim.Window, Key: lim.Key}
	}
	return ws
}

// PeekWindows is Peek for a WindowsRequest: what each window has left
// before its cost, consuming nothing, from the primary store alone (an
// error wrapping domain.ErrStoreUnavailable or domain.ErrStoreTimeout
// when it cannot answer). A request the store could never admit returns
// its *domain.ContextError. Only its store call is recorded.
func (l *Limiter) PeekWindows(ctx context.Context, req WindowsRequest) (domain.Decision, error) {
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	ev.mode = modePeek
	ev.exactLayers = true
	if err := l.prepareWindows(ev, &req); err != nil {
		ev.reject(err)
		return ev.d, err
	}
	return l.peekPrepared(ctx, ev)
}

// ResetWindows forgets the counts of req's windows, as Reset does for an
// identity: every window's key and the degraded cap of the request's
// scope are reset on the primary store and on the fallback, the refusals
// this instance remembers are dropped, and the act is recorded on the
// security-audit channel before and after (the Recorder's RecordReset,
// dimension descriptor, the scope's pseudonym as subject) with actor. It
// returns what it did (ResetResult). A request the store could never
// admit is refused with its *domain.ContextError before anything is
// reset.
func (l *Limiter) ResetWindows(ctx context.Context, req WindowsRequest, actor string) (ResetResult, error) {
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	if err := l.prepareWindows(ev, &req); err != nil {
		return ResetResult{}, err
	}
	keys := make([]string, 0, ev.n+1)
	for _, lim := range ev.limits[:ev.n] {
		keys = append(keys, lim.Key)
	}
	keys = append(keys, domain.KeyParts{Tag: ev.capID, Dimension: ev.capDim, ID: ev.capID, RouteKey: ev.routeKey, Window: capWindowName}.Key())
	return l.resetAudited(ctx, keys, ports.ResetRecord{Dimension: domain.DimensionDescriptor, SubjectID: ev.capID, Actor: actor, ClientIP: req.ClientIP})
}

package app

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Deps are the ports a Limiter drives. The Limiter does not own them: Close
// leaves every store open.
type Deps struct {
	// Store is the primary, shared store (Redis). Required.
	Store ports.Store
	// Fallback is the in-process store, used for the degraded local action
	// and for the bypass cap. Required, and distinct from Store: a fallback
	// that fails with the primary falls back on nothing.
	Fallback ports.Store
	// Clock tells time and drives the health loop. nil means
	// ports.SystemClock.
	Clock ports.Clock
	// Prober checks the primary store's health. nil means a prober that
	// peeks a reserved key of Store (consuming nothing).
	Prober ports.Prober
	// Recorder observes every decision and transition. Required.
	Recorder ports.Recorder
	// MemoryCheck, when set, checks the store's memory ceiling against
	// Config.RedisMemoryBudgetMB at boot (see Limiter.Warnings).
	MemoryCheck MemoryCheck
}

// Request is the context of one request, as the entry point (HTTP
// middleware, gRPC interceptor) extracted it.
type Request struct {
	// Route is the route template, never the raw path: a ServeMux pattern
	// ("GET /api/v1/users/{id}"), an Express-style template or a gRPC full
	// method.
	Route string
	// ClientIP is the client address, after trusted-proxy resolution. It
	// is required: without it the request is RejectedInvalidContext
	// (ip_unresolved). domain.ParseClientIP reads a raw address.
	ClientIP netip.Addr
	// User, Tenant and APIKey are the raw identities; empty means absent,
	// and the dimension is then skipped.
	User, Tenant, APIKey string
	// Cost is the units this request consumes; 0 means the profile's cost.
	Cost int64
}

// Limiter is the decision pipeline of DESIGN.md: it validates a request's
// context, resolves its profile, pseudonymises its identities, evaluates
// every window in one store call under a deadline, falls back on the
// degraded matrix when the store cannot answer, and records every decision.
// A background health loop probes the store and drives the breaker.
//
// A Limiter is safe for simultaneous use. Close stops its health loop.
type Limiter struct {
	cfg      Config
	profiles *profileSet
	pseudo   *domain.Pseudonymiser

	store, fallback ports.Store
	clock           ports.Clock
	prober          ports.Prober
	rec             ports.Recorder

	// Health: the machine is guarded by mu; state mirrors its state for
	// the hot path, which reads it without locking.
	mu       sync.Mutex
	machine  domain.HealthMachine
	state    atomic.Uint32
	failures atomic.Int64 // consecutive in-band store failures

	facade facadeProfile

	warnings []string

	// The health loop.
	ticker    ports.Ticker
	loopCtx   context.Context
	stopLoop  context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	loopMu    sync.Mutex
	loopErrs  []error
	loopLost  int
	afterTick func() // test hook: called after each tick is processed
}

// New validates cfg (after WithDefaults), builds the Limiter, checks the
// store's maxmemory against the configured budget (see Warnings) and
// starts the health loop.
func New(cfg Config, deps Deps) (*Limiter, error) {
	return newLimiter(cfg, deps, nil)
}

func newLimiter(cfg Config, deps Deps, afterTick func()) (*Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case deps.Store == nil:
		return nil, &domain.ConfigError{Field: "deps.store", Reason: "required"}
	case deps.Fallback == nil:
		return nil, &domain.ConfigError{Field: "deps.fallback", Reason: "required: the degraded matrix counts on an in-process store"}
	case deps.Fallback == deps.Store:
		return nil, &domain.ConfigError{Field: "deps.fallback", Reason: "must not be the primary store"}
	case deps.Recorder == nil:
		return nil, &domain.ConfigError{Field: "deps.recorder", Reason: "required: every decision is recorded"}
	}
	profiles, err := buildProfiles(cfg)
	if err != nil {
		return nil, err
	}
	secret, err := cfg.SecretBytes()
	if err != nil {
		return nil, err
	}
	pseudo, err := domain.NewPseudonymiser(secret)
	if err != nil {
		return nil, &domain.ConfigError{Field: "hmac_secret", Reason: "unusable", Err: err}
	}
	fp, err := newFacadeProfile(cfg.Facade)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:       cfg,
		profiles:  profiles,
		pseudo:    pseudo,
		store:     deps.Store,
		fallback:  deps.Fallback,
		clock:     deps.Clock,
		prober:    deps.Prober,
		rec:       deps.Recorder,
		machine:   domain.NewHealthMachine(cfg.ClearingProbes),
		facade:    fp,
		done:      make(chan struct{}),
		afterTick: afterTick,
	}
	if l.clock == nil {
		l.clock = ports.SystemClock{}
	}
	if l.prober == nil {
		l.prober = storeProber{store: deps.Store, clock: l.clock}
	}
	l.state.Store(uint32(domain.Healthy))
	l.warnings = l.checkMemory(deps.MemoryCheck)
	// The ticker exists before New returns, so a test that advances a fake
	// clock right after New cannot race the loop's start.
	l.ticker = l.clock.NewTicker(cfg.ProbeInterval)
	l.loopCtx, l.stopLoop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.healthLoop()
	return l, nil
}

// Config returns the configuration in use, defaults applied.
func (l *Limiter) Config() Config { return l.cfg }

// CheckRoutes is Config.CheckRoutes on the Limiter's own profiles.
func (l *Limiter) CheckRoutes(exposed []string) error { return l.profiles.checkRoutes(exposed) }

// Warnings returns the boot warnings (maxmemory below the budget or
// unreadable). They name no identifier.
func (l *Limiter) Warnings() []string { return append([]string(nil), l.warnings...) }

// SystemState returns the current health state.
func (l *Limiter) SystemState() domain.SystemState { return domain.SystemState(l.state.Load()) }

// BreakerOpen reports whether store calls are currently skipped: the
// breaker is closed only while the system is HEALTHY.
func (l *Limiter) BreakerOpen() bool { return l.SystemState() != domain.Healthy }

// keyed is one limit of a decision with what the decision needs to know
// about it.
type keyed struct {
	dim    domain.Dimension
	window domain.Window
}

// evaluation is the state of one decision in flight. It lives on the
// stack: the fixed arrays keep a nine-key decision from allocating beyond
// its keys.
type evaluation struct {
	now      time.Time
	prof     *profile
	limits   [domain.MaxLimits]domain.Limit
	meta     [domain.MaxLimits]keyed
	n        int
	tenantID string // tenant pseudonym, "" without a tenant
	tag      string
	// What the degraded matrix needs: the action, and the local cap with
	// the route key and client (dimension, pseudonym) it is counted for.
	action    domain.DegradedAction
	capWindow domain.Window
	routeKey  string
	capDim    domain.Dimension
	capID     string
}

// Evaluate decides one request. The pipeline: validate the route and the
// context (RejectedInvalidContext, the cause kept for logs and metrics);
// resolve the profile; normalise and pseudonymise every identity; build
// the keys, all under one hash tag; call the store under the deadline when
// the breaker is closed; otherwise, or when the call fails, apply the
// degraded matrix; record the decision.
//
// The returned Decision is always complete and terminal. The error is
// non-nil only when recording failed (the decision or a health transition
// it caused): observability fails closed, so the caller should not serve
// the request as if nothing happened. Invalid context and store failures
// are not errors: they are decisions, and the Recorder receives their
// error.
//
// When none of the profile's dimensions applies to the request (e.g. a
// profile with user windows only and an anonymous request), nothing is
// counted: the decision is Allowed with Limit 0 and Remaining -1.
func (l *Limiter) Evaluate(ctx context.Context, req Request) (domain.Decision, error) {
	var ev evaluation
	ev.now = l.clock.Now()
	d, rec, transErr := l.decide(ctx, &ev, req)
	rec.Decision = d
	rec.TenantID = ev.tenantID
	rec.ClientIP = req.ClientIP
	rec.Route = req.Route
	return d, errors.Join(transErr, l.rec.RecordDecision(ctx, rec))
}

// decide runs the pipeline up to, and excluding, recording.
func (l *Limiter) decide(ctx context.Context, ev *evaluation, req Request) (domain.Decision, ports.DecisionRecord, error) {
	d := l.newDecision()
	p, err := l.profiles.resolve(req.Route)
	if err != nil {
		return reject(d, err)
	}
	ev.prof = p
	ev.action, ev.capWindow, ev.routeKey = p.action, p.capWindow, p.Name
	d.Profile, d.Family = p.Name, p.Family
	if err := l.buildKeys(ev, req); err != nil {
		return reject(d, err)
	}
	if ev.n == 0 {
		d.State, d.Remaining = domain.Allowed, -1
		return d, ports.DecisionRecord{}, nil
	}
	return l.run(ctx, ev, d)
}

// newDecision starts a decision with nothing checked.
func (l *Limiter) newDecision() domain.Decision {
	return domain.Decision{
		TenantRemaining: -1,
		UserRemaining:   -1,
		SystemState:     l.SystemState(),
		Shadow:          l.cfg.ShadowMode,
	}
}

// reject turns a context error into RejectedInvalidContext.
func reject(d domain.Decision, err error) (domain.Decision, ports.DecisionRecord, error) {
	d.State, d.Cause = domain.RejectedInvalidContext, domain.CauseDimensionInvalid
	var ce *domain.ContextError
	if errors.As(err, &ce) {
		d.Cause = ce.Cause
	}
	return d, ports.DecisionRecord{Err: err}, nil
}

// buildKeys normalises and pseudonymises the identities and builds the
// store limits of ev.prof. Every identity given is validated, even one the
// profile does not count, so that a malformed request is refused the same
// way on every route.
func (l *Limiter) buildKeys(ev *evaluation, req Request) error {
	p := ev.prof
	cost := req.Cost
	if cost == 0 {
		cost = p.Cost
	}
	if cost < 1 || cost > p.minLimit {
		return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: "request cost outside 1..smallest limit"}
	}
	ip, err := domain.NormaliseIP(req.ClientIP)
	if err != nil {
		return err
	}
	var user, apiKey, tenant string
	for _, f := range []struct {
		raw string
		dst *string
	}{{req.User, &user}, {req.APIKey, &apiKey}, {req.Tenant, &tenant}} {
		if f.raw == "" {
			continue
		}
		if *f.dst, err = domain.NormaliseIdentifier(f.raw); err != nil {
			return err
		}
	}
	ipID := l.pseudo.Pseudonymise(domain.DimensionIP, ip)
	ev.tag, ev.capDim, ev.capID = ipID, domain.DimensionIP, ipID
	if tenant != "" {
		ev.tenantID = l.pseudo.Pseudonymise(domain.DimensionTenant, tenant)
		ev.tag = ev.tenantID
	}
	var userID, apiKeyID string
	if user != "" {
		userID = l.pseudo.Pseudonymise(domain.DimensionUser, user)
		ev.capDim, ev.capID = domain.DimensionUser, userID
	}
	for _, dw := range p.Dimensions {
		id, routeKey := "", p.Name
		switch dw.Dimension {
		case domain.DimensionIP:
			id = ipID
		case domain.DimensionUser:
			id = userID
		case domain.DimensionAPIKey:
			if apiKey != "" && apiKeyID == "" {
				apiKeyID = l.pseudo.Pseudonymise(domain.DimensionAPIKey, apiKey)
			}
			id = apiKeyID
		case domain.DimensionTenant:
			id = ev.tenantID
		case domain.DimensionTenantGlobal:
			id, routeKey = ev.tenantID, domain.GlobalRouteKey
		}
		if id == "" {
			continue // the request lacks this identity
		}
		for _, w := range dw.Windows {
			ev.limits[ev.n] = domain.Limit{
				Key:    domain.KeyParts{Tag: ev.tag, Dimension: dw.Dimension, ID: id, RouteKey: routeKey, Window: w.Name}.Key(),
				Window: w,
				Cost:   cost,
			}
			ev.meta[ev.n] = keyed{dim: dw.Dimension, window: w}
			ev.n++
		}
	}
	return nil
}

// run calls the primary store when the breaker is closed, and the degraded
// matrix otherwise or on failure.
func (l *Limiter) run(ctx context.Context, ev *evaluation, d domain.Decision) (domain.Decision, ports.DecisionRecord, error) {
	if l.BreakerOpen() {
		return l.degraded(ctx, ev, d, domain.CauseBreakerOpen, nil)
	}
	limits := ev.limits[:ev.n]
	sctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	start := l.clock.Now()
	res, err := l.store.Evaluate(sctx, ev.now, limits)
	latency := l.clock.Now().Sub(start)
	cancel()
	l.rec.RecordStoreCall(ctx, ports.StoreCall{Op: ports.OpEvaluate, Start: start, Latency: latency, Keys: len(limits), Err: err})
	if err == nil {
		l.failures.Store(0)
		d = l.fromResult(ev, d, &res)
		return d, ports.DecisionRecord{StoreLatency: latency}, nil
	}
	var le *domain.LimitError
	if errors.As(err, &le) {
		// The store refused the request shape: a defect, not an outage, so
		// the breaker does not count it.
		d.Cause = domain.CauseInvalidLimit
		d.State = domain.RejectedInvalidContext
		return d, ports.DecisionRecord{Err: err, StoreLatency: latency}, nil
	}
	cause := domain.CauseStoreUnavailable
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, domain.ErrStoreTimeout) {
		cause = domain.CauseStoreTimeout
	}
	var transErr error
	// A caller that gave up is not the store's failure.
	if ctx.Err() == nil {
		transErr = l.inBandFailure(ctx)
	}
	d, rec, err2 := l.degraded(ctx, ev, d, cause, err)
	rec.StoreLatency = latency
	return d, rec, errors.Join(transErr, err2)
}

// fromResult maps a store result to a decision.
func (l *Limiter) fromResult(ev *evaluation, d domain.Decision, res *domain.Result) domain.Decision {
	d.State, d.Cause = domain.Allowed, domain.CauseNone
	if !res.Allowed {
		d.State, d.Cause = domain.Throttled, domain.CauseLimitExceeded
	}
	lim := ev.meta[res.Limiting]
	d.Limit = lim.window.Limit
	d.Remaining = res.Remaining
	d.RetryAfter = res.RetryAfter
	d.ResetAfter = res.ResetAfter
	d.LimitingDimension = lim.dim
	d.LimitingWindow = lim.window.Name
	d.LimitingPeriod = lim.window.Period
	d.Layer = lim.dim.Layer()
	for i, st := range res.Statuses() {
		switch ev.meta[i].dim.Layer() {
		case domain.LayerTenant:
			d.TenantRemaining = minRemaining(d.TenantRemaining, st.Remaining)
		case domain.LayerUser:
			d.UserRemaining = minRemaining(d.UserRemaining, st.Remaining)
		}
	}
	d.SystemState = l.SystemState()
	return d
}

// minRemaining is min for per-layer remaining, where -1 means unchecked.
func minRemaining(cur, v int64) int64 {
	if cur < 0 || v < cur {
		return v
	}
	return cur
}

// degraded applies the degraded matrix: the store could not answer
// (cause), or the breaker is open. storeErr is the failure, if any, kept
// for the Recorder.
func (l *Limiter) degraded(ctx context.Context, ev *evaluation, d domain.Decision, cause domain.Cause, storeErr error) (domain.Decision, ports.DecisionRecord, error) {
	rec := ports.DecisionRecord{Err: storeErr}
	d.SystemState = l.SystemState()
	deny := func(cause domain.Cause, retry time.Duration) domain.Decision {
		d.State, d.Cause, d.RetryAfter = domain.DeniedDegraded, cause, max(retry, domain.DeniedRetryAfter)
		return d
	}
	switch ev.action {
	case domain.ActionBypass:
		// The cap is counted per instance on the fallback store, per
		// (profile, client): it bounds what one client can replay while
		// the shared store is out (seed PD-172 R-08).
		capLimit := [1]domain.Limit{{
			Key:    domain.KeyParts{Tag: ev.capID, Dimension: ev.capDim, ID: ev.capID, RouteKey: ev.routeKey, Window: capWindowName}.Key(),
			Window: ev.capWindow,
			Cost:   1,
		}}
		res, err := l.fallback.Evaluate(ctx, ev.now, capLimit[:])
		if err != nil {
			// Without its cap a bypass is unbounded: fail closed.
			rec.Err = errors.Join(storeErr, err)
			return deny(cause, 0), rec, nil
		}
		d.Limit, d.Remaining = ev.capWindow.Limit, res.Remaining
		d.ResetAfter = res.ResetAfter
		d.LimitingDimension, d.LimitingWindow, d.LimitingPeriod = ev.capDim, capWindowName, ev.capWindow.Period
		d.Layer = domain.LayerNone
		if !res.Allowed {
			return deny(domain.CauseLocalCapExceeded, res.RetryAfter), rec, nil
		}
		d.State, d.Cause = domain.BypassDegraded, cause
		return d, rec, nil
	case domain.ActionLocal:
		res, err := l.fallback.Evaluate(ctx, ev.now, ev.limits[:ev.n])
		if err != nil {
			rec.Err = errors.Join(storeErr, err)
			return deny(cause, 0), rec, nil
		}
		d = l.fromResult(ev, d, &res)
		d.Cause = domain.CauseLocalLimit
		return d, rec, nil
	default:
		return deny(cause, 0), rec, nil
	}
}

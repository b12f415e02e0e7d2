package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	// Prober checks the primary store's health. nil means the store's own
	// (ports.HealthProber: the Redis adapter's probes each node, so that
	// a dead master opens the breaker of its own slots only), else a
	// prober that peeks a reserved key of Store (consuming nothing).
	Prober ports.Prober
	// Recorder observes every decision, transition, store call and reset.
	// Required: production services use adapters/otel; tests and
	// benchmarks may use ports/recordertest.
	Recorder ports.Recorder
	// MemoryCheck checks the store's memory ceiling against
	// Config.RedisMemoryBudgetMB at boot (see Limiter.Warnings). nil means
	// the store's own (ports.MemoryChecker: the Redis adapter's reads
	// maxmemory and its policy on every node), else none.
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
	// Method and Path are the request as received (the HTTP method and
	// the URL's path, no query), when the entry point knows them. They
	// reach the security-audit record of a request whose route is invalid
	// or unknown, so that an operator sees what was asked for; never a
	// key, a metric label or the application log.
	Method, Path string
}

// Limiter is the decision pipeline (docs/adr/005): it validates a
// request's context, resolves its profile and plan, pseudonymises its
// identities, evaluates every window in one store call under one deadline,
// falls back on the degraded matrix when the store cannot answer, and
// records every decision. A background health loop probes the store and
// drives the breaker.
//
// A Limiter is safe for simultaneous use. Close stops its health loop.
type Limiter struct {
	cfg      Config
	profiles *profileSet
	pseudo   *domain.Pseudonymiser
	names    *pseudonymCache
	refusals *refusalCache
	// coalesce joins concurrent decisions on one key set into one store
	// call; nil when the store cannot decide repeated requests.
	coalesce *coalescer
	// allots holds the instance's allotments (docs/adr/019); nil when the
	// store cannot reserve ahead or Config.Allotments is off.
	allots *allotter
	// tenantPlans and keyPlans map pseudonyms to plans.
	tenantPlans, keyPlans map[string]*plan

	store, fallback ports.Store
	// reserver and partitioned are the primary store's optional
	// capabilities (nil without): reservations (docs/adr/012) and calls
	// that reach one partition each (docs/adr/013). fallbackReserver is
	// the fallback's, for the degraded local action of a reservation.
	reserver         ports.Reserver
	partitioned      ports.Partitioned
	fallbackReserver ports.Reserver
	clock            ports.Clock
	systemClock      bool // clock is ports.SystemClock: its instants are wall instants
	// storeWaits is set once the primary store has waited on a call's
	// deadline (timed).
	storeWaits atomic.Bool
	// dispatching is set when the primary store queues its calls and
	// says when it sends each (ports.Dispatcher): their store deadline
	// starts then.
	dispatching bool
	// lag measures the time the service could not run, which the store
	// deadline gives back (storetime.go).
	lag    *lagMeter
	prober ports.Prober
	rec    ports.Recorder
	tracer ports.DecisionTracer // nil unless rec traces

	// Health: one machine per node of the store (breaker.go); state is
	// the instance's, the worst node's, for the hot path.
	probeState
	state atomic.Uint32

	facade facadeProfile

	warnings []string

	// The health loop. tickMu guards the ticker, which retick replaces
	// when the state calls for another interval.
	tickMu        sync.Mutex
	ticker        ports.Ticker
	tickEvery     time.Duration
	tickStopped   bool
	tickerChanged chan struct{}

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
// starts the health loop. A store that says it is not connected yet
// (ports.Readier: the Redis adapter started while Redis was down) is
// probed once first, within Config.ProbeTimeout: when that probe fails,
// the Limiter starts DEGRADED (the transition recorded as any other),
// its decisions come from the degraded matrix, and the health loop
// probes at Config.RecoveryProbeInterval until the store answers
// (docs/adr/008). Any other store starts HEALTHY: an outage is then
// found as one that begins later, by the loop and the breaker. New never
// fails for an outage.
func New(cfg Config, deps Deps) (*Limiter, error) {
	return newLimiter(cfg, deps, nil)
}

func newLimiter(cfg Config, deps Deps, afterTick func()) (*Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.check(); err != nil {
		return nil, err
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
		names:     newPseudonymCache(pseudo, cfg.PseudonymCacheSize),
		refusals:  newRefusalCache(cfg.RefusalCacheSize, cfg.RefusalCacheTTL),
		store:     deps.Store,
		fallback:  deps.Fallback,
		clock:     deps.Clock,
		prober:    deps.Prober,
		rec:       deps.Recorder,
		facade:    fp,
		done:      make(chan struct{}),
		afterTick: afterTick,
		lag:       newLagMeter(max(cfg.ShedAfter, cfg.ProbeTimeout)),

		tickerChanged: make(chan struct{}, 1),
	}
	l.tracer, _ = deps.Recorder.(ports.DecisionTracer)
	if do, ok := deps.Recorder.(ports.DeadlineObserver); ok {
		do.ObserveStoreDeadline(cfg.StoreTimeout)
	}
	l.reserver, _ = deps.Store.(ports.Reserver)
	l.partitioned, _ = deps.Store.(ports.Partitioned)
	if d, ok := deps.Store.(ports.Dispatcher); ok {
		l.dispatching = d.Dispatches()
	}
	l.fallbackReserver, _ = deps.Fallback.(ports.Reserver)
	if err := profiles.needReserver(l.reserver != nil); err != nil {
		return nil, err
	}
	l.coalesce = newCoalescer(l, deps.Store)
	l.tenantPlans, l.keyPlans = l.assignPlans()
	if l.clock == nil {
		l.clock = ports.SystemClock{}
	}
	_, l.systemClock = l.clock.(ports.SystemClock)
	l.allots = newAllotter(l, deps.Store)
	if l.prober == nil {
		if hp, ok := deps.Store.(ports.HealthProber); ok {
			l.prober = hp.HealthProber()
		} else {
			l.prober = storeProber{store: deps.Store, clock: l.clock}
		}
	}
	if deps.MemoryCheck == nil {
		if mc, ok := deps.Store.(ports.MemoryChecker); ok {
			deps.MemoryCheck = mc.CheckMemory
		}
	}
	l.state.Store(uint32(domain.Healthy))
	l.probeState.init(cfg.ClearingProbes, l.prober, l.rec)
	l.warnings = l.checkMemory(deps.MemoryCheck)
	if r, ok := deps.Store.(ports.Readier); ok && r.Ready() != nil {
		l.firstProbe()
	}
	// The ticker exists before New returns, so a test that advances a fake
	// clock right after New cannot race the loop's start.
	l.tickEvery = l.probeEvery()
	l.ticker = l.clock.NewTicker(l.tickEvery)
	l.loopCtx, l.stopLoop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.healthLoop()
	return l, nil
}

func (d Deps) check() error {
	switch {
	case d.Store == nil:
		return &domain.ConfigError{Field: "deps.store", Reason: "required"}
	case d.Fallback == nil:
		return &domain.ConfigError{Field: "deps.fallback", Reason: "required: the degraded matrix counts on an in-process store"}
	case d.Fallback == d.Store:
		return &domain.ConfigError{Field: "deps.fallback", Reason: "must not be the primary store"}
	case d.Recorder == nil:
		return &domain.ConfigError{Field: "deps.recorder", Reason: "required: every decision is recorded (recordertest.Discard records nothing, for tests)"}
	}
	return nil
}

// assignPlans pseudonymises the identities each plan is assigned to.
func (l *Limiter) assignPlans() (tenants, keys map[string]*plan) {
	tenants, keys = map[string]*plan{}, map[string]*plan{}
	for _, p := range l.profiles.plans {
		for _, t := range p.tenants {
			tenants[l.pseudo.Pseudonymise(domain.DimensionTenant, t)] = p
		}
		for _, k := range p.apiKeys {
			keys[l.pseudo.Pseudonymise(domain.DimensionAPIKey, k)] = p
		}
	}
	return tenants, keys
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

// evaluation is one decision in flight. It lives on the caller's stack:
// the fixed arrays keep a nine-key decision from allocating beyond its
// keys.
type evaluation struct {
	now    time.Time
	d      domain.Decision
	limits [domain.MaxLimits]domain.Limit
	dims   [domain.MaxLimits]domain.Dimension
	n      int
	// keys, when set, is the keys of limits[:n] end to end: the one
	// string addProfileKeys cut them from (see fingerprint).
	keys string
	// tenantID is the tenant's pseudonym, "" without a tenant.
	tenantID string
	// What the degraded matrix needs: the action, and the local cap with
	// the route key and client (dimension, pseudonym) it is counted for.
	action    domain.DegradedAction
	capWindow domain.Window
	routeKey  string
	capDim    domain.Dimension
	capID     string
	// For the record: the store's latency, the error that shaped the
	// decision, and a Recorder failure met on the way (a transition).
	latency  time.Duration
	err      error
	transErr error
	// madeCall is set when this decision counts the outcome of the
	// primary store call it was decided by: the call it made alone, or
	// the one member of a coalesced batch that takes it (docs/adr/007).
	madeCall bool
	// callStart is when that call began, on the Limiter's clock.
	callStart time.Time
	// coIndex is the decision's place in a coalesced batch, and
	// coDeadline its own store deadline there.
	coIndex    int
	coDeadline time.Time
	// exactLayers is set when the caller reads every layer's remaining
	// (the ADR-002 dual façade): the refusal cache cannot repeat those.
	exactLayers bool
	// allot is set when the decision may be taken from an allotment, or
	// take one (docs/adr/019): a decision that consumes, on windows that
	// allow them.
	allot bool
	// mode says what the decision does at the store: evaluate, reserve
	// (Limiter.Reserve) or peek. A reservation holds its concurrency
	// windows and its lease lasts ttl; lease is what the store gave it,
	// held the Reservation once the decision passed, and prof and cost
	// the profile and cost it was decided with.
	mode  decisionMode
	ttl   time.Duration
	lease domain.Lease
	held  *Reservation
	prof  *profile
	cost  int64
}

// decisionMode is what a decision asks of the store.
type decisionMode uint8

const (
	modeEvaluate decisionMode = iota
	modeReserve
	modePeek
)

// evaluations recycles evaluations: their limits go to a store through an
// interface, which makes them escape, and at a few kilobytes each a fresh
// one per decision would cost more than the rest of the pipeline. No store
// keeps the limits past its call (ports.Store).
var evaluations = sync.Pool{New: func() any { return new(evaluation) }}

// getEvaluation returns a zeroed evaluation; putEvaluation hands it back
// once the decision is out of it.
func getEvaluation() *evaluation {
	ev := evaluations.Get().(*evaluation)
	*ev = evaluation{}
	return ev
}

func putEvaluation(ev *evaluation) { evaluations.Put(ev) }

// add appends one limit of dimension dim.
func (ev *evaluation) add(l domain.Limit, dim domain.Dimension) {
	ev.limits[ev.n], ev.dims[ev.n] = l, dim
	ev.n++
	ev.keys = "" // no longer the keys of every limit
}

// minLimit is the smallest limit of the evaluation's windows.
func (ev *evaluation) minLimit() int64 {
	m := ev.limits[0].Window.Limit
	for _, l := range ev.limits[1:ev.n] {
		m = min(m, l.Window.Limit)
	}
	return m
}

// begin starts an evaluation: the instant, and a decision with nothing
// checked.
func (l *Limiter) begin(ev *evaluation) {
	ev.now = l.clock.Now()
	ev.d = domain.Decision{
		TenantRemaining: -1,
		UserRemaining:   -1,
		SystemState:     l.SystemState(),
		Shadow:          l.cfg.ShadowMode,
	}
}

// reject makes the decision RejectedInvalidContext for err, keeping its
// cause (logs and metrics only: the client sees one uniform answer).
func (ev *evaluation) reject(err error) {
	ev.d.State, ev.d.Cause, ev.err = domain.RejectedInvalidContext, domain.CauseDimensionInvalid, err
	var ce *domain.ContextError
	if errors.As(err, &ce) {
		ev.d.Cause = ce.Cause
	}
}

// Evaluate decides one request. The pipeline: validate the route and the
// context (RejectedInvalidContext, the cause kept for logs and metrics);
// resolve the profile and the plan; normalise and pseudonymise every
// identity; build the keys, all under one hash tag (docs/adr/004); repeat a
// refusal the store gave moments ago for the same key set while it still
// holds (Source SourceRefusalCache, docs/adr/005); call the store under
// Config.StoreTimeout when the breaker is closed, in one call with the
// concurrent decisions on the same key set when the store implements
// ports.Repeater (docs/adr/007); otherwise, or when the call fails, apply
// the degraded matrix (Decision.Degraded); record the decision. A request
// whose keys span partitions of the store (ports.Partitioned: ip windows
// on a Redis Cluster, docs/adr/013) is decided all or nothing through one
// short reservation per partition, released everywhere when one refuses.
//
// Evaluate leaves out the profile's concurrency windows: only Reserve
// holds them (docs/adr/012). A profile with concurrency windows only
// counts nothing here (Cause no_window, below).
//
// The returned Decision is always complete and terminal. The error is
// non-nil only when recording failed (the decision or a health transition
// it caused): observability fails closed, so the caller should not serve
// the request as if nothing happened. Invalid context and store failures
// are not errors: they are decisions, and the Recorder receives their
// error.
//
// When none of the profile's windows applies to the request (e.g. a
// profile with user windows only and an anonymous request), nothing is
// counted: the decision is Allowed, Cause no_window, Limit 0, Remaining -1.
func (l *Limiter) Evaluate(ctx context.Context, req Request) (domain.Decision, error) {
	ctx = l.startDecision(ctx)
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	if err := l.prepare(ev, req); err != nil {
		ev.reject(err)
	} else {
		l.run(ctx, ev)
	}
	return ev.d, l.record(ctx, ev, &req)
}

func (l *Limiter) startDecision(ctx context.Context) context.Context {
	if l.tracer == nil {
		return ctx
	}
	return l.tracer.StartDecision(ctx)
}

// record hands the decision to the Recorder and returns what failed to be
// recorded, if anything.
func (l *Limiter) record(ctx context.Context, ev *evaluation, req *Request) error {
	err := l.rec.RecordDecision(ctx, ports.DecisionRecord{
		Decision:     ev.d,
		TenantID:     ev.tenantID,
		ClientIP:     req.ClientIP,
		Route:        req.Route,
		Method:       req.Method,
		Path:         req.Path,
		StoreLatency: ev.latency,
		At:           ev.now,
		Err:          ev.err,
	})
	if ev.transErr != nil {
		return errors.Join(ev.transErr, err)
	}
	return err
}

// prepare resolves the route's profile and plan, checks the cost and
// builds the keys of req.
func (l *Limiter) prepare(ev *evaluation, req Request) error {
	p, err := l.profiles.resolve(req.Route)
	if err != nil {
		return err
	}
	ev.d.Profile, ev.d.Family = p.Name, p.Family
	id, err := l.identify(req)
	if err != nil {
		return err
	}
	p = l.planned(p, id)
	ev.d.Plan = p.plan
	cost := req.Cost
	if cost == 0 {
		cost = p.Cost
	}
	if cost < 1 || cost > p.minLimit {
		return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: "request cost outside 1..smallest limit"}
	}
	ev.tenantID = id.tenant
	ev.action, ev.capWindow, ev.routeKey = p.action, p.capWindow, p.Name
	ev.capDim, ev.capID = id.client()
	ev.prof, ev.cost = p, cost
	ev.allot = p.allot && ev.mode == modeEvaluate
	ev.ttl = cmp.Or(p.leaseTTL, l.cfg.ReservationTTL)
	ev.addProfileKeys(p, id, cost, ev.mode != modeEvaluate)
	return nil
}

// planned returns the plan variant of p for the request's identities: the
// api key's plan, else the tenant's, else p itself.
func (l *Limiter) planned(p *profile, id identity) *profile {
	for _, pl := range []*plan{l.keyPlans[id.apiKey], l.tenantPlans[id.tenant]} {
		if pl != nil {
			if v, ok := pl.profiles[p.Name]; ok {
				return v
			}
			return p
		}
	}
	return p
}

// run decides an evaluation whose keys are built: from the refusal cache,
// the primary store, or the degraded matrix.
func (l *Limiter) run(ctx context.Context, ev *evaluation) {
	if ev.n == 0 {
		ev.d.State, ev.d.Cause, ev.d.Remaining = domain.Allowed, domain.CauseNoWindow, -1
		return
	}
	allot := ev.allot && l.allots != nil
	if allot && l.allots.spend(ev) {
		// Admitted in process from units the store allotted, whatever
		// the breaker says: they were counted (docs/adr/019).
		return
	}
	if l.refusals.repeat(ev) {
		return
	}
	if parts := l.partitions(ev); parts.n > 1 {
		// Not coalesced, never allotted: each side is a reservation of
		// its own (docs/adr/013).
		l.runSplit(ctx, ev, &parts)
		return
	}
	// The breaker of the node that serves the keys (docs/adr/008).
	node := l.nodeOf(ev)
	if !l.allowed(node) {
		l.degraded(ctx, ev, domain.CauseBreakerOpen, nil)
		return
	}
	if allot && l.allots.take(ctx, ev, node) {
		return
	}
	gen := l.refusals.generation()
	var ak *allotKey
	if allot {
		ak = l.allots.enter(ev)
	}
	res, err := l.evaluateStore(ctx, ev)
	if ev.madeCall {
		// Only the decision that counts the call's outcome accounts it:
		// the one that called alone, or one member of a coalesced batch
		// (docs/adr/007, docs/adr/008).
		ev.transErr = l.storeOutcome(ctx, node, ev.callStart, err)
	}
	if err != nil {
		if allot {
			l.allots.observe(ev, ak, nil)
		}
		l.failed(ctx, ev, err)
		return
	}
	l.fromResult(ev, &res, domain.SourcePrimary)
	if allot {
		l.allots.observe(ev, ak, &res)
		if !res.Allowed && !heldRefused(ev, &res) && l.allots.spendRefused(ctx, ev, ak) {
			return
		}
	}
	switch {
	case !res.Allowed && !heldRefused(ev, &res):
		l.refusals.remember(ev, &res, gen)
	case res.Allowed && ev.mode == modeReserve:
		ev.held = l.newReservation(ev, l.reserver, true, []heldPart{ev.part(ev.lease, node, nil)})
	}
}

// heldRefused reports whether a concurrency window refused res: its slots
// come back when a holder settles, not with time, so the refusal cache
// must not repeat that refusal.
func heldRefused(ev *evaluation, res *domain.Result) bool {
	for i, st := range res.Statuses() {
		if !st.Allowed && ev.limits[i].Window.Algorithm == domain.Concurrency {
			return true
		}
	}
	return false
}

// failed decides ev after its store call failed with err: a request the
// store refused by shape is RejectedInvalidContext; a caller that gave up
// and an instance past its shed bound are refused without the degraded
// matrix (never a bypass: shed); any other failure goes to the degraded
// matrix.
func (l *Limiter) failed(ctx context.Context, ev *evaluation, err error) {
	var le *domain.LimitError
	if errors.As(err, &le) || errors.Is(err, domain.ErrCrossSlot) {
		// The store refused the request's shape: a defect, not an outage, so
		// the breaker does not count it.
		ev.d.State, ev.d.Cause, ev.err = domain.RejectedInvalidContext, domain.CauseInvalidLimit, err
		return
	}
	switch {
	case errors.Is(err, ErrOverloaded):
		l.shed(ev, domain.CauseOverloaded, err)
		return
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		l.shed(ev, domain.CauseCallerGone, err)
		return
	}
	if cause, ok := requestFault(err); ok {
		// That request's fault (docs/adr/008): its own degraded decision.
		l.degraded(ctx, ev, cause, err)
		return
	}
	cause := domain.CauseStoreUnavailable
	if errors.Is(err, domain.ErrStoreTimeout) {
		cause = domain.CauseStoreTimeout
	}
	l.degraded(ctx, ev, cause, err)
}

// shed decides ev without the store's answer and without the degraded
// matrix (docs/adr/008): from what is known, a refusal the store gave
// moments ago for the same key set (the refusal cache, which other
// decisions may have filled while this one waited), else a refusal with
// cause: the instance is overloaded, or the caller gave up. It never
// admits: the limits hold whatever the load.
func (l *Limiter) shed(ev *evaluation, cause domain.Cause, err error) {
	if l.refusals.repeat(ev) {
		ev.err = err
		return
	}
	ev.err = err
	ev.d.Windows = domain.WindowChecks{}
	ev.deny(cause, 0)
	ev.d.Degraded = true
	ev.d.Source = domain.SourceNone
	ev.d.SystemState = l.SystemState()
}

// evaluateStore decides ev on the primary store: coalesced with the
// concurrent decisions on its key set when the store can decide repeated
// requests (docs/adr/007), else in a call of its own.
func (l *Limiter) evaluateStore(ctx context.Context, ev *evaluation) (domain.Result, error) {
	if ev.mode == modeReserve {
		// Never coalesced: each reservation has its own lease.
		res, _, err := l.callStore(ctx, ev, ports.OpReserve)
		return res, err
	}
	if l.coalesce != nil {
		return l.coalesce.evaluate(ctx, ev)
	}
	res, _, err := l.callStore(ctx, ev, ports.OpEvaluate)
	return res, err
}

// callStore calls the primary store under the one store deadline and
// records the call (timed).
func (l *Limiter) callStore(ctx context.Context, ev *evaluation, op ports.StoreOp) (domain.Result, time.Time, error) {
	var res domain.Result
	start, took, err := l.timed(ctx, op, ev.n, func(sctx context.Context) (err error) {
		res, err = l.storeCall(sctx, op, ev, ev.limits[:ev.n])
		return err
	})
	ev.latency = took
	ev.madeCall, ev.callStart = true, start
	return res, start, err
}

// timed makes one call of the primary store, fn, under the one store
// deadline, and records it as op on keys keys. It returns when the call
// began (on the Limiter's clock), how long it took, and its error
// classified: a store deadline missed wraps domain.ErrStoreTimeout; a
// call still unanswered at the shed bound (Config.ShedAfter after it
// began) wraps ErrOverloaded; a caller that gave up keeps its context's
// error. The store deadline counts the store's time only (storetime.go,
// docs/adr/008): the time the service could not run is given back, and
// for a store that queues its calls (ports.Dispatcher) it starts when the
// call is sent. Every store call of a decision, a split decision's
// sides, Settle and Renew go through here.
func (l *Limiter) timed(ctx context.Context, op ports.StoreOp, keys int, fn func(ctx context.Context) error) (start time.Time, took time.Duration, err error) {
	start = l.clock.Now()
	wallStart := l.wall(start)
	shedAt := wallStart.Add(l.cfg.ShedAfter)
	why := endNone
	if l.storeWaits.Load() {
		// A store that waits on the deadline (Redis) gets the store-time
		// context.
		sctx := newStoreTime(ctx, l.lag, wallStart, l.cfg.StoreTimeout, shedAt, l.dispatching)
		err = fn(sctx)
		took = l.clock.Now().Sub(start)
		why = sctx.stop()
	} else {
		// The deadline's timer starts only if the store waits on it
		// (deadline.go); if it does, the next calls take the store-time
		// context.
		sctx := newStoreContext(ctx, wallStart.Add(l.cfg.StoreTimeout)).storeTime(l.lag, wallStart, shedAt, l.dispatching)
		err = fn(sctx)
		end := l.clock.Now()
		took = end.Sub(start)
		sctx.stop(l.wall(end))
		why = sctx.why()
		if sctx.armed.Load() {
			l.storeWaits.Store(true)
		}
	}
	err = classifyEnd(err, why)
	l.rec.RecordStoreCall(ctx, ports.StoreCall{Op: op, Start: start, Latency: took, Keys: keys, Err: err})
	return start, took, err
}

// classifyEnd is classify for a call whose store-time context ended for
// why: past the shed bound, the failure is the instance's overload, not
// the store's.
func classifyEnd(err error, why int32) error {
	if err != nil && why == endShed {
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	}
	return classify(err)
}

// storeCall is one call of the primary store; a reservation keeps its
// lease in ev.
func (l *Limiter) storeCall(ctx context.Context, op ports.StoreOp, ev *evaluation, limits []domain.Limit) (domain.Result, error) {
	switch op {
	case ports.OpPeek:
		return l.store.Peek(ctx, ev.now, limits)
	case ports.OpReserve:
		res, lease, err := l.reserver.Reserve(ctx, ev.now, limits, ev.ttl)
		ev.lease = lease
		return res, err
	}
	return l.store.Evaluate(ctx, ev.now, limits)
}

// wall returns t, an instant the Limiter's clock just read, when that
// clock is the system clock, else the system clock's now: what a context's
// deadline is measured on.
func (l *Limiter) wall(t time.Time) time.Time {
	if l.systemClock {
		return t
	}
	return time.Now()
}

// classify gives a store error its code: a deadline that passed is a
// store timeout whichever context carried it, and an error with no code of
// its own is the store being unavailable. A cancellation stays one.
func classify(err error) error {
	switch {
	case err == nil, domain.CodeOf(err) != "", errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", domain.ErrStoreTimeout, err)
	}
	return fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, err)
}

// fromResult maps a store result to the decision.
func (l *Limiter) fromResult(ev *evaluation, res *domain.Result, src domain.Source) {
	d := &ev.d
	d.State, d.Cause, d.Source = domain.Allowed, domain.CauseNone, src
	if !res.Allowed {
		d.State, d.Cause = domain.Throttled, domain.CauseLimitExceeded
	}
	lim := &ev.limits[res.Limiting]
	d.Limit = lim.Window.Limit
	d.Remaining, d.RetryAfter, d.ResetAfter = res.Remaining, res.RetryAfter, res.ResetAfter
	d.LimitingDimension = ev.dims[res.Limiting]
	d.LimitingWindow, d.LimitingPeriod = lim.Window.Name, lim.Window.Period
	d.Layer = d.LimitingDimension.Layer()
	d.Windows = domain.WindowChecks{}
	for i, st := range res.Statuses() {
		dim := ev.dims[i]
		d.Windows.Add(domain.WindowCheck{
			Dimension: dim, Window: ev.limits[i].Window, Allowed: st.Allowed,
			Remaining: st.Remaining, RetryAfter: st.RetryAfter, ResetAfter: st.ResetAfter,
		})
		switch dim.Layer() {
		case domain.LayerTenant:
			d.TenantRemaining = minRemaining(d.TenantRemaining, st.Remaining)
		case domain.LayerUser:
			d.UserRemaining = minRemaining(d.UserRemaining, st.Remaining)
		}
	}
	d.SystemState = l.SystemState()
}

// minRemaining is min for per-layer remaining, where -1 means unchecked.
func minRemaining(cur, v int64) int64 {
	if cur < 0 || v < cur {
		return v
	}
	return cur
}

// degraded applies the degraded matrix (docs/adr/005): the store could not
// answer (cause), or the breaker is open. storeErr is the failure, if any,
// kept for the Recorder.
func (l *Limiter) degraded(ctx context.Context, ev *evaluation, cause domain.Cause, storeErr error) {
	ev.err = storeErr
	switch ev.action {
	case domain.ActionBypass:
		l.bypass(ctx, ev, cause)
	case domain.ActionLocal:
		res, err := l.localFallback(ctx, ev)
		if err != nil {
			ev.err = errors.Join(storeErr, err)
			ev.deny(cause, 0)
			break
		}
		l.fromResult(ev, &res, domain.SourceFallback)
		ev.d.Cause = domain.CauseLocalLimit
	default:
		ev.deny(cause, 0)
	}
	ev.d.Degraded = true
	ev.d.SystemState = l.SystemState()
}

// localFallback decides ev on the fallback store: a reservation reserves
// there (its Reservation settles there), anything else evaluates.
func (l *Limiter) localFallback(ctx context.Context, ev *evaluation) (domain.Result, error) {
	if ev.mode != modeReserve {
		return l.fallback.Evaluate(ctx, ev.now, ev.limits[:ev.n])
	}
	if l.fallbackReserver == nil {
		return domain.Result{}, errNoFallbackReserver
	}
	res, lease, err := l.fallbackReserver.Reserve(ctx, ev.now, ev.limits[:ev.n], ev.ttl)
	if err == nil && res.Allowed {
		ev.held = l.newReservation(ev, l.fallbackReserver, false, []heldPart{ev.part(lease, "", nil)})
	}
	return res, err
}

// bypass lets the request through under the per-instance cap, counted on
// the fallback store per (profile, client): it bounds what one client can
// replay while the shared store is out.
func (l *Limiter) bypass(ctx context.Context, ev *evaluation, cause domain.Cause) {
	capLimit := [1]domain.Limit{{
		Key:    domain.KeyParts{Tag: ev.capID, Dimension: ev.capDim, ID: ev.capID, RouteKey: ev.routeKey, Window: capWindowName}.Key(),
		Window: ev.capWindow,
		Cost:   1,
	}}
	res, err := l.fallback.Evaluate(ctx, ev.now, capLimit[:])
	if err != nil {
		// Without its cap a bypass is unbounded: fail closed.
		ev.err = errors.Join(ev.err, err)
		ev.deny(cause, 0)
		return
	}
	d := &ev.d
	st := res.Status(0)
	d.Source = domain.SourceFallback
	d.Limit, d.Remaining, d.ResetAfter = ev.capWindow.Limit, res.Remaining, res.ResetAfter
	d.LimitingDimension, d.LimitingWindow, d.LimitingPeriod = ev.capDim, capWindowName, ev.capWindow.Period
	d.Layer = domain.LayerNone
	d.Windows = domain.WindowChecks{}
	d.Windows.Add(domain.WindowCheck{Dimension: ev.capDim, Window: ev.capWindow, Allowed: st.Allowed,
		Remaining: st.Remaining, RetryAfter: st.RetryAfter, ResetAfter: st.ResetAfter})
	if !res.Allowed {
		ev.deny(domain.CauseLocalCapExceeded, res.RetryAfter)
		return
	}
	d.State, d.Cause = domain.BypassDegraded, cause
}

// deny makes the decision DeniedDegraded, retrying after retry or the
// fail-closed minimum, whichever is longer.
func (ev *evaluation) deny(cause domain.Cause, retry time.Duration) {
	ev.d.State, ev.d.Cause, ev.d.RetryAfter = domain.DeniedDegraded, cause, max(retry, domain.DeniedRetryAfter)
}

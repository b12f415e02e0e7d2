package drills

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// The drills' timings. The probe interval is shortened through the
// configuration, as an operator would, so that a drill sees many probes in
// a few seconds; the store deadline is production's.
const (
	probeInterval = 250 * time.Millisecond
	probeTimeout  = 200 * time.Millisecond
	storeTimeout  = app.DefaultStoreTimeout
	// latencyMargin is what a decision may take beyond the store deadline
	// before the drill calls it a hang. It is ten times the deadline: a
	// decision does one store call at most, then at most one call of the
	// in-process fallback and the recorder, so only a request that waited
	// on something else (a lock held across a store call, a reconnection
	// loop, a second call) can exceed it, while the scheduling stalls of a
	// loaded two-core machine under the race detector (tens of
	// milliseconds) stay well inside it.
	latencyMargin = 10 * storeTimeout
	// settle bounds every wait for a state the drill expects.
	settle = 20 * time.Second
	// patientTimeout is the store deadline of the drills about counts
	// rather than time (restarts, eviction, replicas, rotation,
	// credentials): on two loaded cores a lone call may miss 50 ms, and a
	// decision degraded by that would be noise in a count.
	patientTimeout = 2 * time.Second
)

// drillSecret is the HMAC secret of the drills (32 bytes, hex).
const drillSecret = "9c1f0e2d3b4a59687766554433221100ffeeddccbbaa99887766554433221100"

// The drills' routes: one profile per family, plus a costly one with a
// long window whose counts the drills check exactly.
const (
	routeRead   = "GET /api/v1/items/{id}"
	routeLogin  = "POST /api/v1/login"
	routeExport = "POST /api/v1/exports"
	routeQuota  = "POST /api/v1/reports"
	routeLedger = "POST /api/v1/ledger"
	routeBursts = "POST /api/v1/bursts"
)

// Limits the drills assert on.
const (
	readBurst  = 5             // the read profile's smallest burst
	readCap    = 2 * readBurst // the degraded bypass cap per client per minute
	quotaLimit = 20            // reports per user per ten minutes
	quotaRoute = "reports"
	// ledgerLimit is the ledger's window: large and long enough that the
	// traffic never reaches it during a drill, so that every request that
	// reached Redis is counted there.
	ledgerLimit = 50000
)

// drillConfig is a service with one profile per route family. Its
// decisions all go to the store: these drills count, per decision, the
// units Redis holds and what the degraded matrix decides during a fault,
// which allotments change by design (they hold units ahead, and spend
// them through an outage); allotments have drills of their own
// (allot_test.go).
func drillConfig() app.Config {
	return app.Config{
		Allotments:      app.AllotmentsOff,
		HMACSecret:      drillSecret,
		InstanceID:      "drill-1",
		StoreTimeout:    storeTimeout,
		ProbeInterval:   probeInterval,
		ProbeTimeout:    probeTimeout,
		ClearingProbes:  domain.DefaultClearingProbes,
		BreakerFailures: app.DefaultBreakerFailures,
		Profiles: []app.ProfileConfig{
			{Name: "items", Family: domain.FamilyRead, Routes: []string{routeRead}, Windows: app.WindowsConfig{
				IP:     []app.WindowConfig{{Name: "burst", Limit: 100, Period: time.Second}, {Name: "sustained", Limit: 3000, Period: time.Minute}},
				User:   []app.WindowConfig{{Name: "burst", Limit: readBurst, Period: time.Second}, {Name: "sustained", Limit: 900, Period: time.Minute, Algorithm: domain.GCRA}},
				Tenant: []app.WindowConfig{{Name: "sustained", Limit: 20000, Period: time.Minute}},
			}},
			{Name: "login", Family: domain.FamilyAuth, Routes: []string{routeLogin}, Windows: app.WindowsConfig{
				IP: []app.WindowConfig{{Name: "burst", Limit: 20, Period: time.Second}, {Name: "sustained", Limit: 600, Period: time.Minute}},
			}},
			{Name: "exports", Family: domain.FamilyCostly, Routes: []string{routeExport}, Windows: app.WindowsConfig{
				User:         []app.WindowConfig{{Name: "burst", Limit: 10, Period: time.Second}},
				Tenant:       []app.WindowConfig{{Name: "sustained", Limit: 3000, Period: time.Minute}},
				TenantGlobal: []app.WindowConfig{{Name: "sustained", Limit: 10000, Period: time.Minute}},
			}},
			{Name: quotaRoute, Family: domain.FamilyCostly, Routes: []string{routeQuota}, Windows: app.WindowsConfig{
				User: []app.WindowConfig{{Name: "sustained", Limit: quotaLimit, Period: 10 * time.Minute}},
			}},
			{Name: "ledger", Family: domain.FamilyCostly, Routes: []string{routeLedger}, Windows: app.WindowsConfig{
				User: []app.WindowConfig{{Name: "sustained", Limit: ledgerLimit, Period: time.Hour}},
			}},
			// GCRA windows only: its keys are strings, never sliding logs.
			{Name: "bursts", Family: domain.FamilyCostly, Routes: []string{routeBursts}, Windows: app.WindowsConfig{
				User: []app.WindowConfig{{Name: "burst", Limit: 100, Period: time.Minute, Algorithm: domain.GCRA}},
			}},
		},
	}
}

// rig is one service instance of a drill: a Limiter on a Redis store
// (through a fault proxy when asked) with the local store as fallback.
type rig struct {
	srv      *redistest.Server
	proxy    *faultproxy.Proxy // nil without
	store    *redis.Store
	fallback *local.Store
	lim      *app.Limiter
	probes   *probeLog
	journal  *journal
}

// rigOptions shape a rig.
type rigOptions struct {
	// server configures the dedicated redis-server.
	server redistest.Config
	// srv, when set, is an existing server to share (replicas of a fleet).
	srv *redistest.Server
	// cluster, when set, is the Redis Cluster the store uses instead of a
	// standalone server.
	cluster *redistest.DedicatedCluster
	// proxy puts a fault proxy between the store and the server.
	proxy bool
	// mutate adjusts drillConfig.
	mutate func(*app.Config)
	// instance names the instance (InstanceID).
	instance string
	// memoryCheck wires the store's maxmemory check into the Limiter's
	// boot (Limiter.Warnings).
	memoryCheck bool
	// patient sets the store deadline to patientTimeout.
	patient bool
	// recorder, when set, records everything too, beside the journal.
	recorder ports.Recorder
}

// newRig starts what opts asks for; everything stops on t.Cleanup, the
// Limiter first.
func newRig(t *testing.T, opts rigOptions) *rig {
	t.Helper()
	r := &rig{srv: opts.srv}
	rc := redis.Config{Mode: redis.ModeStandalone, Password: opts.server.Password}
	switch {
	case opts.cluster != nil:
		rc.Addrs, rc.Mode = opts.cluster.Addrs(), redis.ModeCluster
	default:
		if r.srv == nil {
			r.srv = redistest.NewServerWith(t, opts.server)
		}
		rc.Addrs = []string{r.srv.Addr()}
		if opts.proxy {
			r.proxy = faultproxy.New(t, r.srv.Addr())
			rc.Addrs = []string{r.proxy.Addr()}
		}
	}
	store, err := redis.New(rc)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	r.store = store
	r.fallback = newFallback(t)
	cfg := drillConfig()
	if opts.instance != "" {
		cfg.InstanceID = opts.instance
	}
	if opts.patient {
		cfg.StoreTimeout = patientTimeout
	}
	if opts.mutate != nil {
		opts.mutate(&cfg)
	}
	r.probes = &probeLog{p: store.Prober()}
	r.journal = &journal{probes: r.probes}
	deps := app.Deps{Store: store, Fallback: r.fallback, Prober: r.probes, Recorder: r.journal}
	if opts.recorder != nil {
		deps.Recorder = tee{r.journal, opts.recorder}
	}
	if opts.memoryCheck {
		deps.MemoryCheck = func(ctx context.Context, budget int64) ([]string, error) {
			rep, err := store.CheckMaxMemory(ctx, budget)
			return rep.Warnings, err
		}
	}
	r.lim = newLimiterDeps(t, cfg, deps)
	return r
}

func newFallback(t *testing.T) *local.Store {
	t.Helper()
	s, err := local.New(local.Config{})
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newLimiterDeps(t *testing.T, cfg app.Config, deps app.Deps) *app.Limiter {
	t.Helper()
	l, err := app.New(cfg, deps)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Limiter.Close: %v", err)
		}
	})
	return l
}

// tee is a Recorder that hands every record to each of its recorders.
type tee []ports.Recorder

func (t tee) RecordDecision(ctx context.Context, rec ports.DecisionRecord) error {
	var errs []error
	for _, r := range t {
		errs = append(errs, r.RecordDecision(ctx, rec))
	}
	return errors.Join(errs...)
}

func (t tee) RecordTransition(ctx context.Context, c domain.StateChange, at time.Time) error {
	var errs []error
	for _, r := range t {
		errs = append(errs, r.RecordTransition(ctx, c, at))
	}
	return errors.Join(errs...)
}

func (t tee) RecordStoreCall(ctx context.Context, call ports.StoreCall) {
	for _, r := range t {
		r.RecordStoreCall(ctx, call)
	}
}

func (t tee) RecordReset(ctx context.Context, rec ports.ResetRecord) error {
	var errs []error
	for _, r := range t {
		errs = append(errs, r.RecordReset(ctx, rec))
	}
	return errors.Join(errs...)
}

// probeLog is a Prober that keeps the outcome of every probe, in order:
// the drills check the health machine against what the probes saw.
type probeLog struct {
	p       ports.Prober
	mu      sync.Mutex
	results []probeResult
}

// probeResult is one probe: when it ended and its error (a probe gets no
// more than the store deadline, so a slow Redis fails it too).
type probeResult struct {
	end time.Time
	err error
	// confirm marks a confirming probe: one the breaker ran out of
	// schedule on missed deadlines (docs/adr/008).
	confirm bool
}

func (p probeResult) String() string {
	kind := "scheduled"
	if p.confirm {
		kind = "confirming"
	}
	if p.err == nil {
		return kind + " ok"
	}
	return kind + " " + p.err.Error()
}

// failed reports whether the health machine saw this probe as failed.
func (p probeResult) failed() bool { return p.err != nil }

// provesNothing reports whether the Limiter may have set this probe aside
// rather than fed it to the health machine: a probe that ran out of time
// proves nothing when the service stalled for half a deadline during its
// round, when the node answered a decision meanwhile, or when the round
// was starved (app.Limiter.ProbeOnce, docs/adr/008). The drill cannot see
// which of those happened; a probe refused outright is always fed.
func (p probeResult) provesNothing() bool {
	return errors.Is(p.err, context.DeadlineExceeded) || errors.Is(p.err, domain.ErrStoreTimeout) || errors.Is(p.err, app.ErrOverloaded)
}

func (l *probeLog) Probe(ctx context.Context) error {
	err := l.p.Probe(ctx)
	l.mu.Lock()
	l.results = append(l.results, probeResult{end: time.Now(), err: err, confirm: app.ConfirmingProbe(ctx)})
	l.mu.Unlock()
	return err
}

// count returns how many probes have completed.
func (l *probeLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.results)
}

func (l *probeLog) all() []probeResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]probeResult(nil), l.results...)
}

// journal is the drills' Recorder: it keeps every transition, tagged
// with the number of probes completed when it was recorded, and every
// store call; decisions are tallied by the traffic that made them.
// With a scan set, it also checks every record for raw identifiers.
type journal struct {
	probes *probeLog
	scan   *rawScan
	// decisions, when set, is handed every decision (set before traffic).
	decisions func(domain.Decision)

	mu          sync.Mutex
	transitions []transition
	calls       []ports.StoreCall
	// onTransition, when set, is called with every transition as it is
	// recorded (the Limiter's state has already changed).
	onTransition func(transition)
}

// transition is one recorded health transition.
type transition struct {
	change domain.StateChange
	at     time.Time
	// probes is how many probes had completed: a transition the health
	// loop made is tagged with the probe that caused it.
	probes int
}

func (tr transition) String() string {
	return fmt.Sprintf("%s→%s at probe %d", tr.change.From, tr.change.To, tr.probes)
}

func (j *journal) RecordDecision(_ context.Context, rec ports.DecisionRecord) error {
	if j.decisions != nil {
		j.decisions(rec.Decision)
	}
	if j.scan != nil {
		j.scan.decision(rec)
	}
	return nil
}

func (j *journal) RecordTransition(_ context.Context, c domain.StateChange, at time.Time) error {
	n := j.probes.count()
	tr := transition{change: c, at: at, probes: n}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.transitions = append(j.transitions, tr)
	if j.onTransition != nil {
		j.onTransition(tr)
	}
	return nil
}

func (j *journal) RecordStoreCall(_ context.Context, call ports.StoreCall) {
	j.mu.Lock()
	j.calls = append(j.calls, call)
	j.mu.Unlock()
}

func (j *journal) RecordReset(_ context.Context, rec ports.ResetRecord) error {
	if j.scan != nil {
		j.scan.reset(rec)
	}
	return nil
}

// setOnTransition sets the transition hook.
func (j *journal) setOnTransition(f func(transition)) {
	j.mu.Lock()
	j.onTransition = f
	j.mu.Unlock()
}

func (j *journal) allTransitions() []transition {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]transition(nil), j.transitions...)
}

func (j *journal) storeCalls() []ports.StoreCall {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]ports.StoreCall(nil), j.calls...)
}

// firstTransition returns the first transition to state to recorded at or
// after index from, and its index; ok is false when there is none yet.
func (j *journal) firstTransition(from int, to domain.SystemState) (tr transition, i int, ok bool) {
	all := j.allTransitions()
	for i := from; i < len(all); i++ {
		if all[i].change.To == to {
			return all[i], i, true
		}
	}
	return transition{}, -1, false
}

// waitTransition waits until a transition to state to is recorded at or
// after index from.
func (j *journal) waitTransition(t *testing.T, from int, to domain.SystemState) (transition, int) {
	t.Helper()
	var tr transition
	var i int
	waitFor(t, settle, fmt.Sprintf("a transition to %s", to), func() bool {
		var ok bool
		tr, i, ok = j.firstTransition(from, to)
		return ok
	})
	return tr, i
}

// waitFor polls cond every few milliseconds until it holds, or fails the
// test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkRecovery replays the probes that followed the transition at index
// from (HEALTHY→DEGRADED) through the health machine and checks that the
// Limiter made exactly the transitions they call for, each at its probe,
// until it is HEALTHY again: RECOVERING at the first good probe, HEALTHY
// after ClearingProbes good probes in a row, DEGRADED again at any failed
// one (but one the Limiter set aside, provesNothing). It returns the index
// of the RECOVERING→HEALTHY transition.
func checkRecovery(t *testing.T, j *journal, from int, clearing int) int {
	t.Helper()
	all := j.allTransitions()
	start := all[from]
	if start.change != (domain.StateChange{From: domain.Healthy, To: domain.Degraded}) {
		t.Fatalf("recovery replay starts at %s, want HEALTHY→DEGRADED", start)
	}
	probes := j.probes.all()
	m, _, _, _ := domain.NewHealthMachine(clearing).Apply(domain.ProbeFailed)
	next := from + 1
	for p := start.probes + 1; p <= len(probes); p++ {
		if probes[p-1].confirm {
			continue // a witness of store faults, not a health event
		}
		ev := domain.ProbeOK
		if probes[p-1].failed() {
			ev = domain.ProbeFailed
		}
		after, change, changed, _ := m.Apply(ev)
		if !changed {
			m = after
			continue
		}
		if next >= len(all) || all[next].change != change || all[next].probes != p {
			if probes[p-1].provesNothing() {
				continue // set aside by the Limiter, as replayAll says
			}
		}
		m = after
		if next >= len(all) {
			t.Fatalf("probe %d (%s) calls for %s→%s, which was not recorded; transitions: %v", p, ev, change.From, change.To, all)
		}
		got := all[next]
		if got.change != change || got.probes != p {
			t.Fatalf("probe %d (%s) calls for %s→%s, recorded: %s; transitions: %v", p, ev, change.From, change.To, got, all)
		}
		if change.To == domain.Healthy {
			return next
		}
		next++
	}
	t.Fatalf("not HEALTHY after %d probes; transitions: %v", len(probes), all[from:])
	return -1
}

// openedInBand reports whether the breaker opened, at transition down,
// on the in-band failures that followed a fault injected after probe
// atFault, rather than on a scheduled probe: with no probe between, or
// at a confirming probe the misses triggered (docs/adr/008). Between the
// fault and that, only probes that moved no machine may come: confirming
// probes that proved nothing (the service stalled during their round:
// the next miss asks again) and scheduled probes the Limiter set aside
// (provesNothing). A scheduled probe that failed and was fed would have
// opened it itself.
func openedInBand(probes []probeResult, atFault int, down transition) bool {
	if down.probes == atFault {
		return true
	}
	if down.probes < atFault || !probes[down.probes-1].confirm {
		return false
	}
	for _, p := range probes[atFault : down.probes-1] {
		if !p.confirm && !p.provesNothing() {
			return false
		}
	}
	return true
}

// replayAll replays every probe through the health machine, from HEALTHY
// at boot, together with the in-band trips (HEALTHY→DEGRADED between two
// probes, after consecutive store failures), and checks that the Limiter
// recorded exactly the transitions they call for, in order, each tagged
// with its probe; a probe that ran out of time and called for a
// transition the Limiter did not make was set aside (provesNothing). It
// returns how many transitions were in-band trips.
func replayAll(t *testing.T, j *journal, clearing int) (inBand int) {
	t.Helper()
	all := j.allTransitions()
	probes := j.probes.all()
	m := domain.NewHealthMachine(clearing)
	next := 0
	tripsAfter := func(p int) {
		for next < len(all) && all[next].probes == p && m.State() == domain.Healthy &&
			all[next].change == (domain.StateChange{From: domain.Healthy, To: domain.Degraded}) {
			m, _, _, _ = m.Apply(domain.ProbeFailed)
			next++
			inBand++
		}
	}
	tripsAfter(0)
	for p := 1; p <= len(probes); p++ {
		if probes[p-1].confirm {
			// A confirming probe is a witness of store faults, not a
			// health event: only an in-band trip may follow it.
			tripsAfter(p)
			continue
		}
		ev := domain.ProbeOK
		if probes[p-1].failed() {
			ev = domain.ProbeFailed
		}
		after, change, changed, _ := m.Apply(ev)
		if changed {
			if next >= len(all) || all[next].change != change || all[next].probes != p {
				if probes[p-1].provesNothing() {
					// Set aside by the Limiter, as it may: it moved no
					// machine.
					tripsAfter(p)
					continue
				}
				t.Fatalf("probe %d (%s) calls for %s→%s; transitions: %v", p, ev, change.From, change.To, all)
			}
			next++
		}
		m = after
		tripsAfter(p)
	}
	if next != len(all) {
		t.Fatalf("transitions %v are not explained by the probes and in-band trips (explained %d of %d)", all[next:], next, len(all))
	}
	return inBand
}

// figure logs one measured figure for docs/runbook.md; run the drills with
// -v and grep FIGURE to collect them.
func figure(t *testing.T, name string, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", name, fmt.Sprintf(format, args...))
}

// ms formats a duration in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

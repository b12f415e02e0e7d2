package app_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// switchProber is a Prober whose verdict the test sets.
type switchProber struct {
	mu      sync.Mutex
	err     error
	probes  int
	confirm int
}

func (p *switchProber) set(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

func (p *switchProber) Probe(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes++
	if app.ConfirmingProbe(ctx) {
		p.confirm++
	}
	return p.err
}

// TestMissedDeadlinesOpenOnlyWhenTheStoreConfirms is the regression test
// of issue 16's spike: deadlines missed while the store answers (a
// saturated service) opened the breaker after five in a row. Now they
// trigger a confirming probe, and a probe that answers keeps the breaker
// closed; when the probe fails too, the breaker opens.
func TestMissedDeadlinesOpenOnlyWhenTheStoreConfirms(t *testing.T) {
	prober := &switchProber{}
	cfg := testConfig()
	cfg.StoreTimeout = time.Millisecond
	r := newRigProber(t, cfg, newFaulty(conformance.NewReferenceStore()), prober, conformance.NewReferenceStore())
	req := app.Request{Route: routeExport, ClientIP: rawIP}
	r.store.mode.Store(hang)
	miss := func() {
		d := r.eval(t, req)
		require.Equal(t, domain.CauseStoreTimeout, d.Cause)
		r.clock.Advance(cfg.StoreTimeout / 2) // misses that outlast a deadline
	}
	for range 3 * app.DefaultBreakerFailures {
		miss()
	}
	assert.False(t, r.l.BreakerOpen(), "the store answered the confirming probes: the misses were ours")
	assert.Equal(t, 3, prober.confirm, "one confirming probe per five misses in a row")
	assert.Empty(t, r.rec.changes())

	prober.set(fmt.Errorf("%w: injected", domain.ErrStoreTimeout))
	for range app.DefaultBreakerFailures {
		miss()
	}
	assert.True(t, r.l.BreakerOpen(), "the store confirmed the misses, which outlasted a deadline")
	assert.Equal(t, []domain.StateChange{{From: domain.Healthy, To: domain.Degraded}}, r.rec.changes())
	assert.Equal(t, 4, prober.confirm, "the witness is asked once per run")
	assert.Equal(t, 4, prober.probes, "a confirming probe feeds no machine: the loop has not probed")

	// Recovered, a new run of misses needs its own witness: the last
	// run's is forgotten.
	prober.set(nil)
	r.store.mode.Store(healthy)
	for range 3 {
		r.tick(t)
	}
	require.False(t, r.l.BreakerOpen())
	r.store.mode.Store(hang)
	for range app.DefaultBreakerFailures {
		miss()
	}
	assert.False(t, r.l.BreakerOpen(), "the store answers the new run's confirming probe")
	assert.Equal(t, 5, prober.confirm)
}

// TestMissesThatDoNotOutlastADeadline: a burst's misses come together.
// Even when the confirming probe fails too (the saturated service misses
// that deadline as well), misses that all end within one store deadline
// open nothing.
func TestMissesThatDoNotOutlastADeadline(t *testing.T) {
	prober := &switchProber{}
	prober.set(fmt.Errorf("%w: injected", domain.ErrStoreTimeout))
	cfg := testConfig()
	cfg.StoreTimeout = time.Millisecond
	r := newRigProber(t, cfg, newFaulty(conformance.NewReferenceStore()), prober, conformance.NewReferenceStore())
	r.store.mode.Store(hang)
	for range 10 * app.DefaultBreakerFailures {
		r.eval(t, app.Request{Route: routeExport, ClientIP: rawIP})
	}
	assert.False(t, r.l.BreakerOpen())
	assert.Equal(t, 1, prober.confirm)
	r.store.mode.Store(healthy)
	r.eval(t, app.Request{Route: routeLogin, ClientIP: rawIP})
	r.store.mode.Store(hang)
	for range app.DefaultBreakerFailures {
		r.eval(t, app.Request{Route: routeExport, ClientIP: rawIP})
		r.clock.Advance(cfg.StoreTimeout)
	}
	assert.True(t, r.l.BreakerOpen(), "a run that outlasts a deadline, confirmed, opens it")
}

// TestRefusalsOpenAtOnce: a refused connection is no CPU of ours: five in
// a row open the breaker without a probe.
func TestRefusalsOpenAtOnce(t *testing.T) {
	prober := &switchProber{}
	r := newRigProber(t, testConfig(), newFaulty(conformance.NewReferenceStore()), prober, conformance.NewReferenceStore())
	r.store.mode.Store(unavailable)
	for range app.DefaultBreakerFailures {
		r.eval(t, app.Request{Route: routeExport, ClientIP: rawIP})
	}
	assert.True(t, r.l.BreakerOpen())
	assert.Zero(t, prober.probes, "no probe was needed")
}

// failingStore fails every Evaluate with err.
type failingStore struct {
	ports.Store
	err error
}

func (f failingStore) Evaluate(context.Context, time.Time, []domain.Limit) (domain.Result, error) {
	return domain.Result{}, f.err
}

// TestRequestFaultsNeverOpenTheBreaker is issue 22 item 3's regression
// test at the Limiter: a key holding a foreign value fails every call on
// it the same way; five of them opened the breaker for everyone. A request
// fault is that decision's own, degraded with cause store_value and the
// typed error for the audit; a refusal that ran nothing (a slot in
// migration) degrades that decision and counts for nothing either.
func TestRequestFaultsNeverOpenTheBreaker(t *testing.T) {
	for name, tc := range map[string]struct {
		err   error
		cause domain.Cause
	}{
		"foreign value": {&domain.StoreValueError{Index: 1, Key: "rl:{x}:k", Reason: "holds a list"}, domain.CauseStoreValue},
		"slot in migration": {fmt.Errorf("%w: %w: TRYAGAIN until the deadline", domain.ErrStoreTimeout, ports.ErrNotRun),
			domain.CauseStoreTimeout},
		"redirections": {fmt.Errorf("%w: %w: MOVED forever", domain.ErrStoreUnavailable, ports.ErrNotRun), domain.CauseStoreUnavailable},
	} {
		t.Run(name, func(t *testing.T) {
			prober := &switchProber{}
			prober.set(domain.ErrStoreUnavailable) // a probe would open it
			cfg := testConfig()
			rec := &recorder{}
			l, err := app.New(cfg, app.Deps{Store: failingStore{conformance.NewReferenceStore(), tc.err},
				Fallback: conformance.NewReferenceStore(), Prober: prober, Recorder: rec})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			for _, route := range []string{routeLogin, routeExport} {
				for range 4 * app.DefaultBreakerFailures {
					d, err := l.Evaluate(context.Background(), fullRequest(route))
					require.NoError(t, err)
					assert.Equal(t, tc.cause, d.Cause)
					assert.True(t, d.Degraded)
					assert.ErrorIs(t, rec.last().Err, tc.err, "the typed error reaches the record")
				}
			}
			assert.False(t, l.BreakerOpen())
			assert.Zero(t, prober.probes, "not even a confirming probe")
			assert.Empty(t, rec.changes())
		})
	}
}

// nodeProber is a ports.NodeProber of two nodes, "a" and "b": a key whose
// hash tag the test assigned to "a" lives on "a", every other on "b".
type nodeProber struct {
	mu      sync.Mutex
	onA     map[string]bool
	down    map[string]bool
	serving []string
}

func newNodeProber() *nodeProber {
	return &nodeProber{onA: map[string]bool{}, down: map[string]bool{}, serving: []string{"a", "b"}}
}

func (p *nodeProber) NodeOf(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.onA[hashTag(key)] {
		return "a"
	}
	return "b"
}

func (p *nodeProber) ProbeNodes(context.Context) ([]ports.NodeProbe, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ports.NodeProbe
	for _, n := range p.serving {
		var err error
		if p.down[n] {
			err = fmt.Errorf("%w: node %s down", domain.ErrStoreUnavailable, n)
		}
		out = append(out, ports.NodeProbe{Node: n, Err: err})
	}
	return out, nil
}

func (p *nodeProber) Probe(ctx context.Context) error {
	probes, _ := p.ProbeNodes(ctx)
	for _, n := range probes {
		if n.Err != nil {
			return n.Err
		}
	}
	return nil
}

func (p *nodeProber) set(f func(p *nodeProber)) {
	p.mu.Lock()
	f(p)
	p.mu.Unlock()
}

// nodeStore fails the calls on the keys of the nodes its prober says are
// down.
type nodeStore struct {
	*faultyStore
	p *nodeProber
}

func (s nodeStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	s.p.mu.Lock()
	down := s.p.down[map[bool]string{true: "a", false: "b"}[s.p.onA[hashTag(limits[0].Key)]]]
	s.p.mu.Unlock()
	if down {
		return domain.Result{}, fmt.Errorf("%w: connection refused", domain.ErrStoreUnavailable)
	}
	return s.faultyStore.Evaluate(ctx, now, limits)
}

// TestOneDeadNodeDegradesOnlyItsKeys is issue 16 item 4 at the Limiter:
// with a store of two nodes, node a's failure opens a's breaker only:
// decisions on b's keys are still the store's, exact; NodeStates and the
// node transitions say which node is degraded; a recovers through the
// clearing probes at the recovery interval; a node that leaves the store
// (scale-in) degrades nothing, and the instance's state returns to
// HEALTHY through RECOVERING.
func TestOneDeadNodeDegradesOnlyItsKeys(t *testing.T) {
	np := newNodeProber()
	primary := newFaulty(conformance.NewReferenceStore())
	r := newRigProber(t, testConfig(), primary, np, conformance.NewReferenceStore())
	_ = r.l.Close()
	rec := &nodeRecorder{}
	l, err := app.NewWithTickHook(testConfig(), app.Deps{Store: nodeStore{primary, np}, Fallback: conformance.NewReferenceStore(),
		Clock: r.clock, Prober: np, Recorder: rec}, func() { r.ticks <- struct{}{} })
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	r.l, r.rec = l, &rec.recorder

	onA := app.Request{Route: routeExport, ClientIP: rawIP, User: "u-a", Tenant: "tenant-on-a"}
	onB := app.Request{Route: routeExport, ClientIP: netip.MustParseAddr("198.51.100.9"), User: "u-b", Tenant: "tenant-on-b"}
	r.eval(t, onA)
	np.set(func(p *nodeProber) { p.onA[hashTag(primary.seen()[0])] = true })
	require.Equal(t, domain.Healthy, r.tick(t))
	assert.Equal(t, map[string]domain.SystemState{"a": domain.Healthy, "b": domain.Healthy}, l.NodeStates())

	np.set(func(p *nodeProber) { p.down["a"] = true })
	for range app.DefaultBreakerFailures {
		r.eval(t, onA)
	}
	assert.Equal(t, map[string]domain.SystemState{"a": domain.Degraded, "b": domain.Healthy}, l.NodeStates(),
		"refusals on a open a's breaker only")
	assert.Equal(t, domain.Degraded, l.SystemState(), "the instance's state is its worst node's")
	assert.Equal(t, domain.CauseBreakerOpen, r.eval(t, onA).Cause)
	b := r.eval(t, onB)
	assert.Equal(t, domain.Allowed, b.State)
	assert.Equal(t, domain.SourcePrimary, b.Source, "b's keys are still decided by the store")
	assert.Equal(t, int64(2), b.Remaining, "exactly: the first of three")
	assert.Equal(t, []nodeChange{{"a", domain.StateChange{From: domain.Healthy, To: domain.Degraded}}}, rec.nodeChanges())

	np.set(func(p *nodeProber) { p.down["a"] = false })
	assert.Equal(t, time.Second, l.Config().RecoveryProbeInterval, "the default")
	for i, want := range []domain.SystemState{domain.Recovering, domain.Recovering, domain.Healthy} {
		require.Equal(t, want, r.tick(t), "recovery probe %d", i+1)
	}
	assert.Equal(t, domain.Allowed, r.eval(t, onA).State)

	// Scale-in while a is down: once a no longer serves, nothing of it
	// degrades the instance.
	np.set(func(p *nodeProber) { p.down["a"] = true })
	require.Equal(t, domain.Degraded, r.tick(t))
	np.set(func(p *nodeProber) { p.serving = []string{"b"} })
	require.Equal(t, domain.Healthy, r.tick(t), "a node that left degrades nothing")
	assert.Equal(t, map[string]domain.SystemState{"b": domain.Healthy}, l.NodeStates())
	changes := rec.changes()
	for _, c := range changes {
		require.NoError(t, domain.CheckTransition(c.From, c.To))
	}
	assert.Equal(t, []domain.StateChange{{From: domain.Degraded, To: domain.Recovering}, {From: domain.Recovering, To: domain.Healthy}},
		changes[len(changes)-2:], "recorded through RECOVERING")
}

type nodeChange struct {
	node   string
	change domain.StateChange
}

// nodeRecorder is the tests' recorder, also a ports.NodeRecorder.
type nodeRecorder struct {
	recorder
	mu    sync.Mutex
	nodes []nodeChange
}

func (r *nodeRecorder) RecordNodeTransition(_ context.Context, node string, c domain.StateChange, _ time.Time) error {
	r.mu.Lock()
	r.nodes = append(r.nodes, nodeChange{node, c})
	r.mu.Unlock()
	return nil
}

func (r *nodeRecorder) nodeChanges() []nodeChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nodeChange(nil), r.nodes...)
}

// TestRecoveryProbeInterval is issue 16 item 3: outside HEALTHY the loop
// probes every RecoveryProbeInterval (default 1 s), so the three clearing
// probes close the breaker about 3 s after the store is back, while the
// healthy interval stays as configured.
func TestRecoveryProbeInterval(t *testing.T) {
	r := newRig(t, nil)
	require.Equal(t, 10*time.Second, r.l.Config().ProbeInterval)
	r.store.mode.Store(unavailable)
	r.clock.Advance(10 * time.Second)
	<-r.ticks
	require.Equal(t, domain.Degraded, r.l.SystemState())
	r.store.mode.Store(healthy)
	back := r.clock.Now()
	for range 3 {
		r.clock.Advance(time.Second)
		select {
		case <-r.ticks:
		case <-time.After(10 * time.Second):
			t.Fatal("no probe one second later")
		}
	}
	assert.Equal(t, domain.Healthy, r.l.SystemState())
	assert.Equal(t, 3*time.Second, r.clock.Now().Sub(back), "HEALTHY 3 s after the store is back")
	r.clock.Advance(9 * time.Second)
	select {
	case <-r.ticks:
		t.Fatal("HEALTHY again, the loop must wait the configured interval")
	case <-time.After(50 * time.Millisecond):
	}
	r.clock.Advance(time.Second)
	select {
	case <-r.ticks:
	case <-time.After(10 * time.Second):
		t.Fatal("no probe at the configured interval")
	}
}

// bootProber is a store of one node, "a", unreachable until up: no node
// is known while it is down.
type bootProber struct {
	mu sync.Mutex
	up bool
}

func (p *bootProber) NodeOf(string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return ""
	}
	return "a"
}

func (p *bootProber) ProbeNodes(context.Context) ([]ports.NodeProbe, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return nil, fmt.Errorf("%w: no node answers", domain.ErrStoreUnavailable)
	}
	return []ports.NodeProbe{{Node: "a"}}, nil
}

func (p *bootProber) Probe(ctx context.Context) error {
	_, err := p.ProbeNodes(ctx)
	return err
}

// TestStoreDownBeforeAnyNodeIsKnown: a cluster no node of which answers
// (at boot, say) degrades the decisions on no known node, and once the
// store answers, they follow its nodes.
func TestStoreDownBeforeAnyNodeIsKnown(t *testing.T) {
	p := &bootProber{}
	r := newRigProber(t, testConfig(), newFaulty(conformance.NewReferenceStore()), p, conformance.NewReferenceStore())
	req := app.Request{Route: routeLogin, ClientIP: rawIP}
	require.Equal(t, domain.Degraded, r.tick(t))
	assert.Equal(t, map[string]domain.SystemState{"": domain.Degraded}, r.l.NodeStates())
	assert.Equal(t, domain.CauseBreakerOpen, r.eval(t, req).Cause)
	p.mu.Lock()
	p.up = true
	p.mu.Unlock()
	for _, want := range []domain.SystemState{domain.Recovering, domain.Recovering, domain.Healthy} {
		require.Equal(t, want, r.tick(t))
	}
	assert.Equal(t, map[string]domain.SystemState{"a": domain.Healthy}, r.l.NodeStates(), "the unattributed entry left once cleared")
	assert.Equal(t, domain.Allowed, r.eval(t, req).State)
}

// capableStore is a nodeStore that offers its per-node prober and a
// memory check as capabilities of the store (ports.HealthProber,
// ports.MemoryChecker), as the Redis adapter does.
type capableStore struct {
	nodeStore
	budget *int64
}

func (s capableStore) HealthProber() ports.Prober { return s.p }

func (s capableStore) CheckMemory(_ context.Context, b int64) ([]string, error) {
	*s.budget = b
	return []string{"maxmemory below budget"}, nil
}

// TestCapabilitiesByDefault is issue 27 item 3: with the documented wiring
// (Store, Fallback, Recorder; no Prober, no MemoryCheck) a store that can
// probe per node is probed per node, so that one dead node degrades its
// own keys only, and a store that can check its memory is checked.
func TestCapabilitiesByDefault(t *testing.T) {
	np := newNodeProber()
	primary := newFaulty(conformance.NewReferenceStore())
	var budget int64
	cfg := testConfig()
	cfg.RedisMemoryBudgetMB = 8
	l, err := app.New(cfg, app.Deps{Store: capableStore{nodeStore{primary, np}, &budget},
		Fallback: conformance.NewReferenceStore(), Recorder: &recorder{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	assert.Equal(t, int64(8<<20), budget, "the store's memory check ran")
	assert.Equal(t, []string{"maxmemory below budget"}, l.Warnings())

	onA := app.Request{Route: routeExport, ClientIP: rawIP, User: "u-a", Tenant: "tenant-on-a"}
	onB := app.Request{Route: routeExport, ClientIP: netip.MustParseAddr("198.51.100.9"), User: "u-b", Tenant: "tenant-on-b"}
	_, err = l.Evaluate(context.Background(), onA)
	require.NoError(t, err)
	np.set(func(p *nodeProber) { p.onA[hashTag(primary.seen()[0])] = true; p.down["a"] = true })
	st, err := l.ProbeOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, domain.Degraded, st)
	assert.Equal(t, map[string]domain.SystemState{"a": domain.Degraded, "b": domain.Healthy}, l.NodeStates(),
		"the store's own prober names its nodes")
	a, err := l.Evaluate(context.Background(), onA)
	require.NoError(t, err)
	assert.Equal(t, domain.CauseBreakerOpen, a.Cause)
	b, err := l.Evaluate(context.Background(), onB)
	require.NoError(t, err)
	assert.Equal(t, domain.SourcePrimary, b.Source, "b's keys are still decided by the store")
}

// funcProber probes with a function set after the Limiter exists.
type funcProber struct {
	probe func(ctx context.Context) error
}

func (p *funcProber) Probe(ctx context.Context) error { return p.probe(ctx) }

// TestProbeMissWhileTheStoreAnswers: a scheduled probe that misses its
// deadline while the store answered a decision during the round proves
// nothing of the store (the probe waited behind the service's own work,
// docs/adr/008): no transition. The same miss with no decision answered
// opens the breaker.
func TestProbeMissWhileTheStoreAnswers(t *testing.T) {
	cfg := testConfig()
	cfg.StoreTimeout = 20 * time.Millisecond
	for _, answered := range []bool{true, false} {
		p := &funcProber{}
		primary := newFaulty(conformance.NewReferenceStore())
		l, err := app.New(cfg, app.Deps{Store: primary, Fallback: conformance.NewReferenceStore(), Prober: p, Recorder: &recorder{}})
		require.NoError(t, err)
		p.probe = func(ctx context.Context) error {
			if answered {
				d, err := l.Evaluate(context.Background(), app.Request{Route: routeExport, ClientIP: rawIP, User: rawUser})
				require.NoError(t, err)
				require.Equal(t, domain.SourcePrimary, d.Source)
			}
			<-ctx.Done()
			return fmt.Errorf("%w: %w", domain.ErrStoreTimeout, ctx.Err())
		}
		st, err := l.ProbeOnce(context.Background())
		require.NoError(t, err)
		if answered {
			assert.Equal(t, domain.Healthy, st, "the store answered a decision during the round")
		} else {
			assert.Equal(t, domain.Degraded, st, "a miss with nothing answered is the store's")
		}
		require.NoError(t, l.Close())
	}
}

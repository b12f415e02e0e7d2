package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// testSecret is 32 bytes as 64 hex characters.
const testSecret = "6f1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff0"

// t0 is the instant every fake clock starts at.
var t0 = time.Date(2026, 5, 7, 12, 0, 0, 0, time.UTC)

// Raw identities used across the tests; none may ever reach a store key.
const (
	rawUser   = "Alice.Martin@Example.ORG"
	rawTenant = "acme-corp"
	rawAPIKey = "sk_live_0123456789"
)

var rawIP = netip.MustParseAddr("203.0.113.77")

// Routes of testConfig.
const (
	routeRead   = "GET /api/v1/users/{id}"
	routeLogin  = "POST /api/v1/login"
	routeExport = "/api/v1/exports"
)

// testConfig has one profile per family. The read profile checks nine
// windows: ip, user, apikey and tenant × (burst, sustained) plus the
// tenant-global sustained window.
func testConfig() app.Config {
	nine := app.WindowsConfig{
		IP:           []app.WindowConfig{{Name: "burst", Limit: 50, Period: time.Second}, {Name: "sustained", Limit: 500, Period: time.Minute}},
		User:         []app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}, {Name: "sustained", Limit: 100, Period: time.Minute, Algorithm: domain.GCRA}},
		APIKey:       []app.WindowConfig{{Name: "burst", Limit: 20, Period: time.Second}, {Name: "sustained", Limit: 200, Period: time.Minute}},
		Tenant:       []app.WindowConfig{{Name: "burst", Limit: 40, Period: time.Second}, {Name: "sustained", Limit: 400, Period: time.Minute}},
		TenantGlobal: []app.WindowConfig{{Name: "sustained", Limit: 1000, Period: time.Minute}},
	}
	small := app.WindowsConfig{
		IP:   []app.WindowConfig{{Name: "burst", Limit: 3, Period: time.Second}, {Name: "sustained", Limit: 10, Period: time.Minute}},
		User: []app.WindowConfig{{Name: "burst", Limit: 3, Period: time.Second}},
	}
	return app.Config{
		HMACSecret: testSecret,
		InstanceID: "test-1",
		Profiles: []app.ProfileConfig{
			{Name: "users_read", Family: domain.FamilyRead, Routes: []string{routeRead}, Windows: nine},
			{Name: "login", Family: domain.FamilyAuth, Routes: []string{routeLogin}, Windows: small},
			{Name: "exports", Family: domain.FamilyCostly, Routes: []string{routeExport}, Windows: small},
		},
	}
}

// recorder is recordertest.Memory with the shorthands the tests use.
type recorder struct{ recordertest.Memory }

func (r *recorder) last() ports.DecisionRecord {
	rec, _ := r.LastDecision()
	return rec
}

func (r *recorder) count() int { return len(r.Decisions()) }

func (r *recorder) changes() []domain.StateChange { return r.Changes() }

func (r *recorder) storeCalls() int { return len(r.StoreCalls()) }

func (r *recorder) setFail(decide, trans error) {
	r.FailDecisions(decide)
	r.FailTransitions(trans)
}

// Failure modes of a faultyStore.
const (
	healthy int32 = iota
	unavailable
	hang     // block until the call's deadline, then return a store timeout
	hangBare // block until the call's deadline, then return ctx.Err() alone
	badLimit
)

// faultyStore wraps a store: it records every key it is handed, counts
// calls and fails on demand. It is also a Prober that fails with it.
type faultyStore struct {
	ports.Store
	mode  atomic.Int32
	calls atomic.Int64
	mu    sync.Mutex
	keys  []string
}

func newFaulty(s ports.Store) *faultyStore { return &faultyStore{Store: s} }

func (f *faultyStore) see(limits []domain.Limit) {
	f.mu.Lock()
	for _, l := range limits {
		f.keys = append(f.keys, l.Key)
	}
	f.mu.Unlock()
}

func (f *faultyStore) fail() error {
	switch f.mode.Load() {
	case unavailable:
		return fmt.Errorf("%w: injected", domain.ErrStoreUnavailable)
	case badLimit:
		return &domain.LimitError{Index: 0, Field: "cost", Reason: "injected"}
	}
	return nil
}

func (f *faultyStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	f.calls.Add(1)
	f.see(limits)
	switch f.mode.Load() {
	case hang:
		<-ctx.Done()
		return domain.Result{}, fmt.Errorf("%w: %w", domain.ErrStoreTimeout, ctx.Err())
	case hangBare:
		<-ctx.Done()
		return domain.Result{}, ctx.Err()
	}
	if err := f.fail(); err != nil {
		return domain.Result{}, err
	}
	return f.Store.Evaluate(ctx, now, limits)
}

func (f *faultyStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	f.see(limits)
	if err := f.fail(); err != nil {
		return domain.Result{}, err
	}
	return f.Store.Peek(ctx, now, limits)
}

func (f *faultyStore) Probe(ctx context.Context) error {
	if f.mode.Load() != healthy {
		return fmt.Errorf("%w: injected probe failure", domain.ErrStoreUnavailable)
	}
	return nil
}

// faultyForgetter, faultyReserver and faultyPartitioned pass a wrapped
// store's resets that report, reservations and partitions through (not
// its faults: those the tests inject on Evaluate and Peek). Every store
// the tests wrap that reserves also reports its resets.
type faultyForgetter struct {
	*faultyStore
	ports.Forgetter
}

type faultyReserver struct {
	*faultyStore
	ports.Reserver
	ports.Forgetter
}

type faultyPartitioned struct {
	*faultyStore
	ports.Reserver
	ports.Partitioned
	ports.Forgetter
}

// withCapabilities is f with the optional capabilities of the store it
// wraps: the Limiter finds them by type assertion.
func (f *faultyStore) withCapabilities() ports.Store {
	fg, forgets := f.Store.(ports.Forgetter)
	rs, reserves := f.Store.(ports.Reserver)
	switch {
	case reserves && !forgets:
		panic("a test store that reserves must report its resets (ports.Forgetter)")
	case !reserves && forgets:
		return faultyForgetter{f, fg}
	case !reserves:
		return f
	}
	if p, ok := f.Store.(ports.Partitioned); ok {
		return faultyPartitioned{f, rs, p, fg}
	}
	return faultyReserver{f, rs, fg}
}

func (f *faultyStore) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

// rig is a Limiter wired to fakes.
type rig struct {
	l     *app.Limiter
	clock *fakeclock.Clock
	store *faultyStore
	local ports.Store
	rec   *recorder
	ticks chan struct{}
}

// newRig builds a Limiter on the reference store, a fake clock and a
// recorder; mutate adjusts the config first.
func newRig(t *testing.T, mutate func(*app.Config)) *rig {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	return newRigWith(t, cfg, newFaulty(conformance.NewReferenceStore()), conformance.NewReferenceStore())
}

func newRigWith(t *testing.T, cfg app.Config, primary *faultyStore, fallback ports.Store) *rig {
	t.Helper()
	return newRigProber(t, cfg, primary, primary, fallback)
}

func newRigProber(t *testing.T, cfg app.Config, primary *faultyStore, prober ports.Prober, fallback ports.Store) *rig {
	t.Helper()
	r := &rig{
		clock: fakeclock.New(t0),
		store: primary,
		local: fallback,
		rec:   &recorder{},
		ticks: make(chan struct{}, 64),
	}
	l, err := app.NewWithTickHook(cfg, app.Deps{
		Store:    primary.withCapabilities(),
		Fallback: fallback,
		Clock:    r.clock,
		Prober:   prober,
		Recorder: r.rec,
	}, func() {
		select {
		case r.ticks <- struct{}{}:
		default: // nobody is waiting for this many ticks
		}
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	r.l = l
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// eval evaluates and fails the test on a recording error.
func (r *rig) eval(t *testing.T, req app.Request) domain.Decision {
	t.Helper()
	d, err := r.l.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return d
}

// tick advances the fake clock by one probe interval and waits until the
// health loop has processed the tick.
func (r *rig) tick(t *testing.T) domain.SystemState {
	t.Helper()
	for len(r.ticks) > 0 {
		<-r.ticks // forget ticks of earlier clock moves
	}
	// The loop ticks at the recovery interval outside HEALTHY.
	every := r.l.Config().ProbeInterval
	if r.l.SystemState() != domain.Healthy {
		every = min(every, r.l.Config().RecoveryProbeInterval)
	}
	r.clock.Advance(every)
	select {
	case <-r.ticks:
	case <-time.After(10 * time.Second):
		t.Fatal("the health loop did not process the tick")
	}
	return r.l.SystemState()
}

// fullRequest carries every identity.
func fullRequest(route string) app.Request {
	return app.Request{Route: route, ClientIP: rawIP, User: rawUser, Tenant: rawTenant, APIKey: rawAPIKey}
}

// assertNoRawIdentifier fails when a key holds any raw identity, in any
// of the forms the pipeline sees it.
func assertNoRawIdentifier(t *testing.T, keys []string) {
	t.Helper()
	raws := []string{rawUser, strings.ToLower(rawUser), "alice", "Alice", rawTenant, "acme", rawAPIKey, "sk_live", rawIP.String(), "203.0.113", "2001:db8"}
	for _, k := range keys {
		for _, raw := range raws {
			if strings.Contains(k, raw) {
				t.Fatalf("key %q contains the raw identifier %q", k, raw)
			}
		}
	}
}

var errRecorder = errors.New("recorder down")

// hashTag returns the content of a key's first {…}: the part Redis Cluster
// hashes, so keys with one tag share one slot.
func hashTag(key string) string {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return key
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return key
	}
	return tag
}

package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// Allotments (docs/adr/019): a key set hot on an instance and far from
// its limits is decided in process from units the store allotted; near
// its limits, one request at a time at the store; never past a limit.

const routeHot = "GET /api/v1/hot"

// hotConfig limits routeHot per tenant with the windows given.
func hotConfig(windows app.WindowsConfig) app.Config {
	return app.Config{
		HMACSecret: testSecret,
		Profiles:   []app.ProfileConfig{{Name: "hot", Family: domain.FamilyRead, Routes: []string{routeHot}, Windows: windows}},
	}
}

// outageStore is an allotting store (the reference store) that fails
// every call while down is set.
type outageStore struct {
	ports.Store
	ports.Allotter
	down atomic.Bool
}

func newOutageStore() *outageStore {
	ref := conformance.NewReferenceStore()
	return &outageStore{Store: ref, Allotter: ref.(ports.Allotter)}
}

var errDown = fmt.Errorf("%w: the test took it down", domain.ErrStoreUnavailable)

func (s *outageStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, errDown
	}
	return s.Store.Evaluate(ctx, now, limits)
}

func (s *outageStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, errDown
	}
	return s.Store.Peek(ctx, now, limits)
}

func (s *outageStore) Reset(ctx context.Context, key string) error { return s.Store.Reset(ctx, key) }

func (s *outageStore) Close() error { return s.Store.Close() }

func (s *outageStore) ReserveAhead(ctx context.Context, now time.Time, ahead time.Duration, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if s.down.Load() {
		return domain.Result{}, domain.Lease{}, errDown
	}
	return s.Allotter.ReserveAhead(ctx, now, ahead, limits, ttl)
}

func (s *outageStore) Probe(ctx context.Context) error {
	if s.down.Load() {
		return errDown
	}
	return nil
}

// hotRig is one instance on a shared store and a shared fake clock.
type hotRig struct {
	l   *app.Limiter
	rec *recorder
}

func newHotRig(t *testing.T, cfg app.Config, store ports.Store, clock *fakeclock.Clock, prober ports.Prober) *hotRig {
	t.Helper()
	r := &hotRig{rec: &recorder{}}
	deps := app.Deps{Store: store, Fallback: conformance.NewReferenceStore(), Clock: clock, Recorder: r.rec, Prober: prober}
	l, err := app.New(cfg, deps)
	require.NoError(t, err)
	r.l = l
	t.Cleanup(func() { _ = l.Close() })
	return r
}

func tenantReq(tenant string) app.Request {
	return app.Request{Route: routeHot, ClientIP: netip.MustParseAddr("198.51.100.7"), Tenant: tenant}
}

// sources counts the decisions by source, and the store calls by op.
func (r *hotRig) sources() (map[domain.Source]int, map[ports.StoreOp]int) {
	src, ops := map[domain.Source]int{}, map[ports.StoreOp]int{}
	for _, d := range r.rec.Decisions() {
		src[d.Decision.Source]++
	}
	for _, c := range r.rec.StoreCalls() {
		ops[c.Op]++
	}
	return src, ops
}

// TestAllotmentsDecideAHotKeyInProcess: a tenant-global key at a high
// limit, decided a thousand times a second on one instance, goes to the
// store for a few allotments: nearly every decision is taken in process,
// each admitted, at under 0.05 store calls a decision.
func TestAllotmentsDecideAHotKeyInProcess(t *testing.T) {
	for _, algo := range []domain.Algorithm{domain.SlidingLog, domain.GCRA} {
		t.Run(algo.String(), func(t *testing.T) {
			clock := fakeclock.New(t0)
			r := newHotRig(t, hotConfig(app.WindowsConfig{
				TenantGlobal: []app.WindowConfig{{Name: "sustained", Limit: 100000, Period: time.Minute, Algorithm: algo}},
			}), conformance.NewReferenceStore(), clock, nil)
			const n = 3000
			var last domain.Decision
			for range n {
				d, err := r.l.Evaluate(t.Context(), tenantReq("hot"))
				require.NoError(t, err)
				require.Equal(t, domain.Allowed, d.State)
				last = d
				waitTakes(r.l)
				clock.Advance(time.Millisecond)
			}
			src, ops := r.sources()
			calls := ops[ports.OpEvaluate] + ops[ports.OpAllot] + ops[ports.OpSettle]
			t.Logf("%d decisions: sources %v, store calls %v", n, src, ops)
			assert.GreaterOrEqual(t, src[domain.SourceAllotment], n*9/10, "decided in process")
			assert.LessOrEqual(t, float64(calls)/n, 0.05, "store calls per decision")
			clock.Advance(-time.Millisecond)
			p, err := r.l.Peek(t.Context(), tenantReq("hot"))
			require.NoError(t, err)
			require.Equal(t, domain.SourceAllotment, last.Source)
			assert.LessOrEqual(t, last.Remaining, p.Remaining, "a decision from an allotment reports no more than is left")
			if algo == domain.SlidingLog {
				assert.LessOrEqual(t, p.Remaining, int64(100000-n), "Peek counts the units out in an allotment as consumed")
			}
		})
	}
}

// TestAllotmentsTakeTheNextAhead: once a hot key set's pace is known,
// the allotment that follows the one spending is taken ahead, off the
// decisions' path: no decision waits on the store for it, and none goes
// to the store while the next allotment is being taken.
func TestAllotmentsTakeTheNextAhead(t *testing.T) {
	for _, algo := range []domain.Algorithm{domain.SlidingLog, domain.GCRA} {
		t.Run(algo.String(), func(t *testing.T) {
			clock := fakeclock.New(t0)
			r := newHotRig(t, hotConfig(app.WindowsConfig{
				TenantGlobal: []app.WindowConfig{{Name: "sustained", Limit: 100000, Period: time.Minute, Algorithm: algo}},
			}), conformance.NewReferenceStore(), clock, nil)
			const warm, n = 1000, 4000
			notInProcess, most := 0, 0
			for i := range n {
				d, err := r.l.Evaluate(t.Context(), tenantReq("hot"))
				require.NoError(t, err)
				require.Equal(t, domain.Allowed, d.State)
				if i >= warm && d.Source != domain.SourceAllotment {
					notInProcess++
				}
				waitTakes(r.l)
				most = max(most, r.l.Allotments().Held)
				clock.Advance(time.Millisecond)
			}
			st := r.l.Allotments()
			_, ops := r.sources()
			t.Logf("%d decisions after %d: %d not in process; allotments %+v, at most %d held at once; store calls %v", n-warm, warm, notInProcess, st, most, ops)
			assert.Zero(t, notInProcess, "decisions that went to the store once the pace was known")
			assert.Equal(t, 2, most, "the held allotment and the next")
			assert.GreaterOrEqual(t, st.Taken, uint64(3), "allotments taken one after another")
		})
	}
}

// waitTakes lets the allotments taken ahead end before a test moves its
// fake clock on: a take ahead is the store's call, taken off the
// decisions' path, and a busy machine can leave it unscheduled for a
// while the loop decides hundreds of requests at one fake instant.
func waitTakes(l *app.Limiter) {
	deadline := time.Now().Add(10 * time.Second)
	for l.Allotments().Taking > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
}

// admittedWithin checks that the instants (offsets) admitted never
// exceed limit in any span of period.
func admittedWithin(t *testing.T, admitted []time.Duration, limit int64, period time.Duration) (worst int64) {
	t.Helper()
	xs := slices.Clone(admitted)
	slices.Sort(xs)
	j := 0
	for i, x := range xs {
		for xs[j] <= x-period {
			j++
		}
		worst = max(worst, int64(i-j+1))
	}
	assert.LessOrEqual(t, worst, limit, "admitted in one period")
	return worst
}

// TestAllotmentsNeverPastALimitAcrossAFleet: four instances on one store
// decide one tenant's requests at random, far past its limit of 200 a
// second; one of them stops dead midway, its allotment unreturned, and
// one's store goes down for a while. At the instants they were admitted,
// the requests never exceed 200 in any second, and while they can the
// instances admit nearly all of it.
func TestAllotmentsNeverPastALimitAcrossAFleet(t *testing.T) {
	clock := fakeclock.New(t0)
	shared := newOutageStore()
	cfg := hotConfig(app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "burst", Limit: 200, Period: time.Second}}})
	cfg.AllotmentHold = 200 * time.Millisecond
	rigs := make([]*hotRig, 4)
	for i := range rigs {
		rigs[i] = newHotRig(t, cfg, shared, clock, shared)
	}
	var admitted []time.Duration
	dead := map[int]bool{}
	for step := range 40000 {
		at := clock.Now().Sub(t0)
		switch step {
		case 12000:
			dead[3] = true // crashed: its allotment is never given back
		case 20000:
			shared.down.Store(true)
		case 21000:
			shared.down.Store(false)
		}
		i := step % 4
		if dead[i] {
			clock.Advance(100 * time.Microsecond)
			continue
		}
		d, err := rigs[i].l.Evaluate(t.Context(), tenantReq("fleet"))
		require.NoError(t, err)
		if d.State == domain.Allowed || d.State == domain.BypassDegraded && d.Source == domain.SourceAllotment {
			admitted = append(admitted, at)
		}
		clock.Advance(time.Duration(50+step%150) * time.Microsecond)
	}
	worst := admittedWithin(t, admitted, 200, time.Second)
	from := 0
	for _, r := range rigs {
		src, _ := r.sources()
		from += src[domain.SourceAllotment]
	}
	t.Logf("%d admitted over %s, at most %d in a second, %d from allotments", len(admitted), clock.Now().Sub(t0), worst, from)
	assert.Positive(t, from, "the fleet spent allotments")
}

// TestAllotmentsAtTheEdgeDecideOneByOne: a window near its limit gets no
// allotment: a burst of 1 000 concurrent requests of one user, limited to
// 5 a second, admits exactly 5, and a hot key with 20 left admits
// exactly those 20.
func TestAllotmentsAtTheEdgeDecideOneByOne(t *testing.T) {
	t.Run("burst", func(t *testing.T) {
		clock := fakeclock.New(t0)
		r := newHotRig(t, hotConfig(app.WindowsConfig{User: []app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}}}), conformance.NewReferenceStore(), clock, nil)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() {
				d, err := r.l.Evaluate(context.Background(), app.Request{Route: routeHot, ClientIP: rawIP, User: rawUser})
				if err == nil && d.State == domain.Allowed {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(5), ok.Load())
	})
	t.Run("burst far enough for an allotment", func(t *testing.T) {
		// 200 concurrent requests of one tenant limited to 50 a minute:
		// room enough for allotments, but a burst in flight at the store
		// is not refused for units an allotment would hold unspent.
		for round := range 20 {
			clock := fakeclock.New(t0)
			r := newHotRig(t, hotConfig(app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 50, Period: time.Minute}}}), conformance.NewReferenceStore(), clock, nil)
			var ok atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 200 {
				wg.Go(func() {
					<-start
					clock.Advance(10 * time.Microsecond) // the burst's pace
					d, err := r.l.Evaluate(context.Background(), tenantReq("burst"))
					if err == nil && d.State == domain.Allowed {
						ok.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			require.Equal(t, int64(50), ok.Load(), "round %d: exactly the limit; allotments %+v", round, r.l.Allotments())
		}
	})
	t.Run("hot key near its limit", func(t *testing.T) {
		clock := fakeclock.New(t0)
		r := newHotRig(t, hotConfig(app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 100, Period: time.Minute}}}), conformance.NewReferenceStore(), clock, nil)
		admitted := 0
		for range 400 {
			d, err := r.l.Evaluate(t.Context(), tenantReq("edge"))
			require.NoError(t, err)
			if d.State == domain.Allowed {
				admitted++
			}
			clock.Advance(time.Millisecond)
		}
		src, _ := r.sources()
		assert.Equal(t, 100, admitted, "exactly the limit")
		t.Logf("sources %v", src)
	})
}

// TestAllotmentsSpendThroughAnOutage: while the store cannot answer, an
// instance spends what its allotment holds (counted at the store), and
// nothing more: the next requests are the degraded matrix's.
func TestAllotmentsSpendThroughAnOutage(t *testing.T) {
	clock := fakeclock.New(t0)
	store := newOutageStore()
	r := newHotRig(t, hotConfig(app.WindowsConfig{TenantGlobal: []app.WindowConfig{{Name: "sustained", Limit: 100000, Period: time.Minute}}}), store, clock, store)
	for range 200 {
		_, err := r.l.Evaluate(t.Context(), tenantReq("outage"))
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
	}
	src, _ := r.sources()
	require.Positive(t, src[domain.SourceAllotment], "an allotment was taken")
	store.down.Store(true)
	var fromAllotment, degraded int
	for range 3000 {
		d, err := r.l.Evaluate(t.Context(), tenantReq("outage"))
		require.NoError(t, err)
		switch {
		case d.Source == domain.SourceAllotment:
			require.Equal(t, domain.Allowed, d.State)
			require.Zero(t, degraded, "an allotment spent after a degraded decision: it held nothing then")
			fromAllotment++
		case d.Degraded:
			degraded++
		}
		clock.Advance(100 * time.Microsecond)
	}
	assert.Positive(t, fromAllotment, "spent what it held")
	assert.Positive(t, degraded, "then the degraded matrix")
	t.Logf("during the outage: %d from the allotment, then %d degraded", fromAllotment, degraded)
}

// TestResetDropsAllotments: a Reset of a key set's keys drops this
// instance's allotment on them: the next decision goes to the store,
// which counts from zero.
func TestResetDropsAllotments(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newHotRig(t, hotConfig(app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 100000, Period: time.Minute}}}), conformance.NewReferenceStore(), clock, nil)
	for range 100 {
		_, err := r.l.Evaluate(t.Context(), tenantReq("reset"))
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
	}
	d, err := r.l.Evaluate(t.Context(), tenantReq("reset"))
	require.NoError(t, err)
	require.Equal(t, domain.SourceAllotment, d.Source)
	_, err = r.l.Reset(t.Context(), app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: "reset", Actor: "test"})
	require.NoError(t, err)
	d, err = r.l.Evaluate(t.Context(), tenantReq("reset"))
	require.NoError(t, err)
	assert.Equal(t, domain.SourcePrimary, d.Source, "the allotment went with the reset")
	assert.Equal(t, int64(100000-1), d.Remaining, "counted from zero")
}

// TestAllotmentsTurnedOff: Config.Allotments, a profile's and a window's
// "off" each keep every decision at the store.
func TestAllotmentsTurnedOff(t *testing.T) {
	windows := func(off bool) app.WindowsConfig {
		w := app.WindowConfig{Name: "sustained", Limit: 100000, Period: time.Minute}
		if off {
			w.Allotments = app.AllotmentsOff
		}
		return app.WindowsConfig{Tenant: []app.WindowConfig{w}}
	}
	cases := map[string]func() app.Config{
		"config": func() app.Config { c := hotConfig(windows(false)); c.Allotments = app.AllotmentsOff; return c },
		"profile": func() app.Config {
			c := hotConfig(windows(false))
			c.Profiles[0].Allotments = app.AllotmentsOff
			return c
		},
		"window": func() app.Config { return hotConfig(windows(true)) },
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			r := newHotRig(t, cfg(), conformance.NewReferenceStore(), clock, nil)
			for range 500 {
				_, err := r.l.Evaluate(t.Context(), tenantReq("off"))
				require.NoError(t, err)
				clock.Advance(time.Millisecond)
			}
			src, ops := r.sources()
			assert.Zero(t, src[domain.SourceAllotment])
			assert.Zero(t, ops[ports.OpAllot])
		})
	}
	_, err := app.ParseConfig([]byte("hmac_secret: "+testSecret+"\nallotments: sometimes\nprofiles: [{name: p, family: read, routes: [\"/x\"], windows: {ip: [{name: b, limit: 1, period: 1s}]}}]\n"), nil)
	var ce *domain.ConfigError
	assert.True(t, errors.As(err, &ce), "an unknown value is a configuration error: %v", err)
}

// TestResetReachesTheOtherInstances: two instances on one in-process
// store (which tells its instances of a reset, ports.ResetNotifier) each
// hold an allotment of one tenant's key set; a Reset through one drops
// the other's too, at once.
func TestResetReachesTheOtherInstances(t *testing.T) {
	clock := fakeclock.New(t0)
	store := newSharedLocal(t)
	cfg := hotConfig(app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 100000, Period: time.Minute}}})
	a, b := newHotRig(t, cfg, store, clock, nil), newHotRig(t, cfg, store, clock, nil)
	for range 100 {
		for _, r := range []*hotRig{a, b} {
			_, err := r.l.Evaluate(t.Context(), tenantReq("fleet"))
			require.NoError(t, err)
		}
		clock.Advance(time.Millisecond)
	}
	require.Equal(t, 1, b.l.Allotments().Held)
	_, err := a.l.Reset(t.Context(), app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: "fleet", Actor: "test"})
	require.NoError(t, err)
	assert.Zero(t, a.l.Allotments().Held)
	assert.Zero(t, b.l.Allotments().Held, "the notice reached the other instance")
	assert.Equal(t, uint64(1), b.l.Allotments().Dropped)
	d, err := b.l.Evaluate(t.Context(), tenantReq("fleet"))
	require.NoError(t, err)
	assert.Equal(t, domain.SourcePrimary, d.Source)
	assert.Equal(t, int64(100000-1), d.Remaining, "counted from zero")
}

// newSharedLocal is an in-process store the instances of a test share.
func newSharedLocal(t *testing.T) *local.Store {
	t.Helper()
	s, err := local.New(local.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

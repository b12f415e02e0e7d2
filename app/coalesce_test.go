package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// repeaterStore is the reference store with ports.Repeater exactly as its
// contract says: EvaluateRepeated loops Evaluate under the lock every
// call takes, so the n requests are decided in order with nothing in
// between. It counts calls, and can hold every call at a gate and fail on
// demand.
type repeaterStore struct {
	ports.Store
	mu       sync.Mutex
	evals    atomic.Int64 // Evaluate calls
	repeats  atomic.Int64 // EvaluateRepeated calls
	repeated atomic.Int64 // requests EvaluateRepeated carried
	// gate, when set, holds every call until it is closed; entered, when
	// set, learns of every call that reached the store.
	gate    chan struct{}
	entered chan struct{}
	fail    atomic.Bool
}

var _ ports.Repeater = (*repeaterStore)(nil)

func newRepeaterStore(gated bool) *repeaterStore {
	s := &repeaterStore{Store: conformance.NewReferenceStore(), entered: make(chan struct{}, 1024)}
	if gated {
		s.gate = make(chan struct{})
	}
	return s
}

func (s *repeaterStore) enter() error {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	if s.fail.Load() {
		return fmt.Errorf("%w: injected", domain.ErrStoreUnavailable)
	}
	return nil
}

func (s *repeaterStore) calls() int64 { return s.evals.Load() + s.repeats.Load() }

func (s *repeaterStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	s.evals.Add(1)
	if err := s.enter(); err != nil {
		return domain.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.Evaluate(ctx, now, limits)
}

func (s *repeaterStore) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	s.repeats.Add(1)
	s.repeated.Add(int64(n))
	if err := s.enter(); err != nil {
		return domain.Repeated{}, err
	}
	if n < 1 || n > ports.MaxRepeat {
		return domain.Repeated{}, &domain.LimitError{Field: "n", Reason: "out of range"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := domain.Repeated{N: n}
	for rep.Admitted < n {
		res, err := s.Store.Evaluate(ctx, now, limits)
		if err != nil {
			return domain.Repeated{}, err
		}
		if !res.Allowed {
			rep.Refused = res
			break
		}
		rep.Last, rep.Admitted = res, rep.Admitted+1
	}
	return rep, nil
}

// hidden hides a store's optional capabilities: the Limiter sees a plain
// Store and does not coalesce.
type hidden struct{ ports.Store }

// newStoreRig builds a Limiter on store, a fake clock at t0 and a
// recorder, without health probes in the timeline.
func newStoreRig(t testing.TB, cfg app.Config, store ports.Store) *rig {
	t.Helper()
	cfg.ProbeInterval = time.Hour
	r := &rig{clock: fakeclock.New(t0), local: conformance.NewReferenceStore(), rec: &recorder{}}
	l, err := app.New(cfg, app.Deps{Store: store, Fallback: r.local, Clock: r.clock, Prober: alwaysUp{}, Recorder: r.rec})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	r.l = l
	return r
}

type alwaysUp struct{}

func (alwaysUp) Probe(context.Context) error { return nil }

// waitQueued waits until n decisions are queued behind a call in flight.
// It polls a state, never a duration: the bound only stops a broken test.
func waitQueued(t *testing.T, l *app.Limiter, n int) {
	t.Helper()
	for start := time.Now(); l.Queued() != n; time.Sleep(200 * time.Microsecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d decisions queued, want %d", l.Queued(), n)
		}
	}
}

// burst decides reqs on r: the first alone, its call held at the store's
// gate until every other has queued behind it, one after the other in
// slice order; then the gate opens. It returns the decisions in order.
func burst(t *testing.T, r *rig, s *repeaterStore, reqs []app.Request) []domain.Decision {
	t.Helper()
	out := make([]domain.Decision, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := r.l.Evaluate(context.Background(), req)
			assert.NoError(t, err)
			out[i] = d
		}()
		if i == 0 {
			<-s.entered // the lone request called at once
			continue
		}
		waitQueued(t, r.l, i)
	}
	close(s.gate)
	wg.Wait()
	return out
}

// coalesceConfig has one profile whose user windows are the case's.
func coalesceConfig(user []app.WindowConfig) app.Config {
	cfg := testConfig()
	cfg.RefusalCacheSize = -1 // every decision is the store's: compared one by one
	// The longest deadline: a decision queued while the test lines up the
	// others must not leave (TestCoalescedFollowerLeavesAtItsDeadline
	// shortens it).
	cfg.StoreTimeout = 10 * time.Second
	cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{Name: "coal", Family: domain.FamilyCostly, Routes: []string{routeCoal},
		Windows: app.WindowsConfig{User: user}})
	return cfg
}

const routeCoal = "GET /api/v1/coal"

// TestCoalescedDecideAsSequential (issue 16 item 1): N decisions on one
// key set, coalesced behind a call in flight, get exactly the decisions N
// sequential calls give a twin Limiter at the same instant, caller by
// caller (state, remaining, waits, limiting window, every window, layers),
// for both algorithms, cost > 1 and more requests than fit; and the store
// saw two calls.
func TestCoalescedDecideAsSequential(t *testing.T) {
	cases := []struct {
		name string
		user []app.WindowConfig
		cost int64
	}{
		{"sliding log", []app.WindowConfig{{Name: "burst", Limit: 7, Period: time.Second}}, 2},
		{"gcra", []app.WindowConfig{{Name: "burst", Limit: 9, Period: time.Minute, Algorithm: domain.GCRA}}, 2},
		{"mixed", []app.WindowConfig{
			{Name: "burst", Limit: 11, Period: time.Second},
			{Name: "sustained", Limit: 15, Period: time.Minute, Algorithm: domain.GCRA},
		}, 3},
		{"cost 1", []app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second, Algorithm: domain.GCRA}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := coalesceConfig(tc.user)
			s := newRepeaterStore(true)
			co := newStoreRig(t, cfg, s)
			twin := newStoreRig(t, cfg, hidden{conformance.NewReferenceStore()})
			const n = 12
			reqs := make([]app.Request, n)
			for i := range reqs {
				reqs[i] = app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser, Cost: tc.cost}
			}
			got := burst(t, co, s, reqs)
			allowed := 0
			for i, req := range reqs {
				want := twin.eval(t, req)
				assert.Equal(t, want, got[i], "caller %d", i)
				if got[i].State == domain.Allowed {
					allowed++
				}
			}
			assert.Less(t, allowed, n, "more requests than fit")
			assert.Positive(t, allowed)
			assert.Equal(t, int64(1), s.evals.Load(), "the lone request's call")
			assert.Equal(t, int64(1), s.repeats.Load(), "one call for every queued decision")
			assert.Equal(t, int64(n-1), s.repeated.Load())
			assert.Equal(t, n, co.rec.count(), "each caller has its own record")
			assert.Equal(t, 2, co.rec.storeCalls())
		})
	}
}

// TestCoalescingLoneRequestNeverWaits: a decision with no call in flight
// for its key set reaches the store at once, whatever is in flight for
// other key sets; only a decision that arrives while its own key set's
// call is in flight queues, and it is decided by the next call.
func TestCoalescingLoneRequestNeverWaits(t *testing.T) {
	s := newRepeaterStore(true)
	r := newStoreRig(t, coalesceConfig([]app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}}), s)
	a := app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser}
	b := app.Request{Route: routeCoal, ClientIP: rawIP, User: "bob@example.org"}
	var wg sync.WaitGroup
	decide := func(req app.Request) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := r.l.Evaluate(context.Background(), req)
			assert.NoError(t, err)
			assert.Equal(t, domain.Allowed, d.State)
		}()
	}
	decide(a)
	<-s.entered // a's call is in the store, held at the gate
	decide(b)
	<-s.entered // b's key set had nothing in flight: b called too, at once
	assert.Equal(t, int64(2), s.calls())
	assert.Zero(t, r.l.Queued())
	decide(a)
	waitQueued(t, r.l, 1) // a's key set is busy: this one queues
	assert.Equal(t, int64(2), s.calls(), "a queued decision makes no call of its own")
	close(s.gate)
	wg.Wait()
	assert.Equal(t, int64(3), s.evals.Load(), "the queued decision, alone in its batch, made one plain call")
	assert.Zero(t, s.repeats.Load())
	r.eval(t, a)
	assert.Equal(t, int64(4), s.calls(), "with nothing in flight, one decision is one call")
}

// TestCoalescingLapsedRefusalGetsOneCaller (issue 16 item 1): when a
// remembered refusal lapses under a hot key, the callers waiting on it
// make two store calls between them, not one each.
func TestCoalescingLapsedRefusalGetsOneCaller(t *testing.T) {
	cfg := coalesceConfig([]app.WindowConfig{{Name: "burst", Limit: 3, Period: time.Second}})
	cfg.RefusalCacheSize = 0 // the default cache
	s := newRepeaterStore(false)
	r := newStoreRig(t, cfg, s)
	req := app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser}
	for range 4 {
		r.eval(t, req)
	}
	require.Equal(t, domain.SourceRefusalCache, r.eval(t, req).Source)
	r.clock.Advance(time.Second) // the refusal lapses
	before := s.calls()
	for len(s.entered) > 0 {
		<-s.entered
	}
	s.gate = make(chan struct{})
	const herd = 64
	reqs := make([]app.Request, herd)
	for i := range reqs {
		reqs[i] = req
	}
	got := burst(t, r, s, reqs)
	assert.Equal(t, before+2, s.calls(), "%d callers, two store calls", herd)
	allowed := 0
	for _, d := range got {
		if d.State == domain.Allowed {
			allowed++
		}
	}
	assert.Equal(t, 3, allowed, "exactly the limit passes")
}

// TestCoalescedFollowerLeavesAtItsShedBound: a queued decision waits
// behind the call in flight past its store deadline (the queue is not the
// store: docs/adr/008) and leaves at its shed bound, refused as
// overloaded, never by the degraded matrix: it made no call, so the store
// counted nothing for it and the breaker (one failure opens it here) did
// not count it.
func TestCoalescedFollowerLeavesAtItsShedBound(t *testing.T) {
	cfg := coalesceConfig([]app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}})
	cfg.StoreTimeout = 20 * time.Millisecond
	cfg.ShedAfter = 60 * time.Millisecond
	cfg.BreakerFailures = 1
	s := newRepeaterStore(true) // the gate ignores deadlines: a hung call
	r := newStoreRig(t, cfg, s)
	req := app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser}
	done := make(chan domain.Decision)
	go func() {
		d, err := r.l.Evaluate(context.Background(), req)
		assert.NoError(t, err)
		done <- d
	}()
	<-s.entered
	began := time.Now()
	d, err := r.l.Evaluate(context.Background(), req) // queues, then leaves
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(began), cfg.ShedAfter, "it waited past its store deadline, up to its shed bound")
	assert.Equal(t, domain.DeniedDegraded, d.State)
	assert.Equal(t, domain.CauseOverloaded, d.Cause)
	assert.True(t, d.Degraded)
	assert.ErrorIs(t, r.rec.last().Err, app.ErrOverloaded)
	assert.Equal(t, domain.Healthy, r.l.SystemState(), "a decision that only waited counts nothing against the store")
	assert.Zero(t, r.l.Queued())
	close(s.gate)
	<-done
	assert.Equal(t, int64(1), s.calls(), "the store never saw the one that left")
}

// TestCoalescedCallErrorReachesEveryMember: the batch's call fails; every
// member gets the degraded decision with the call's error, and the store
// failure is counted once, not once per member.
func TestCoalescedCallErrorReachesEveryMember(t *testing.T) {
	cfg := coalesceConfig([]app.WindowConfig{{Name: "burst", Limit: 50, Period: time.Second}})
	cfg.BreakerFailures = 2
	s := newRepeaterStore(true)
	r := newStoreRig(t, cfg, s)
	reqs := make([]app.Request, 10)
	for i := range reqs {
		reqs[i] = app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser}
	}
	s.fail.Store(true)
	got := burst(t, r, s, reqs)
	for i, d := range got {
		assert.Equal(t, domain.CauseStoreUnavailable, d.Cause, "caller %d", i)
		assert.True(t, d.Degraded, "caller %d", i)
	}
	assert.Equal(t, int64(2), s.calls())
	assert.Equal(t, domain.Degraded, r.l.SystemState(), "two calls failed: two failures, the breaker's threshold")
	assert.Len(t, r.rec.changes(), 1)
}

// rttStore adds a round trip to every call of its store, as a network
// store costs one whatever a call carries.
type rttStore struct {
	ports.Store
	rtt time.Duration
}

func (s rttStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	time.Sleep(s.rtt)
	return s.Store.Evaluate(ctx, now, limits)
}

func (s rttStore) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	time.Sleep(s.rtt)
	return s.Store.(ports.Repeater).EvaluateRepeated(ctx, now, limits, n)
}

// plainRTTStore is rttStore without ports.Repeater: not coalesced.
type plainRTTStore struct{ rtt rttStore }

func (s plainRTTStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.rtt.Evaluate(ctx, now, limits)
}
func (s plainRTTStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.rtt.Peek(ctx, now, limits)
}
func (s plainRTTStore) Reset(ctx context.Context, key string) error { return s.rtt.Reset(ctx, key) }
func (s plainRTTStore) Close() error                                { return s.rtt.Close() }

// BenchmarkBurst measures a burst on one key set: 64 goroutines per core
// deciding the same request, on a store that costs a 100 µs round trip
// per call, coalesced (through ports.Repeater) and not. It reports the
// store calls per decision and the decisions' p50 and p99 latency.
//
//	go test -run '^$' -bench Burst -benchmem ./app/
func BenchmarkBurst(b *testing.B) {
	for _, mode := range []string{"plain", "coalesced"} {
		b.Run(mode, func(b *testing.B) {
			inner := newRepeaterStore(false)
			inner.entered = nil
			counted := rttStore{Store: inner, rtt: 100 * time.Microsecond}
			var store ports.Store = counted
			if mode == "plain" {
				store = plainRTTStore{counted}
			}
			// GCRA: the fake clock stands still, and a log would grow by b.N.
			cfg := coalesceConfig([]app.WindowConfig{{Name: "burst", Limit: 1 << 30, Period: time.Minute, Algorithm: domain.GCRA}})
			r := newStoreRig(b, cfg, store)
			req := app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser}
			var mu sync.Mutex
			var lat []time.Duration
			b.ReportAllocs()
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				mine := make([]time.Duration, 0, 1024)
				for pb.Next() {
					start := time.Now()
					d, err := r.l.Evaluate(context.Background(), req)
					mine = append(mine, time.Since(start))
					if err != nil || d.State != domain.Allowed {
						b.Errorf("decision %s (%s), err %v", d.State, d.Cause, err)
						return
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(inner.calls())/float64(len(lat)), "calls/decision")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}

// TestCoalescedMemberCancelledLeavesAlone: a queued decision whose caller
// gives up leaves with its own cancellation, is not sent to the store,
// and takes nobody with it: the member queued behind it is decided.
func TestCoalescedMemberCancelledLeavesAlone(t *testing.T) {
	cfg := coalesceConfig([]app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}})
	cfg.BreakerFailures = 1
	s := newRepeaterStore(true)
	r := newStoreRig(t, cfg, s)
	req := app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser}
	var wg sync.WaitGroup
	decided := make([]domain.Decision, 3)
	ctxs := make([]context.Context, 3)
	cancels := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		defer cancels[i]()
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := r.l.Evaluate(ctxs[i], req)
			assert.NoError(t, err)
			decided[i] = d
		}()
		if i == 0 {
			<-s.entered
			continue
		}
		waitQueued(t, r.l, i)
	}
	cancels[1]()
	waitQueued(t, r.l, 1)
	close(s.gate)
	wg.Wait()
	assert.Equal(t, domain.Allowed, decided[0].State)
	assert.Equal(t, domain.DeniedDegraded, decided[1].State, "the cancelled one: its own answer")
	assert.Equal(t, domain.Allowed, decided[2].State, "the one behind it: decided by the store")
	assert.Equal(t, domain.SourcePrimary, decided[2].Source)
	assert.Equal(t, int64(2), s.evals.Load(), "the batch carried one request: the cancelled one was not sent")
	assert.Equal(t, domain.Healthy, r.l.SystemState(), "a caller that gave up counts nothing against the store")
	d := r.eval(t, req)
	assert.Equal(t, int64(2), d.Remaining, "two units counted before this one, not three")
}

// gated holds every Evaluate and EvaluateRepeated call of its store at a
// gate until it opens, and reports each call as it arrives; gatedRepeater
// keeps the store's ports.Repeater.
type gated struct {
	ports.Store
	gate    chan struct{}
	entered chan struct{}
}

func (g *gated) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Store.Evaluate(ctx, now, limits)
}

type gatedRepeater struct{ *gated }

func (g gatedRepeater) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Store.(ports.Repeater).EvaluateRepeated(ctx, now, limits, n)
}

// TestCoalescedOnEveryStore runs a burst through the Limiter on each real
// store. On a store that implements ports.Repeater, the queued decisions
// are coalesced and each caller's decision equals a sequential twin's, as
// in TestCoalescedDecideAsSequential; on one that does not, every decision
// makes its own call. Either way exactly what fits passes.
func TestCoalescedOnEveryStore(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) ports.Store
	}{
		{"reference", func(*testing.T) ports.Store { return conformance.NewReferenceStore() }},
		{"local", func(t *testing.T) ports.Store { return newLocal(t) }},
		{"redis", func(t *testing.T) ports.Store {
			srv := redistest.NewServer(t)
			s, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone, Time: redis.CallerTime})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			cfg := coalesceConfig([]app.WindowConfig{
				{Name: "burst", Limit: 11, Period: time.Second},
				{Name: "sustained", Limit: 15, Period: time.Minute, Algorithm: domain.GCRA},
			})
			inner := st.open(t)
			g := &gated{Store: inner, gate: make(chan struct{}), entered: make(chan struct{}, 64)}
			var store ports.Store = g
			_, repeats := inner.(ports.Repeater)
			if repeats {
				store = gatedRepeater{g}
			}
			co := newStoreRig(t, cfg, store)
			const n = 8
			reqs := make([]app.Request, n)
			for i := range reqs {
				reqs[i] = app.Request{Route: routeCoal, ClientIP: rawIP, User: rawUser, Cost: 3}
			}
			var got []domain.Decision
			if repeats {
				s := &repeaterStore{gate: g.gate, entered: g.entered}
				got = burst(t, co, s, reqs)
				twinCfg := cfg
				twinCfg.HMACSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" // keys of its own
				twin := newStoreRig(t, twinCfg, hidden{st.open(t)})
				for i, req := range reqs {
					want := twin.eval(t, req)
					assert.Equal(t, want, got[i], "caller %d", i)
				}
			} else {
				t.Logf("%s does not implement ports.Repeater: each decision makes its own call", st.name)
				close(g.gate)
				for _, req := range reqs {
					got = append(got, co.eval(t, req))
				}
			}
			allowed := 0
			for _, d := range got {
				if d.State == domain.Allowed {
					allowed++
				}
			}
			assert.Equal(t, 3, allowed, "11 per second at a cost of 3: three pass")
		})
	}
}

package drills

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// instantsTap records the instant of every admitted decision, and counts
// the decisions by source.
type instantsTap struct {
	mu                sync.Mutex
	admitted, refused []time.Time
	sources           map[domain.Source]int
}

func (r *instantsTap) RecordDecision(ctx context.Context, rec ports.DecisionRecord) error {
	// The store counts in whole microseconds: two instants 1 s - 0.5 µs
	// apart may be a whole second apart there.
	at := time.UnixMicro(rec.At.UnixMicro())
	r.mu.Lock()
	switch rec.Decision.State {
	case domain.Allowed:
		r.admitted = append(r.admitted, at)
	case domain.Throttled:
		if rec.Decision.Source == domain.SourcePrimary {
			// The store's own refusals: what it held then, allotments
			// out included (a cached refusal repeats an older answer).
			r.refused = append(r.refused, at)
		}
	}
	r.sources[rec.Decision.Source]++
	r.mu.Unlock()
	return nil
}

func (r *instantsTap) RecordTransition(context.Context, domain.StateChange, time.Time) error {
	return nil
}
func (r *instantsTap) RecordStoreCall(context.Context, ports.StoreCall)     {}
func (r *instantsTap) RecordReset(context.Context, ports.ResetRecord) error { return nil }

// fleetWindows are the drill's windows on one tenant: a sliding log and a
// GCRA window, both far below what the fleet sends.
var fleetWindows = []app.WindowConfig{
	{Name: "burst", Limit: 300, Period: time.Second},
	{Name: "sustained", Limit: 1000, Period: 5 * time.Second, Algorithm: domain.GCRA},
}

// TestAllotmentsFleetAdmittedInstants is issue 36's check of the admitted
// instants: four instances on one Redis (each its own store, as a fleet's
// are), eight workers each, send one tenant's requests as fast as they
// can for four seconds, far past its limits (300 a second in a sliding
// log, 1 000 per 5 s in GCRA); one instance stops dead after 1.5 s,
// holding whatever allotment it had, never given back. Every admitted
// request's instant is recorded (DecisionRecord.At): no sliding second
// holds more than 300, and the admitted sequence conforms to the GCRA
// window. The figures report how much of the limit the fleet used (what
// allotments cost in under-admission) and how many decisions were taken
// in process.
func TestAllotmentsFleetAdmittedInstants(t *testing.T) {
	addr := redistest.Standalone(t)
	cfg := app.Config{
		HMACSecret:    drillSecret,
		AllotmentHold: 200 * time.Millisecond,
		Profiles: []app.ProfileConfig{{Name: "fleet", Family: domain.FamilyRead, Routes: []string{routeRead},
			Windows: app.WindowsConfig{Tenant: fleetWindows}}},
	}
	const instances, workers, run, killAt = 4, 8, 4 * time.Second, 1500 * time.Millisecond
	taps := make([]*instantsTap, instances)
	lims := make([]*app.Limiter, instances)
	for i := range instances {
		store, err := redis.New(redis.Config{URL: "redis://" + addr, Time: redis.CallerTime})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		taps[i] = &instantsTap{sources: map[domain.Source]int{}}
		lims[i] = newLimiterDeps(t, cfg, app.Deps{Store: store, Fallback: newFallback(t), Recorder: taps[i]})
	}
	tenant := "fleet-" + time.Now().Format("150405.000000")
	start := time.Now()
	var dead atomic.Bool
	var wg sync.WaitGroup
	for i := range instances {
		for range workers {
			wg.Go(func() {
				req := app.Request{Route: routeRead, ClientIP: loopbackAddr, Tenant: tenant}
				for time.Since(start) < run {
					if i == instances-1 && time.Since(start) > killAt {
						dead.Store(true)
						return // stopped dead: its allotment is never given back
					}
					if _, err := lims[i].Evaluate(context.Background(), req); err != nil {
						t.Errorf("Evaluate: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	var admitted, refused []time.Time
	sources := map[domain.Source]int{}
	for _, tap := range taps {
		tap.mu.Lock()
		admitted = append(admitted, tap.admitted...)
		refused = append(refused, tap.refused...)
		for s, n := range tap.sources {
			sources[s] += n
		}
		tap.mu.Unlock()
	}
	slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
	worstLog, filled := slidingMax(admitted, time.Second)
	if worstLog > fleetWindows[0].Limit {
		t.Errorf("%d requests admitted within one second, past the sliding log's %d", worstLog, fleetWindows[0].Limit)
	}
	if at, ok := gcraConforms(admitted, fleetWindows[1].Limit, fleetWindows[1].Period); !ok {
		t.Errorf("the request admitted at %s does not conform to the GCRA window %d per %s", at.Sub(start), fleetWindows[1].Limit, fleetWindows[1].Period)
	}
	short := shortfall(admitted, refused, fleetWindows[0].Limit, time.Second)
	decisions := 0
	for _, n := range sources {
		decisions += n
	}
	if sources[domain.SourceAllotment] == 0 {
		t.Errorf("no decision was taken from an allotment (sources %v)", sources)
	}
	figure(t, "allotments.fleet", "%d instances × %d workers for %s, one stopped dead at %s: %d decisions (%v), %d admitted; at most %d admitted in a sliding second (limit %d), GCRA %d/%s conforms; whole seconds held %v admitted; a refusal of the store's found at most %d units free in its sliding second (units out in allotments)",
		instances, workers, run, killAt, decisions, sources, len(admitted), worstLog, fleetWindows[0].Limit, fleetWindows[1].Limit, fleetWindows[1].Period, filled, short)
}

// loopbackAddr is the drill's client address.
var loopbackAddr = loopback[0].Addr().Next()

// slidingMax returns the most instants of xs (sorted) in any span of
// period, and how full each whole period from the first instant on was
// (their admitted counts, as a list).
func slidingMax(xs []time.Time, period time.Duration) (int64, []int) {
	var worst int64
	j := 0
	for i, x := range xs {
		for !xs[j].After(x.Add(-period)) {
			j++
		}
		worst = max(worst, int64(i-j+1))
	}
	var filled []int
	if len(xs) > 0 {
		for s := xs[0]; !s.Add(period).After(xs[len(xs)-1]); s = s.Add(period) {
			n := 0
			for _, x := range xs {
				if !x.Before(s) && x.Before(s.Add(period)) {
					n++
				}
			}
			filled = append(filled, n)
		}
	}
	return worst, filled
}

// shortfall is the most units a refused request found free in its
// sliding window of limit per period, at its instant: the room the
// fleet's allotments held out of reach then (under-admission).
func shortfall(admitted, refused []time.Time, limit int64, period time.Duration) int64 {
	var worst int64
	for _, x := range refused {
		lo, _ := slices.BinarySearchFunc(admitted, x.Add(-period), func(a, b time.Time) int {
			if a.After(b) {
				return 1
			}
			return -1
		})
		hi, _ := slices.BinarySearchFunc(admitted, x, func(a, b time.Time) int {
			if a.After(b) {
				return 1
			}
			return -1
		})
		worst = max(worst, limit-int64(hi-lo))
	}
	return worst
}

// gcraConforms runs GCRA's virtual scheduling over xs (sorted), one unit
// each, for limit per period: the emission interval T = ⌊P/L⌋ µs, and each
// admission at a must leave TAT ≤ a + T·L. It returns the first instant
// that does not conform.
func gcraConforms(xs []time.Time, limit int64, period time.Duration) (time.Time, bool) {
	t := int64(period/time.Microsecond) / limit
	var tat int64
	for _, x := range xs {
		a := x.UnixMicro()
		tat = max(tat, a) + t
		if tat > a+t*limit {
			return x, false
		}
	}
	return time.Time{}, true
}

// TestResetReachesTheFleetsAllotments: two instances on one Redis each
// hold an allotment of one tenant's key set; a Reset through one drops
// both, the other's through the store's reset notice (ports.ResetNotifier:
// Redis pub/sub), and each instance's next decision is the store's,
// counted from zero. The figure is how long the notice took to reach the
// other instance.
func TestResetReachesTheFleetsAllotments(t *testing.T) {
	addr := redistest.Standalone(t)
	cfg := app.Config{
		HMACSecret: drillSecret,
		Profiles: []app.ProfileConfig{{Name: "fleet", Family: domain.FamilyRead, Routes: []string{routeRead},
			Windows: app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 50000, Period: time.Minute}}}}},
	}
	lims := make([]*app.Limiter, 2)
	taps := make([]*instantsTap, 2)
	for i := range lims {
		store, err := redis.New(redis.Config{URL: "redis://" + addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		taps[i] = &instantsTap{sources: map[domain.Source]int{}}
		lims[i] = newLimiterDeps(t, cfg, app.Deps{Store: store, Fallback: newFallback(t), Recorder: taps[i]})
	}
	tenant := "reset-" + time.Now().Format("150405.000000")
	req := app.Request{Route: routeRead, ClientIP: loopbackAddr, Tenant: tenant}
	// Each instance decides until it spends from an allotment.
	for i, l := range lims {
		waitFor(t, settle, fmt.Sprintf("instance %d spending from an allotment", i), func() bool {
			d, err := l.Evaluate(context.Background(), req)
			return err == nil && d.Source == domain.SourceAllotment
		})
	}
	before := lims[1].Allotments()
	if before.Held != 1 {
		t.Fatalf("the other instance holds %d allotments, want 1", before.Held)
	}
	reset := time.Now()
	if _, err := lims[0].Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: tenant, Actor: "drill"}); err != nil {
		t.Fatal(err)
	}
	d, err := lims[0].Evaluate(context.Background(), req)
	if err != nil || d.Source != domain.SourcePrimary || d.Remaining != 50000-1 {
		t.Errorf("the resetting instance after the reset: %v, source %s, remaining %d; want the store's, counted from zero", err, d.Source, d.Remaining)
	}
	var reached time.Duration
	waitFor(t, settle, "the other instance's allotment dropped by the notice", func() bool {
		if lims[1].Allotments().Dropped > before.Dropped {
			reached = time.Since(reset)
			return true
		}
		return false
	})
	if d, err := lims[1].Evaluate(context.Background(), req); err != nil || d.Source != domain.SourcePrimary {
		t.Errorf("the other instance after the notice: %v, source %s; want the store's", err, d.Source)
	}
	figure(t, "allotments.reset", "a Reset through one instance reached the other's allotment in %s (Redis pub/sub; without the notice, its hold of %s)", ms(reached), app.DefaultAllotmentHold)
}

package conformance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The cases of this file hold a store that implements the optional
// ports.Allotter to what allotments need of it (docs/adr/019): a
// reservation made ahead of the instant, under the windows
// domain.AllotWindow gives, leaves every instance free to admit its
// requests at any instant of the hold, and the requests admitted, at the
// instants they were admitted, never exceed a window in any period. They
// check the admitted instants themselves, not the store's counts. A store
// without the capability is reported in the test log, never failed for
// it.

// allotmentCases lists the cases of this file, in the suite's order.
func allotmentCases() []testCase {
	return []testCase{
		{name: "UnitsReservedAheadCountForEveryCaller", scripted: true, run: unitsReservedAheadCountForEveryCaller},
		{name: "AllotmentsNeverAdmitPastALimit", scripted: true, run: allotmentsNeverAdmitPastALimit},
		{name: "AllotmentsKeepALimitLoweredWhileTheyAreOut", scripted: true, run: allotmentsKeepALimitLoweredWhileTheyAreOut},
	}
}

// allotter returns the store's ports.Allotter, or nil, having said so in
// the test log, when it has none.
func (e *env) allotter() ports.Allotter {
	a, ok := e.store.(ports.Allotter)
	if !ok {
		e.t.Logf("the store does not implement ports.Allotter: allotments not checked")
		return nil
	}
	return a
}

// unitsReservedAheadCountForEveryCaller: units a ReserveAhead records at
// its instant plus ahead count for a caller at that instant and until they
// leave their window one period after the stamp, and they are no sign
// that the caller lags (rule S5 of docs/adr/009): a caller before the
// stamp still counts every unit of its own window, however far ahead the
// reservation went, even with no grace.
func unitsReservedAheadCountForEveryCaller(e *env) {
	a := e.allotter()
	if a == nil {
		return
	}
	const ahead = 900 * time.Millisecond
	log := domain.Limit{Key: e.key("log"), Window: window(domain.SlidingLog, 10, time.Second), Cost: 4}
	e.evaluate("4 units at t0", e.at(0), log)
	w, ok := domain.AllotWindow(log.Window, ahead)
	if !ok {
		e.t.Fatalf("AllotWindow refused a sliding log")
	}
	ahd := log
	ahd.Window, ahd.Cost = w, 5
	r, lease, err := a.ReserveAhead(e.ctx, e.at(700*time.Millisecond), ahead, []domain.Limit{ahd}, time.Minute)
	if err != nil {
		e.t.Fatalf("ReserveAhead: %v", err)
	}
	if !r.Allowed || !lease.Valid() {
		e.t.Fatalf("ReserveAhead at t0+700ms of 5 of 10 with 4 counted: %+v, lease %+v, want admitted", r, lease)
	}
	if want := e.at(1600 * time.Millisecond); !lease.At.Equal(want) {
		e.t.Errorf("ReserveAhead's lease At t0%+v, want its instant plus ahead, t0%+v", lease.At.Sub(e.t0), want.Sub(e.t0))
	}
	// At t0 + 800 ms: the 4 of t0 and the 5 stamped at t0 + 1.6 s.
	e.expectRemaining("a caller behind the units ahead", e.peek("peek at t0+800ms", e.at(800*time.Millisecond), log), 1)
	// At t0 + 1.1 s the 4 of t0 have left; the 5 count until t0 + 2.6 s.
	e.expectRemaining("after the first units left", e.peek("peek at t0+1.1s", e.at(1100*time.Millisecond), log), 5)
	e.expectRemaining("before the units ahead leave", e.peek("peek at t0+2.6s-1µs", e.at(2600*time.Millisecond-time.Microsecond), log), 5)
	e.expectRemaining("when the units ahead left", e.peek("peek at t0+2.6s", e.at(2600*time.Millisecond), log), 10)
}

// expectRemaining fails when r's remaining is not want.
func (e *env) expectRemaining(label string, r domain.Result, want int64) {
	e.t.Helper()
	if r.Remaining != want {
		e.t.Errorf("%s: remaining %d, want %d", label, r.Remaining, want)
	}
}

// allotSim is a fleet of instances taking allotments of one key set on a
// store, on a scripted timeline, and the instants each request was
// admitted at.
type allotSim struct {
	e      *env
	a      ports.Allotter
	rng    *rand.Rand
	limits []domain.Limit // the key set of one request, logs first
	hold   time.Duration
	// admitted are the instants (offsets from t0) of the requests
	// admitted, by the store or from an allotment.
	admitted []time.Duration
	// allotted counts the requests admitted from allotments, taken the
	// allotments and crashed the instances that dropped one.
	allotted, taken, crashed int
	inst                     []*allotInstance
}

// allotInstance is one instance of the fleet and the allotment it holds.
type allotInstance struct {
	lease  domain.Lease
	left   int           // requests it may still admit in process
	spent  int           // requests it admitted from the allotment
	m      int           // requests allotted
	end    time.Duration // the hold's end, from t0
	active bool
	limits []domain.Limit // the limits it decides with
}

// allotLimits returns the windows of an allotment of m requests of
// limits, held for hold, or false when a window cannot be allotted.
func allotLimits(limits []domain.Limit, m int, hold time.Duration) ([]domain.Limit, bool) {
	out := slices.Clone(limits)
	for i := range out {
		w, ok := domain.AllotWindow(out[i].Window, hold)
		if !ok || out[i].Cost*int64(m) > w.Limit {
			return nil, false
		}
		out[i].Window, out[i].Cost = w, out[i].Cost*int64(m)
	}
	return out, true
}

// step is one request of instance i at offset at: admitted from its
// allotment if it holds one, else, half the time, through a new
// allotment of 2 to 12 requests (this one among them), else by Evaluate.
func (s *allotSim) step(i int, at time.Duration) {
	e, in := s.e, s.inst[i]
	if in.active && at > in.end {
		s.giveBack(in, at)
	}
	if in.active && in.left > 0 {
		in.left--
		in.spent++
		s.allotted++
		s.admitted = append(s.admitted, at)
		return
	}
	if s.rng.IntN(2) == 0 {
		m := 2 + s.rng.IntN(11)
		if lim, ok := allotLimits(in.limits, m, s.hold); ok {
			r, lease, err := s.a.ReserveAhead(e.ctx, e.at(at), s.hold, lim, time.Minute)
			if err != nil {
				e.t.Fatalf("ReserveAhead at %s: %v", at, err)
			}
			if r.Allowed {
				s.taken++
				*in = allotInstance{lease: lease, left: m - 1, spent: 1, m: m, end: at + s.hold, active: true, limits: in.limits}
				s.allotted++
				s.admitted = append(s.admitted, at)
				return
			}
		}
	}
	r, err := e.store.Evaluate(e.ctx, e.at(at), in.limits)
	if err != nil {
		e.t.Fatalf("Evaluate at %s: %v", at, err)
	}
	if r.Allowed {
		s.admitted = append(s.admitted, at)
	}
}

// giveBack ends in's allotment at offset at: the requests it did not
// spend come back on its sliding logs (Settle at the spent cost; a GCRA
// window keeps what it took), unless the instance crashed (one time in
// five here), which gives nothing back.
func (s *allotSim) giveBack(in *allotInstance, at time.Duration) {
	in.active = false
	if s.rng.IntN(5) == 0 {
		s.crashed++
		return
	}
	var logs []domain.Limit
	for _, l := range in.limits {
		if l.Window.Algorithm == domain.SlidingLog {
			logs = append(logs, l)
		}
	}
	if len(logs) == 0 || in.spent == in.m {
		return
	}
	lim, _ := allotLimits(logs, in.m, s.hold)
	if _, err := s.a.Settle(s.e.ctx, s.e.at(at), in.lease, lim, int64(in.spent)*logs[0].Cost); err != nil {
		s.e.t.Fatalf("Settle of an allotment at %s: %v", at, err)
	}
}

// run drives the fleet for span, a request every 1-4 ms from an instance
// picked at random; change, when set, runs once at its offset.
func (s *allotSim) run(span time.Duration, changeAt time.Duration, change func()) {
	for at := time.Duration(0); at < span; at += time.Duration(1+s.rng.IntN(4)) * time.Millisecond {
		if change != nil && at >= changeAt {
			change()
			change = nil
		}
		s.step(s.rng.IntN(len(s.inst)), at)
	}
}

// checkWindows fails when the admitted requests, at their instants and
// of cost c each, exceed w in a period (from: the first instant a period
// may start at), for the sliding log (any span of P) or GCRA (the
// admitted sequence itself conforms: virtual scheduling) it is.
func checkAdmitted(e *env, label string, admitted []time.Duration, c int64, w domain.Window, from time.Duration) {
	e.t.Helper()
	xs := slices.Clone(admitted)
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	switch w.Algorithm {
	case domain.SlidingLog:
		j := 0
		for i, x := range xs {
			for xs[j] <= x-w.Period {
				j++
			}
			if xs[j] < from {
				continue
			}
			if n := int64(i-j+1) * c; n > w.Limit {
				e.t.Errorf("%s: %d units admitted in the period ending at %s (from %s), past the sliding log's %d", label, n, x, xs[j], w.Limit)
				return
			}
		}
	case domain.GCRA:
		t := w.EmissionMicros()
		var tat int64
		for _, x := range xs {
			a := int64(x / time.Microsecond)
			if a < int64(from/time.Microsecond) {
				continue
			}
			tat = max(tat, a) + c*t
			if tat > a+t*w.Limit {
				e.t.Errorf("%s: the request admitted at %s does not conform to the GCRA window %d per %s (its TAT %s ahead)", label, x, w.Limit, w.Period, time.Duration(tat-a)*time.Microsecond)
				return
			}
		}
	}
}

// allotmentsNeverAdmitPastALimit: three instances on one store take
// allotments of a key set (a sliding log, a GCRA window, both; cost 1 or
// 2), admit from them at random instants of their hold, give back what
// they did not spend (or crash, giving nothing back), and decide the
// rest at the store, on seeded timelines. At the instants they were
// admitted, the requests never exceed any window in any period.
func allotmentsNeverAdmitPastALimit(e *env) {
	if e.allotter() == nil {
		return
	}
	sets := []struct {
		name string
		ws   []domain.Window
		cost int64
	}{
		{"log", []domain.Window{window(domain.SlidingLog, 60, time.Second)}, 1},
		{"gcra", []domain.Window{window(domain.GCRA, 60, time.Second)}, 1},
		{"both, cost 2", []domain.Window{window(domain.SlidingLog, 90, 2*time.Second), window(domain.GCRA, 50, time.Second)}, 2},
	}
	for seed := range uint64(2) {
		for _, set := range sets {
			e.t.Run(fmt.Sprintf("%s-%d", set.name, seed), func(t tb) {
				sub := e.sub(t, fmt.Sprintf("%s-%d-", set.name, seed))
				s := newAllotSim(sub, seed, set.ws, set.cost, 300*time.Millisecond)
				s.run(4*time.Second, 0, nil)
				for _, l := range s.limits {
					checkAdmitted(sub, set.name, s.admitted, set.cost, l.Window, 0)
				}
				if s.taken == 0 || s.allotted <= s.taken {
					t.Errorf("%s: %d allotments taken, %d requests admitted from them: the timeline spent none in process", set.name, s.taken, s.allotted)
				}
				t.Logf("%s: %d requests admitted, %d from %d allotments (%d dropped by a crash)", set.name, len(s.admitted), s.allotted, s.taken, s.crashed)
			})
		}
	}
}

// newAllotSim makes a fleet of three on e's store, deciding windows ws at
// cost c on keys of their own, holding allotments for hold.
func newAllotSim(e *env, seed uint64, ws []domain.Window, c int64, hold time.Duration) *allotSim {
	var limits []domain.Limit
	for i, w := range ws {
		limits = append(limits, domain.Limit{Key: e.key(fmt.Sprint("k", i)), Window: w, Cost: c})
	}
	s := &allotSim{e: e, a: e.store.(ports.Allotter), rng: rand.New(rand.NewPCG(seed, 19)), limits: limits, hold: hold}
	for range 3 {
		s.inst = append(s.inst, &allotInstance{limits: limits})
	}
	return s
}

// allotmentsKeepALimitLoweredWhileTheyAreOut: midway, the fleet's
// windows drop to a lower limit (a deploy), while allotments taken under
// the old one are still out. Every period that starts once those have
// ended (one hold after the change) holds the new limit at most.
func allotmentsKeepALimitLoweredWhileTheyAreOut(e *env) {
	if e.allotter() == nil {
		return
	}
	for _, a := range algorithms {
		e.t.Run(a.String(), func(t tb) {
			sub := e.sub(t, a.String()+"-")
			const hold = 300 * time.Millisecond
			s := newAllotSim(sub, 7, []domain.Window{window(a, 80, time.Second)}, 1, hold)
			lowered := window(a, 30, time.Second)
			const changeAt = 2 * time.Second
			s.run(5*time.Second, changeAt, func() {
				for _, in := range s.inst {
					in.limits = slices.Clone(in.limits)
					in.limits[0].Window = lowered
				}
			})
			checkAdmitted(sub, "before and after the change", s.admitted, 1, s.limits[0].Window, 0)
			var after []time.Duration
			for _, x := range s.admitted {
				if x >= changeAt+hold {
					after = append(after, x)
				}
			}
			checkAdmitted(sub, "one hold after the change", after, 1, lowered, changeAt+hold)
		})
	}
}

package conformance

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Shared logs (docs/adr/015): the sliding-log windows of one principal
// may name one key, which is then one log serving each of them. An
// admitted request records its units there once; each window counts the
// log's units in its own period and answers exactly as it would from a
// log of its own holding the same units; the log keeps them for the
// longest period among its windows; Settle refunds or charges it once,
// Reset forgets every window of it.

// sharedLogCases are the cases of shared logs.
func sharedLogCases() []testCase {
	return []testCase{
		{name: "SharedLogRejectsWhatCannotShareAKey", run: sharedLogRejectsWhatCannotShareAKey},
		{name: "SharedLogResetForgetsEveryWindow", run: sharedLogResetForgetsEveryWindow},
		{name: "SharedLogRecordsEachRequestOnce", scripted: true, run: sharedLogRecordsEachRequestOnce},
		{name: "SharedLogKeepsUnitsForTheLongestPeriod", scripted: true, run: sharedLogKeepsUnitsForTheLongestPeriod},
		{name: sharedLogSettlesOnceName, scripted: true, run: sharedLogSettlesOnce},
		{name: sharedLogDifferentialName, scripted: true, run: sharedLogAnswersAsWindowsOfTheirOwn},
	}
}

// The shared-log cases that reserve and settle.
const (
	sharedLogSettlesOnceName  = "SharedLogSettlesOnce"
	sharedLogDifferentialName = "SharedLogAnswersAsWindowsOfTheirOwn"
)

// burstAndSustained returns the two windows of a principal, burst first
// as in a profile, and the limits of cost 1 that share key.
func burstAndSustained(key string, burst, sustained domain.Window) []domain.Limit {
	return []domain.Limit{limitOf(key, burst, 1), limitOf(key, sustained, 1)}
}

func sharedBurst(period time.Duration) domain.Window {
	return domain.Window{Name: "burst", Limit: 5, Period: period, Algorithm: domain.SlidingLog}
}

func sharedSustained(period time.Duration) domain.Window {
	return domain.Window{Name: "sustained", Limit: 8, Period: period, Algorithm: domain.SlidingLog}
}

// sharedLogRecordsEachRequestOnce: burst 5 per second and sustained 8 per
// 10 s on one key. Five requests pass at t0, the sixth is refused by the
// burst; at t0+1 s three more pass, and the next is refused by the
// sustained window, which still counts the five of t0. A refused request
// records nothing.
func sharedLogRecordsEachRequestOnce(e *env) {
	s := time.Second
	limits := burstAndSustained(e.key("p"), sharedBurst(s), sharedSustained(10*s))
	for i := range int64(5) {
		label := fmt.Sprintf("request %d at t0", i+1)
		r := e.evaluate(label, e.at(0), limits...)
		e.checkStatus(label+" burst", r.Status(0), status{allowed: true, remaining: 4 - i, resetAfter: s})
		e.checkStatus(label+" sustained", r.Status(1), status{allowed: true, remaining: 7 - i, resetAfter: 10 * s})
	}
	r := e.evaluate("request 6 at t0", e.at(0), limits...)
	e.checkStatus("request 6 at t0 burst", r.Status(0), status{remaining: 0, retryAfter: s, resetAfter: s})
	e.checkStatus("request 6 at t0 sustained", r.Status(1), status{allowed: true, remaining: 3, resetAfter: 10 * s})
	e.checkResult("request 6 at t0", r, outcome{limiting: 0, retryAfter: s, resetAfter: s})
	for i := range int64(3) {
		label := fmt.Sprintf("request %d at t0+1s", i+1)
		r := e.evaluate(label, e.at(s), limits...)
		e.checkStatus(label+" burst", r.Status(0), status{allowed: true, remaining: 4 - i, resetAfter: s})
		e.checkStatus(label+" sustained", r.Status(1), status{allowed: true, remaining: 2 - i, resetAfter: 10 * s})
	}
	// The oldest unit, recorded at t0, leaves the sustained window at
	// t0+10 s: 9 s on.
	r = e.evaluate("request 4 at t0+1s", e.at(s), limits...)
	e.checkStatus("request 4 at t0+1s burst", r.Status(0), status{allowed: true, remaining: 2, resetAfter: s})
	e.checkStatus("request 4 at t0+1s sustained", r.Status(1), status{remaining: 0, retryAfter: 9 * s, resetAfter: 10 * s})
	e.checkResult("request 4 at t0+1s", r, outcome{limiting: 1, retryAfter: 9 * s, resetAfter: 10 * s})
	// Nothing of the two refusals was recorded.
	r = e.peek("peek at t0+1s", e.at(s), limits...)
	e.checkStatus("peek at t0+1s burst", r.Status(0), status{allowed: true, remaining: 2, resetAfter: s})
	e.checkStatus("peek at t0+1s sustained", r.Status(1), status{remaining: 0, retryAfter: 9 * s, resetAfter: 10 * s})
	// At t0+10 s the five units of t0 left the sustained window, the three
	// of t0+1 s the burst.
	r = e.evaluate("request at t0+10s", e.at(10*s), limits...)
	e.checkStatus("request at t0+10s burst", r.Status(0), status{allowed: true, remaining: 4, resetAfter: s})
	e.checkStatus("request at t0+10s sustained", r.Status(1), status{allowed: true, remaining: 4, resetAfter: 10 * s})
}

// sharedLogKeepsUnitsForTheLongestPeriod: a unit recorded at t0 is still
// counted by the 10 s window at t0+9 s, although the 1 s window sharing
// its log stopped counting it long before, at requests that would have
// forgotten it had the log kept units for the shorter period only.
func sharedLogKeepsUnitsForTheLongestPeriod(e *env) {
	s := time.Second
	limits := burstAndSustained(e.key("p"), sharedBurst(s), sharedSustained(10*s))
	for i := range 5 {
		e.evaluate(fmt.Sprintf("setup %d at t0", i+1), e.at(0), limits...)
	}
	for i := range 3 {
		if r := e.evaluate(fmt.Sprintf("setup %d at t0+3s", i+1), e.at(3*s), limits...); !r.Allowed {
			e.t.Fatalf("setup %d at t0+3s: refused (limiting %d), want admitted", i+1, r.Limiting)
		}
	}
	r := e.evaluate("request at t0+9s", e.at(9*s), limits...)
	e.checkStatus("request at t0+9s burst", r.Status(0), status{allowed: true, remaining: 5})
	e.checkStatus("request at t0+9s sustained", r.Status(1), status{remaining: 0, retryAfter: s, resetAfter: 4 * s})
	e.checkResult("request at t0+9s", r, outcome{limiting: 1, retryAfter: s, resetAfter: 4 * s})
	r = e.evaluate("request at t0+10s", e.at(10*s), limits...)
	e.checkStatus("request at t0+10s sustained", r.Status(1), status{allowed: true, remaining: 4, resetAfter: 10 * s})
}

// sharedLogSettlesOnce: a reservation on a shared log is refunded and
// charged once, not once per window.
func sharedLogSettlesOnce(e *env) {
	if e.reserver() == nil {
		return
	}
	s, ms := time.Second, time.Millisecond
	key := e.key("p")
	limits := burstAndSustained(key, sharedBurst(s), sharedSustained(10*s))
	three := []domain.Limit{limitOf(key, limits[0].Window, 3), limitOf(key, limits[1].Window, 3)}
	r, a := e.reserve("reserve 3", e.at(0), time.Minute, three...)
	e.checkStatus("reserve 3 burst", r.Status(0), status{allowed: true, remaining: 2, resetAfter: s})
	e.checkStatus("reserve 3 sustained", r.Status(1), status{allowed: true, remaining: 5, resetAfter: 10 * s})
	e.settle("settle 3 at 1", e.at(100*ms), a, 1, domain.Settled, three...)
	e.remaining("after the refund of 2", e.at(100*ms), limits, 4, 7)
	_, b := e.reserve("reserve 1", e.at(200*ms), time.Minute, limits...)
	e.remaining("after reserving 1", e.at(200*ms), limits, 3, 6)
	e.settle("settle 1 at 3", e.at(300*ms), b, 3, domain.Settled, limits...)
	e.remaining("after the charge of 2", e.at(300*ms), limits, 1, 4)
	e.settle("settle again", e.at(300*ms), b, 0, domain.AlreadySettled, limits...)
	e.remaining("after the second settle", e.at(300*ms), limits, 1, 4)
}

// sharedLogResetForgetsEveryWindow: Reset of the shared key forgets its
// units for every window of it.
func sharedLogResetForgetsEveryWindow(e *env) {
	m := time.Minute
	key := e.key("p")
	limits := burstAndSustained(key, sharedBurst(m), sharedSustained(10*m))
	for i := range 5 {
		e.evaluate(fmt.Sprintf("setup %d", i+1), e.t0, limits...)
	}
	e.remaining("before the reset", e.t0, limits, 0, 3)
	e.reset("reset", key)
	e.remaining("after the reset", e.t0, limits, 5, 8)
	r := e.evaluate("after the reset", e.t0, limits...)
	e.checkStatus("after the reset burst", r.Status(0), status{allowed: true, remaining: 4, resetAfter: m})
	e.checkStatus("after the reset sustained", r.Status(1), status{allowed: true, remaining: 7, resetAfter: 10 * m})
}

// sharedLogRejectsWhatCannotShareAKey: only sliding-log windows of one
// cost, each a different window, share a key; any other request naming a
// key twice is a *domain.LimitError from every method, and writes
// nothing, not even on its other keys.
func sharedLogRejectsWhatCannotShareAKey(e *env) {
	m := time.Minute
	other, key := e.key("other"), e.key("p")
	log := sharedSustained(10 * m)
	free := limitOf(other, window(domain.SlidingLog, 3, 10*m), 1)
	rows := []struct {
		name   string
		second domain.Limit
	}{
		{"GCRAWindow", limitOf(key, window(domain.GCRA, 8, 10*m), 1)},
		{"CostsDiffer", limitOf(key, sharedBurst(m), 2)},
		{"SameWindowTwice", limitOf(key, log, 1)},
	}
	for _, rw := range rows {
		limits := []domain.Limit{free, limitOf(key, log, 1), rw.second}
		type call struct {
			op  string
			err error
		}
		_, errEvaluate := e.store.Evaluate(e.ctx, e.t0, limits)
		_, errPeek := e.store.Peek(e.ctx, e.t0, limits)
		calls := []call{{"Evaluate", errEvaluate}, {"Peek", errPeek}}
		if rp, ok := e.store.(ports.Repeater); ok {
			_, err := rp.EvaluateRepeated(e.ctx, e.t0, limits, 2)
			calls = append(calls, call{"EvaluateRepeated", err})
		}
		if rs, ok := e.store.(ports.Reserver); ok {
			_, _, err := rs.Reserve(e.ctx, e.t0, limits, m)
			calls = append(calls, call{"Reserve", err})
		}
		for _, c := range calls {
			if le, ok := isLimitError(c.err); !ok || le.Index != 2 {
				e.t.Errorf("%s: %s: error %v, want a *domain.LimitError for limit 2", rw.name, c.op, c.err)
			}
		}
		e.remaining(rw.name+": nothing written", e.t0, []domain.Limit{free, limitOf(key, log, 1)}, 3, 8)
	}
}

// The shapes of the differential case: a principal's burst and sustained
// windows, and the tenant-global window, whose key no other window
// shares. One shape's limits are all at most 1 024 (Redis' compact logs),
// the other's above (its sorted sets).
var sharedLogShapes = []struct {
	name                     string
	burst, sustained, global int64
	maxRepeat                int
	// seeds is how many timelines run: a large log costs the suite's
	// own slow stores (one timestamp per unit) far more per call.
	seeds uint64
}{
	{"Compact", 6, 20, 30, 4, 3},
	{"Large", 1100, 3000, 4000, 500, 1},
}

// sharedLogAnswersAsWindowsOfTheirOwn is the differential case: seeded
// random timelines of one request on two principals with shared logs and
// the tenant-global key, sent to the same store as the same request with
// a key per window. Every step (Evaluate, Peek, EvaluateRepeated,
// Reserve then Settle with refunds and charges; costs 1 to 3; refusals;
// windows of 1 s and 10 s) must get identical answers from both.
func sharedLogAnswersAsWindowsOfTheirOwn(e *env) {
	rp, _ := e.store.(ports.Repeater)
	rs, _ := e.store.(ports.Reserver)
	s := time.Second
	for _, sh := range sharedLogShapes {
		if e.compact && sh.name != "Compact" {
			continue
		}
		for seed := uint64(1); seed <= sh.seeds; seed++ {
			name := fmt.Sprintf("%s/seed%d", sh.name, seed)
			// One timeline after another: a store that serialises its
			// calls (the faulty ones) is not kept waiting by the others.
			e.t.Run(name, func(t tb) {
				e := e.sub(t, name+":")
				burst := domain.Window{Name: "burst", Limit: sh.burst, Period: s, Algorithm: domain.SlidingLog}
				sustained := domain.Window{Name: "sustained", Limit: sh.sustained, Period: 10 * s, Algorithm: domain.SlidingLog}
				global := domain.Window{Name: "global", Limit: sh.global, Period: 10 * s, Algorithm: domain.SlidingLog}
				shared := []domain.Limit{
					limitOf(e.key("a"), burst, 1), limitOf(e.key("a"), sustained, 1),
					limitOf(e.key("b"), burst, 1), limitOf(e.key("b"), sustained, 1),
					limitOf(e.key("g"), global, 1),
				}
				own := []domain.Limit{
					limitOf(e.key("a.burst"), burst, 1), limitOf(e.key("a.sustained"), sustained, 1),
					limitOf(e.key("b.burst"), burst, 1), limitOf(e.key("b.sustained"), sustained, 1),
					limitOf(e.key("g.global"), global, 1),
				}
				rng := rand.New(rand.NewPCG(seed, 17))
				now := time.Duration(0)
				for step := range 80 {
					// Most steps stay within a second, a few jump past the
					// sustained window's units.
					now += time.Duration(rng.IntN(400)) * time.Millisecond
					if rng.IntN(10) == 0 {
						now += time.Duration(rng.IntN(6)) * s
					}
					cost := int64(1 + rng.IntN(3))
					// Either principal alone, or both, with the global key.
					pick := [][]int{{0, 1, 4}, {2, 3, 4}, {0, 1, 2, 3, 4}}[rng.IntN(3)]
					a, b := make([]domain.Limit, len(pick)), make([]domain.Limit, len(pick))
					for i, j := range pick {
						a[i], b[i] = shared[j], own[j]
						a[i].Cost, b[i].Cost = cost, cost
					}
					at := e.at(now)
					label := fmt.Sprintf("seed %d step %d at t0+%v cost %d", seed, step, now, cost)
					switch op := rng.IntN(10); {
					case op < 4:
						e.sameResult(label+" evaluate", e.evaluate(label, at, a...), e.evaluate(label, at, b...))
					case op < 5:
						e.sameResult(label+" peek", e.peek(label, at, a...), e.peek(label, at, b...))
					case op < 8 && rp != nil:
						n := 1 + rng.IntN(sh.maxRepeat)
						ra, err := rp.EvaluateRepeated(e.ctx, at, a, n)
						if err != nil {
							e.t.Fatalf("%s: EvaluateRepeated(%d): %v", label, n, err)
						}
						rb, err := rp.EvaluateRepeated(e.ctx, at, b, n)
						if err != nil {
							e.t.Fatalf("%s: EvaluateRepeated(%d): %v", label, n, err)
						}
						if ra.Admitted != rb.Admitted {
							e.t.Errorf("%s: EvaluateRepeated(%d) admitted %d with shared logs, %d with a key per window", label, n, ra.Admitted, rb.Admitted)
						}
						for _, i := range []int{0, n - 1} {
							e.sameResult(fmt.Sprintf("%s repeated %d of %d", label, i, n), ra.For(i, a), rb.For(i, b))
						}
					case op < 10 && rs != nil:
						actual := int64(rng.IntN(7))
						ra, la := e.reserve(label, at, time.Minute, a...)
						rb, lb := e.reserve(label, at, time.Minute, b...)
						e.sameResult(label+" reserve", ra, rb)
						if !ra.Allowed || !rb.Allowed {
							continue
						}
						now += time.Duration(rng.IntN(300)) * time.Millisecond
						ga, err := rs.Settle(e.ctx, e.at(now), la, a, actual)
						if err != nil {
							e.t.Fatalf("%s: Settle(%d): %v", label, actual, err)
						}
						gb, err := rs.Settle(e.ctx, e.at(now), lb, b, actual)
						if err != nil {
							e.t.Fatalf("%s: Settle(%d): %v", label, actual, err)
						}
						if ga != gb {
							e.t.Errorf("%s: Settle(%d) = %v with shared logs, %v with a key per window", label, actual, ga, gb)
						}
						e.sameResult(label+fmt.Sprintf(" peek after settling at %d", actual), e.peek(label, e.at(now), a...), e.peek(label, e.at(now), b...))
					default:
						e.sameResult(label+" evaluate", e.evaluate(label, at, a...), e.evaluate(label, at, b...))
					}
					if e.t.Failed() {
						e.t.Fatalf("%s: the two layouts differ (seed %d): stopping at the first step that does", label, seed)
					}
				}
			})
		}
	}
}

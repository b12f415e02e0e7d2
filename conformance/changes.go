package conformance

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// The cases of this file hold a store to the state rules of docs/adr/009:
// a key's consumed units survive a change of its window's limit, period
// or algorithm (S1–S4, S6), and a sliding log keeps counting them for a
// caller whose instant lags the latest one by less than the store's grace
// (S5).

// changeCases lists the cases of this file, in the suite's order.
func changeCases() []testCase {
	return []testCase{
		{name: "GCRALimitChangeKeepsConsumedUnits", run: gcraLimitChangeKeepsConsumedUnits},
		{name: "WindowChangeAtOneInstantAdmitsExactlyWhatIsLeft", run: windowChangeAtOneInstantAdmitsExactlyWhatIsLeft},
		{name: "AlgorithmChangeKeepsConsumedUnits", run: algorithmChangeKeepsConsumedUnits},
		{name: "LimitChangeMidWindowKeepsOutstandingUnits", scripted: true, run: limitChangeMidWindowKeepsOutstandingUnits},
		{name: "AlgorithmChangeMidWindowKeepsOutstandingUnits", scripted: true, run: algorithmChangeMidWindowKeepsOutstandingUnits},
		{name: "OutOfOrderInstantsWithinGraceNeverOverAdmit", scripted: true, run: outOfOrderInstantsWithinGraceNeverOverAdmit},
	}
}

// spendUntilRefused evaluates l at now until it is refused or max requests
// were admitted, and returns how many were admitted.
func (e *env) spendUntilRefused(label string, now time.Time, l domain.Limit, max int) int {
	e.t.Helper()
	for i := range max {
		if r := e.evaluate(label, now, l); !r.Allowed {
			return i
		}
	}
	return max
}

func gcraLimitChangeKeepsConsumedUnits(e *env) {
	// The two examples of rule S1, on fresh keys at one instant.
	s := time.Second
	e.t.Run("Lowered", func(t tb) {
		t.Parallel()
		e := e.sub(t, "lowered:")
		k := e.key("a")
		// 10 per 10 s (T = 1 s), 8 spent: the TAT is 8 s ahead. Under 5
		// per 10 s (T = 2 s) the 8 outstanding units reach 16 s ahead,
		// past the capacity of 10 s: nothing more passes.
		e.consume("8 of 10 per 10s", e.t0, limitOf(k, window(domain.GCRA, 10, 10*s), 1), 8)
		l := limitOf(k, window(domain.GCRA, 5, 10*s), 1)
		e.checkStatus("peek under 5 per 10s", e.peek("peek", e.t0, l).Status(0), status{remaining: 0, retryAfter: 8 * s, resetAfter: 16 * s})
		if n := e.spendUntilRefused("under 5 per 10s", e.t0, l, 10); n != 0 {
			e.t.Errorf("8 units spent of 10 per 10s, then 5 per 10s at the same instant: %d more admitted, want 0", n)
		}
	})
	e.t.Run("Raised", func(t tb) {
		t.Parallel()
		e := e.sub(t, "raised:")
		k := e.key("a")
		// 5 per 10 s (T = 2 s), 5 spent: the TAT is 10 s ahead. Under 10
		// per 10 s (T = 1 s) the 5 outstanding units reach 5 s ahead:
		// exactly 5 more pass, the first with 4 remaining.
		e.consume("5 of 5 per 10s", e.t0, limitOf(k, window(domain.GCRA, 5, 10*s), 1), 5)
		l := limitOf(k, window(domain.GCRA, 10, 10*s), 1)
		e.checkStatus("first under 10 per 10s", e.evaluate("first", e.t0, l).Status(0), status{allowed: true, remaining: 4, resetAfter: 6 * s})
		if n := e.spendUntilRefused("under 10 per 10s", e.t0, l, 10); n != 4 {
			e.t.Errorf("5 units spent of 5 per 10s, then 10 per 10s at the same instant: %d more admitted after the first, want 4", n)
		}
	})
}

// change is one change of a key's window at one instant: spent units of
// cost spentCost under before, then requests of cost under after.
type change struct {
	before, after domain.Window
	spent, cost   int64
}

func (c change) String() string {
	return fmt.Sprintf("%s_%dper%v_to_%s_%dper%v_spent%d_cost%d", c.before.Algorithm, c.before.Limit, c.before.Period,
		c.after.Algorithm, c.after.Limit, c.after.Period, c.spent, c.cost)
}

// changesAtOneInstant is the matrix of windowChangeAtOneInstant...: limit
// raised and lowered, period lengthened and shortened, algorithm kept or
// changed, with cost 1 and more. Periods are minutes, so that nothing
// drains while a case runs on a store with its own clock.
func changesAtOneInstant() []change {
	m := time.Minute
	var out []change
	for _, from := range algorithms {
		for _, to := range algorithms {
			for _, w := range []struct {
				before, after domain.Window
				spent, cost   int64
			}{
				{window(from, 10, 10*m), window(to, 20, 10*m), 7, 3},  // limit raised
				{window(from, 20, 10*m), window(to, 10, 10*m), 7, 1},  // limit lowered
				{window(from, 20, 10*m), window(to, 10, 10*m), 14, 2}, // lowered below what was spent
				{window(from, 12, 6*m), window(to, 12, 12*m), 5, 2},   // period lengthened
				{window(from, 12, 12*m), window(to, 12, 6*m), 9, 1},   // period shortened
				{window(from, 7, 10*m), window(to, 9, 13*m), 6, 1},    // both, emission intervals truncated
				{window(from, 30, 10*m), window(to, 30, 10*m), 11, 4}, // nothing changed but the algorithm
				{window(from, 100, 50*m), window(to, 10, 5*m), 3, 3},  // same emission interval
			} {
				out = append(out, change{w.before, w.after, w.spent, w.cost})
			}
		}
	}
	return out
}

func windowChangeAtOneInstantAdmitsExactlyWhatIsLeft(e *env) {
	// At one instant nothing has drained: whatever the rules convert, the
	// spent units all stay outstanding, and the new window admits exactly
	// what its limit leaves, max(0, L − spent), in requests of its cost.
	// A store that forgets units admits more than L across the change; one
	// that inflates them admits less.
	for i, c := range changesAtOneInstant() {
		e.t.Run(c.String(), func(t tb) {
			t.Parallel()
			e := e.sub(t, "c"+strconv.Itoa(i)+":")
			k := e.key("a")
			if c.spent > 0 {
				if r := e.evaluate("spending", e.t0, limitOf(k, c.before, c.spent)); !r.Allowed {
					e.t.Fatalf("spending %d of %d on a fresh key: refused", c.spent, c.before.Limit)
				}
			}
			left := max(c.after.Limit-c.spent, 0)
			l := limitOf(k, c.after, c.cost)
			if r := e.peek("peek after the change", e.t0, l); r.Status(0).Remaining != left {
				e.t.Errorf("peek after the change: remaining %d, want %d", r.Status(0).Remaining, left)
			}
			got := e.spendUntilRefused("after the change", e.t0, l, int(c.after.Limit)+1)
			if want := int(left / c.cost); got != want {
				e.t.Errorf("%d units spent under %s %d per %v, then %s %d per %v at the same instant: %d requests of cost %d admitted, want %d (never more than the limit across the change)",
					c.spent, c.before.Algorithm, c.before.Limit, c.before.Period, c.after.Algorithm, c.after.Limit, c.after.Period, got, c.cost, want)
			}
		})
	}
}

func algorithmChangeKeepsConsumedUnits(e *env) {
	// Issue 20's example, both directions: 10 per 10 s, 6 units spent
	// under one algorithm, then the other at the same instant: exactly 4
	// more (a sliding log's units read as TAT = now + 6 T, S2; a GCRA
	// state's 6 outstanding units stamped at now, S3). Cost > 1: 2 units
	// at a time, then the last 2 would not fit a cost of 3.
	s := time.Second
	for _, from := range algorithms {
		to := domain.GCRA
		if from == domain.GCRA {
			to = domain.SlidingLog
		}
		e.t.Run(from.String()+"To"+to.String(), func(t tb) {
			t.Parallel()
			e := e.sub(t, from.String()+":")
			k := e.key("a")
			for range 2 {
				if r := e.evaluate("spending 3", e.t0, limitOf(k, window(from, 10, 10*s), 3)); !r.Allowed {
					e.t.Fatalf("spending 3 units under %s: refused", from)
				}
			}
			after := window(to, 10, 10*s)
			// Under GCRA (T = 1 s) the TAT reads 6 s ahead; under the log
			// the 6 units leave together at t0+10s.
			reset := 6 * s
			retry3 := s
			if to == domain.SlidingLog {
				reset, retry3 = 10*s, 10*s
			}
			e.checkStatus("peek cost 2", e.peek("peek", e.t0, limitOf(k, after, 2)).Status(0), status{allowed: true, remaining: 4, resetAfter: reset})
			if to == domain.GCRA {
				reset = 8 * s
			}
			e.checkStatus("cost 2", e.evaluate("cost 2", e.t0, limitOf(k, after, 2)).Status(0), status{allowed: true, remaining: 2, resetAfter: reset})
			e.checkStatus("cost 3 with 2 left", e.evaluate("cost 3", e.t0, limitOf(k, after, 3)).Status(0), status{remaining: 2, retryAfter: retry3, resetAfter: reset})
			if n := e.spendUntilRefused("cost 1", e.t0, limitOf(k, after, 1), 10); n != 2 {
				e.t.Errorf("after cost 2 and a refused cost 3: %d more of cost 1 admitted, want 2 (10 in all)", n)
			}
		})
	}
}

func limitChangeMidWindowKeepsOutstandingUnits(e *env) {
	s, ms := time.Second, time.Millisecond
	rows := []struct {
		name          string
		before        domain.Window
		spent         int
		at            time.Duration
		after         domain.Window
		want          int           // admitted at `at`
		then          time.Duration // a later instant
		wantThen      int           // admitted then
		thenRemaining int64         // peeked remaining after it
	}{
		// GCRA 10 per 10 s, 8 at t0: 3 s later the TAT is 5 s ahead, 5
		// units outstanding at 2 s each under 5 per 10 s: full. At t0+5s
		// 3 units (6 s): 2 more.
		{"GCRALowered", window(domain.GCRA, 10, 10*s), 8, 3 * s, window(domain.GCRA, 5, 10*s), 0, 5 * s, 2, 0},
		// GCRA 5 per 10 s, 5 at t0: 3 s later the TAT is 7 s ahead, 4 units
		// (a partly drained one counts whole) at 1 s under 10 per 10 s.
		// The TAT is then t0+13s, under T = 1 s: the full quota at t0+13s.
		{"GCRARaised", window(domain.GCRA, 5, 10*s), 5, 3 * s, window(domain.GCRA, 10, 10*s), 6, 13 * s, 10, 0},
		// GCRA 4 per 4 s (T 1 s) full at t0; at t0+1.5s under 4 per 8 s
		// (T 2 s): ⌈2.5⌉ = 3 units, 6 s of 8: 1 more.
		{"GCRAPeriodLengthened", window(domain.GCRA, 4, 4*s), 4, 1500 * ms, window(domain.GCRA, 4, 8*s), 1, 9500 * ms, 4, 0},
		// Sliding log 10 per 10 s, 6 at t0: at t0+5s they still count
		// under 5 per 10 s; they leave at t0+10s.
		{"SlidingLogLowered", window(domain.SlidingLog, 10, 10*s), 6, 5 * s, window(domain.SlidingLog, 5, 10*s), 0, 10 * s, 5, 0},
		// Sliding log 5 per 10 s full at t0; at t0+6s under 5 per 5 s the
		// units of t0 are outside (t0+1s, t0+6s]: 5 more.
		{"SlidingLogPeriodShortened", window(domain.SlidingLog, 5, 10*s), 5, 6 * s, window(domain.SlidingLog, 5, 5*s), 5, 11*s - time.Microsecond, 0, 0},
	}
	for _, rw := range rows {
		e.t.Run(rw.name, func(t tb) {
			t.Parallel()
			e := e.sub(t, rw.name+":")
			k := e.key("a")
			e.consume("spending", e.t0, limitOf(k, rw.before, 1), rw.spent)
			l := limitOf(k, rw.after, 1)
			if n := e.spendUntilRefused("after the change", e.at(rw.at), l, 20); n != rw.want {
				e.t.Errorf("%d spent at t0 under %d per %v, then %d per %v at t0+%v: %d admitted, want %d", rw.spent, rw.before.Limit, rw.before.Period, rw.after.Limit, rw.after.Period, rw.at, n, rw.want)
			}
			if n := e.spendUntilRefused("later", e.at(rw.then), l, 20); n != rw.wantThen {
				e.t.Errorf("then at t0+%v: %d admitted, want %d", rw.then, n, rw.wantThen)
			}
			if r := e.peek("peek", e.at(rw.then), l); r.Status(0).Remaining != rw.thenRemaining {
				e.t.Errorf("peek at t0+%v: remaining %d, want %d", rw.then, r.Status(0).Remaining, rw.thenRemaining)
			}
		})
	}
}

func algorithmChangeMidWindowKeepsOutstandingUnits(e *env) {
	s, ms := time.Second, time.Millisecond
	logW, gcraW := window(domain.SlidingLog, 10, 10*s), window(domain.GCRA, 10, 10*s)
	e.t.Run("SlidingLogToGCRA", func(t tb) {
		t.Parallel()
		e := e.sub(t, "l2g:")
		k := e.key("a")
		// 6 units at t0 still count at t0+5s: TAT = now + 6 s (S2); cost 2
		// twice, then 2 left.
		e.consume("spending", e.t0, limitOf(k, logW, 3), 2)
		e.checkStatus("cost 2 at t0+5s", e.evaluate("cost 2", e.at(5*s), limitOf(k, gcraW, 2)).Status(0), status{allowed: true, remaining: 2, resetAfter: 8 * s})
		e.checkStatus("cost 2 at t0+5s", e.evaluate("cost 2", e.at(5*s), limitOf(k, gcraW, 2)).Status(0), status{allowed: true, remaining: 0, resetAfter: 10 * s})
		e.checkStatus("cost 1 at t0+5s", e.evaluate("cost 1", e.at(5*s), limitOf(k, gcraW, 1)).Status(0), status{remaining: 0, retryAfter: s, resetAfter: 10 * s})
	})
	e.t.Run("GCRAToSlidingLog", func(t tb) {
		t.Parallel()
		e := e.sub(t, "g2l:")
		k := e.key("a")
		// 6 GCRA units at t0 (T 1 s): at t0+2.5s the TAT is 3.5 s ahead,
		// ⌈3.5⌉ = 4 units stamped at t0+2.5s (S3): 6 more, and all 10
		// leave at t0+12.5s.
		e.consume("spending", e.t0, limitOf(k, gcraW, 2), 3)
		at := 2500 * ms
		e.checkStatus("peek at t0+2.5s", e.peek("peek", e.at(at), limitOf(k, logW, 1)).Status(0), status{allowed: true, remaining: 6, resetAfter: 10 * s})
		if n := e.spendUntilRefused("cost 2 at t0+2.5s", e.at(at), limitOf(k, logW, 2), 10); n != 3 {
			e.t.Errorf("cost 2 at t0+2.5s after 6 GCRA units at t0: %d admitted, want 3", n)
		}
		e.checkStatus("at t0+12.5s-1µs", e.evaluate("cost 1", e.at(at+10*s-time.Microsecond), limitOf(k, logW, 1)).Status(0),
			status{remaining: 0, retryAfter: time.Microsecond, resetAfter: time.Microsecond})
		e.checkStatus("at t0+12.5s", e.evaluate("cost 10", e.at(at+10*s), limitOf(k, logW, 10)).Status(0),
			status{allowed: true, remaining: 0, resetAfter: 10 * s})
	})
}

// graceStep is the largest step back the out-of-order case takes: the 6 s
// of issue 21's example, or less for a store with a shorter grace.
const graceStep = 6 * time.Second

func outOfOrderInstantsWithinGraceNeverOverAdmit(e *env) {
	s := time.Second
	step := min(e.grace, graceStep)
	if step > 0 {
		// Instants are whole microseconds; a step must be less than the
		// grace.
		step = min(step, e.grace-time.Microsecond)
	}
	w := window(domain.SlidingLog, 2, 10*s)
	e.t.Run("Issue21Example", func(t tb) {
		t.Parallel()
		e := e.sub(t, "example:")
		// Limit 2 per 10 s: 2 units at t0, 1 at t0+10s (those of t0 have
		// left), then a caller `step` behind: the units of t0 are inside
		// its window (t0+10s−step−10s, t0+10s−step] and must still count.
		l := limitOf(e.key("a"), w, 1)
		e.consume("2 at t0", e.t0, l, 2)
		e.consume("1 at t0+10s", e.at(10*s), l, 1)
		back := 10*s - step
		r := e.evaluate("a caller behind", e.at(back), l)
		if step > 0 && r.Allowed {
			e.t.Errorf("2 per 10s, 2 units at t0, 1 at t0+10s, then one at t0+%v (%v behind, within the store's grace of %v): allowed, want refused (3 units in (t0−%v, t0+%v])", back, step, e.grace, step, back)
		}
	})
	e.t.Run("Jitter", func(t tb) {
		t.Parallel()
		e := e.sub(t, "jitter:")
		// A clock that moves forward with steps back of less than `step`:
		// no window of the log may ever hold more than its limit.
		l := limitOf(e.key("a"), window(domain.SlidingLog, 3, 10*s), 1)
		var admitted []time.Duration
		var latest, now time.Duration
		x := uint32(2463534242)
		next := func() uint32 { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x }
		for range 200 {
			switch r := next() % 4; {
			case r == 0 && step >= time.Millisecond:
				now = latest - time.Duration(next()%uint32(step/time.Millisecond))*time.Millisecond
			default:
				now = latest + time.Duration(next()%2500)*time.Millisecond
			}
			latest = max(latest, now)
			if r := e.evaluate("jitter", e.at(now), l); r.Allowed {
				admitted = append(admitted, now)
			}
		}
		for _, end := range admitted {
			n := 0
			for _, a := range admitted {
				if a > end-10*s && a <= end {
					n++
				}
			}
			if n > 3 {
				e.t.Fatalf("3 per 10s with instants out of order by less than %v: %d units admitted in (t0+%v, t0+%v]", step, n, end-10*s, end)
			}
		}
		if len(admitted) < 20 {
			e.t.Errorf("only %d of 200 requests admitted over about %v: the log does not slide", len(admitted), latest)
		}
	})
}

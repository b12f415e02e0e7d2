package conformance

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Requests: costs, keys, several limits all or nothing, what a decision
// reports, Peek and Reset.

func costConsumesThatManyUnits(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		m := time.Minute
		w := window(a, 10, 10*m)
		// SlidingLog: every unit leaves at t0+10min. GCRA: T = 1min, so
		// the theoretical arrival time moves by cost minutes.
		reset := func(units int64) time.Duration {
			if a == domain.GCRA {
				return time.Duration(units) * m
			}
			return 10 * m
		}
		retry := 10 * m
		if a == domain.GCRA {
			retry = m
		}
		e.replay(e.key("a"), w, []step{
			{at: 0, cost: 3, want: status{allowed: true, remaining: 7, resetAfter: reset(3)}},
			{at: 0, cost: 4, want: status{allowed: true, remaining: 3, resetAfter: reset(7)}},
			{at: 0, cost: 4, want: status{remaining: 3, retryAfter: retry, resetAfter: reset(7)}},
			{at: 0, cost: 3, want: status{allowed: true, remaining: 0, resetAfter: reset(10)}},
			{at: 0, cost: 1, want: status{remaining: 0, retryAfter: retry, resetAfter: reset(10)}},
		})
	})
}

func costThatDoesNotFitIsRefusedWhileSmallerCostPasses(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		m := time.Minute
		w := window(a, 10, 10*m)
		// Sliding log: the 8 units of t0 leave together at t0+10min. GCRA
		// (T = 1min): after 8 units the arrival time is t0+8min; cost 5
		// would push it to t0+13min, 3min past the capacity, cost 3 1min
		// past it.
		reset8, reset10, retry5, retry3 := 10*m, 10*m, 10*m, 10*m
		if a == domain.GCRA {
			reset8, reset10, retry5, retry3 = 8*m, 10*m, 3*m, 1*m
		}
		e.replay(e.key("a"), w, []step{
			{at: 0, cost: 8, want: status{allowed: true, remaining: 2, resetAfter: reset8}},
			{at: 0, cost: 5, want: status{remaining: 2, retryAfter: retry5, resetAfter: reset8}},
			{at: 0, cost: 3, want: status{remaining: 2, retryAfter: retry3, resetAfter: reset8}},
			{at: 0, cost: 2, want: status{allowed: true, remaining: 0, resetAfter: reset10}},
		})
	})
}

func keysAreIsolated(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		w := window(a, 2, 10*time.Minute)
		a1, a2, b := e.key("a"), e.key("a2"), e.key("b")
		e.consume("exhausting a", e.t0, limitOf(a1, w, 1), 2)
		if r := e.evaluate("a after its limit", e.t0, limitOf(a1, w, 1)); r.Allowed {
			e.t.Errorf("a after its limit: allowed, want refused")
		}
		for _, k := range []string{a2, b} {
			r := e.peek("peek "+k, e.t0, limitOf(k, w, 1))
			e.checkStatus("peek "+k+" (untouched)", r.Status(0), status{allowed: true, remaining: 2})
			r = e.evaluate("evaluate "+k, e.t0, limitOf(k, w, 2))
			if !r.Allowed || r.Remaining != 0 {
				e.t.Errorf("evaluate %s cost 2: allowed %t remaining %d, want allowed with 0 remaining", k, r.Allowed, r.Remaining)
			}
		}
	})
}

// nineWindows returns the windows of a nine-limit request: even indices
// SlidingLog 3 per 10min, odd ones GCRA 3 per 9min (T = 3min).
func nineWindows() []domain.Window {
	ws := make([]domain.Window, 9)
	for i := range ws {
		if i%2 == 0 {
			ws[i] = window(domain.SlidingLog, 3, 10*time.Minute)
		} else {
			ws[i] = window(domain.GCRA, 3, 9*time.Minute)
		}
	}
	return ws
}

func allOrNothingAcrossNineKeys(e *env) {
	m := time.Minute
	ws := nineWindows()
	// Status of a limit after one unit consumed at t0 on a fresh key.
	afterOne := func(w domain.Window) status {
		if w.Algorithm == domain.GCRA {
			return status{allowed: true, remaining: 2, resetAfter: 3 * m}
		}
		return status{allowed: true, remaining: 2, resetAfter: 10 * m}
	}
	// Status of an exhausted key asked for one more unit at t0.
	exhausted := func(w domain.Window) status {
		if w.Algorithm == domain.GCRA {
			return status{remaining: 0, retryAfter: 3 * m, resetAfter: 9 * m}
		}
		return status{remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m}
	}
	// The refusing key first, in the middle and last: a store that commits
	// while it checks is caught whichever way it walks the keys.
	for _, refusing := range []int{0, 4, 8} {
		e.t.Run("RefusingKey"+strconv.Itoa(refusing), func(t tb) {
			t.Parallel()
			e := e.sub(t, "r"+strconv.Itoa(refusing)+":")
			limits := make([]domain.Limit, 9)
			for i := range limits {
				limits[i] = limitOf(e.key("k"+strconv.Itoa(i)), ws[i], 1)
			}
			e.consume("exhausting the refusing key", e.t0, limits[refusing], 3)
			for try := range 3 {
				label := "refused request, try " + strconv.Itoa(try+1)
				r := e.evaluate(label, e.t0, limits...)
				want := exhausted(ws[refusing])
				e.checkResult(label, r, outcome{allowed: false, limiting: refusing, remaining: 0, retryAfter: want.retryAfter, resetAfter: want.resetAfter})
				for i, st := range r.Statuses() {
					if i == refusing {
						e.checkStatus(label+": refusing limit", st, want)
						continue
					}
					// Before consumption: full quota, nothing to reset.
					e.checkStatus(label+": limit "+strconv.Itoa(i), st, status{allowed: true, remaining: 3})
				}
			}
			// Nothing was consumed on the eight others: Peek sees a full
			// quota, and they admit a request of their own as fresh keys.
			var others []domain.Limit
			var otherWs []domain.Window
			for i, l := range limits {
				if i == refusing {
					continue
				}
				r := e.peek("peek key "+strconv.Itoa(i), e.t0, l)
				e.checkStatus("peek key "+strconv.Itoa(i)+" after the refusals", r.Status(0), status{allowed: true, remaining: 3})
				others, otherWs = append(others, l), append(otherWs, ws[i])
			}
			r := e.evaluate("the eight others", e.t0, others...)
			e.checkResult("the eight others", r, outcome{allowed: true, limiting: 0, remaining: 2, resetAfter: afterOne(otherWs[0]).resetAfter})
			for i, st := range r.Statuses() {
				e.checkStatus("the eight others: limit "+strconv.Itoa(i), st, afterOne(otherWs[i]))
			}
		})
	}
}

func slidingLogAndGCRAInOneRequest(e *env) {
	// A burst window (SlidingLog, 2 per 1s) and a sustained one (GCRA, 5
	// per 10s, T = 2s) on two keys of one request.
	burst := window(domain.SlidingLog, 2, time.Second)
	burst.Name = domain.WindowBurst
	sustained := window(domain.GCRA, 5, 10*time.Second)
	sustained.Name = domain.WindowSustained
	b, su := e.key("burst"), e.key("sustained")
	s := time.Second
	type row struct {
		at        time.Duration
		agg       outcome
		burst, su status
	}
	rows := []row{
		{0, outcome{allowed: true, limiting: 0, remaining: 1, resetAfter: s},
			status{allowed: true, remaining: 1, resetAfter: s}, status{allowed: true, remaining: 4, resetAfter: 2 * s}},
		{0, outcome{allowed: true, limiting: 0, remaining: 0, resetAfter: s},
			status{allowed: true, remaining: 0, resetAfter: s}, status{allowed: true, remaining: 3, resetAfter: 4 * s}},
		// The burst window refuses; the sustained one would admit, and
		// keeps its 3 units.
		{0, outcome{allowed: false, limiting: 0, remaining: 0, retryAfter: s, resetAfter: s},
			status{remaining: 0, retryAfter: s, resetAfter: s}, status{allowed: true, remaining: 3, resetAfter: 4 * s}},
		{1 * s, outcome{allowed: true, limiting: 0, remaining: 1, resetAfter: s},
			status{allowed: true, remaining: 1, resetAfter: s}, status{allowed: true, remaining: 2, resetAfter: 5 * s}},
		{1 * s, outcome{allowed: true, limiting: 0, remaining: 0, resetAfter: s},
			status{allowed: true, remaining: 0, resetAfter: s}, status{allowed: true, remaining: 1, resetAfter: 7 * s}},
		{2 * s, outcome{allowed: true, limiting: 0, remaining: 1, resetAfter: s},
			status{allowed: true, remaining: 1, resetAfter: s}, status{allowed: true, remaining: 1, resetAfter: 8 * s}},
		{2 * s, outcome{allowed: true, limiting: 0, remaining: 0, resetAfter: s},
			status{allowed: true, remaining: 0, resetAfter: s}, status{allowed: true, remaining: 0, resetAfter: 10 * s}},
		// Now the sustained window refuses while the burst one has room.
		{3 * s, outcome{allowed: false, limiting: 1, remaining: 0, retryAfter: s, resetAfter: 9 * s},
			status{allowed: true, remaining: 2}, status{remaining: 0, retryAfter: s, resetAfter: 9 * s}},
		{4 * s, outcome{allowed: true, limiting: 1, remaining: 0, resetAfter: 10 * s},
			status{allowed: true, remaining: 1, resetAfter: s}, status{allowed: true, remaining: 0, resetAfter: 10 * s}},
	}
	for i, rw := range rows {
		label := stepLabel(i, "evaluate", step{at: rw.at, cost: 1})
		r := e.evaluate(label, e.at(rw.at), limitOf(b, burst, 1), limitOf(su, sustained, 1))
		e.checkResult(label, r, rw.agg)
		e.checkStatus(label+": burst", r.Status(0), rw.burst)
		e.checkStatus(label+": sustained", r.Status(1), rw.su)
	}
}

func refusalReportsLongestRetryAfter(e *env) {
	m := time.Minute
	a := limitOf(e.key("a"), window(domain.SlidingLog, 1, 10*m), 1)
	b := limitOf(e.key("b"), window(domain.SlidingLog, 1, 5*m), 1)
	c := limitOf(e.key("c"), window(domain.SlidingLog, 1, 10*m), 1)
	d := limitOf(e.key("d"), window(domain.GCRA, 1, 20*m), 1)
	free := limitOf(e.key("free"), window(domain.SlidingLog, 5, 10*m), 1)
	// c is filled before a: on a store with its own clock a's unit is no
	// older than c's, so a waits at least as long as c, and the longer
	// wait agrees with the tie-break by index of a scripted clock.
	for _, l := range []domain.Limit{c, a, b, d} {
		e.consume("exhausting "+l.Key, e.t0, l, 1)
	}
	// b waits 5min, a and c 10min each (a tie: the lowest index wins), and
	// free admits.
	r := e.evaluate("[b a c free]", e.t0, b, a, c, free)
	e.checkResult("[b a c free]", r, outcome{allowed: false, limiting: 1, remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	e.checkStatus("[b a c free]: b", r.Status(0), status{remaining: 0, retryAfter: 5 * m, resetAfter: 5 * m})
	e.checkStatus("[b a c free]: a", r.Status(1), status{remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	e.checkStatus("[b a c free]: c", r.Status(2), status{remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	e.checkStatus("[b a c free]: free", r.Status(3), status{allowed: true, remaining: 5})
	// GCRA 1 per 20min after one unit: the arrival time is t0+20min, so
	// one more unit waits 20min, longer than any sliding log here.
	r = e.evaluate("[free b d a]", e.t0, free, b, d, a)
	e.checkResult("[free b d a]", r, outcome{allowed: false, limiting: 2, remaining: 0, retryAfter: 20 * m, resetAfter: 20 * m})
	e.checkStatus("[free b d a]: d", r.Status(2), status{remaining: 0, retryAfter: 20 * m, resetAfter: 20 * m})
	// Refusals consumed nothing on free.
	r = e.peek("free afterwards", e.t0, free)
	e.checkStatus("free afterwards", r.Status(0), status{allowed: true, remaining: 5})
}

func allowedReportsLeastRemaining(e *env) {
	m := time.Minute
	f := limitOf(e.key("f"), window(domain.SlidingLog, 5, 10*m), 1)
	g := limitOf(e.key("g"), window(domain.SlidingLog, 3, 10*m), 1)
	h := limitOf(e.key("h"), window(domain.GCRA, 3, 3*m), 1) // T = 1min
	// g and h both end with 2 left: a tie, the lowest index limits, and
	// the result's reset-after is g's, not h's.
	r := e.evaluate("[f g h]", e.t0, f, g, h)
	e.checkResult("[f g h]", r, outcome{allowed: true, limiting: 1, remaining: 2, resetAfter: 10 * m})
	e.checkStatus("[f g h]: f", r.Status(0), status{allowed: true, remaining: 4, resetAfter: 10 * m})
	e.checkStatus("[f g h]: g", r.Status(1), status{allowed: true, remaining: 2, resetAfter: 10 * m})
	e.checkStatus("[f g h]: h", r.Status(2), status{allowed: true, remaining: 2, resetAfter: 1 * m})
	r = e.evaluate("[f h]", e.t0, f, h)
	e.checkResult("[f h]", r, outcome{allowed: true, limiting: 1, remaining: 1, resetAfter: 2 * m})
	e.checkStatus("[f h]: f", r.Status(0), status{allowed: true, remaining: 3, resetAfter: 10 * m})
	e.checkStatus("[f h]: h", r.Status(1), status{allowed: true, remaining: 1, resetAfter: 2 * m})
}

func peekConsumesNothing(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		m := time.Minute
		w := window(a, 3, 9*m)
		x, y := limitOf(e.key("x"), w, 1), limitOf(e.key("y"), w, 2)
		for i := range 10 {
			r := e.peek("peek [x y]", e.t0, x, y)
			if !r.Allowed || r.Remaining != 3 {
				e.t.Fatalf("peek %d of [x y] on fresh keys: allowed %t remaining %d, want allowed with 3 remaining", i+1, r.Allowed, r.Remaining)
			}
		}
		r := e.evaluate("evaluate x after the peeks", e.t0, x)
		if !r.Allowed || r.Remaining != 2 {
			e.t.Errorf("evaluate x after 10 peeks: allowed %t remaining %d, want allowed with 2 remaining", r.Allowed, r.Remaining)
		}
		e.consume("exhausting x", e.t0, x, 2)
		for i := range 5 {
			r := e.peek("peek exhausted x", e.t0, x)
			if r.Allowed || r.Remaining != 0 {
				e.t.Fatalf("peek %d of exhausted x: allowed %t remaining %d, want refused with 0 remaining", i+1, r.Allowed, r.Remaining)
			}
		}
		// The refused peeks pushed nothing back. Sliding log: x's units
		// leave at t0+9min. GCRA (T = 3min): x's arrival time is
		// t0+9min, so a unit is back at t0+3min.
		retry := 9 * m
		if a == domain.GCRA {
			retry = 3 * m
		}
		r = e.evaluate("x after the refused peeks", e.t0, x)
		e.checkStatus("x after the refused peeks", r.Status(0), status{remaining: 0, retryAfter: retry, resetAfter: 9 * m})
		r = e.peek("y after everything", e.t0, y)
		e.checkStatus("y after everything", r.Status(0), status{allowed: true, remaining: 3})
	})
}

func peekAgreesWithEvaluate(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		s := time.Second
		w := window(a, 5, 10*s)
		other := limitOf(e.key("other"), window(domain.SlidingLog, 100, 10*s), 1)
		key := e.key("a")
		plan := []struct {
			at   time.Duration
			cost int64
		}{
			{0, 1}, {0, 2}, {1 * s, 1}, {1 * s, 2}, {1 * s, 1}, {2 * s, 1},
			{4 * s, 3}, {6 * s, 1}, {10 * s, 2}, {11 * s, 5}, {11 * s, 1}, {30 * s, 5},
		}
		for i, p := range plan {
			limits := []domain.Limit{limitOf(key, w, p.cost), other}
			label := stepLabel(i, "peek then evaluate", step{at: p.at, cost: p.cost})
			pr := e.peek(label, e.at(p.at), limits...)
			er := e.evaluate(label, e.at(p.at), limits...)
			if pr.Allowed != er.Allowed {
				e.t.Errorf("%s: Peek allowed %t, Evaluate allowed %t", label, pr.Allowed, er.Allowed)
				continue
			}
			if pr.RetryAfter != er.RetryAfter || (!er.Allowed && pr.Limiting != er.Limiting) {
				e.t.Errorf("%s: Peek said retry after %v (limiting %d), Evaluate %v (limiting %d)", label, pr.RetryAfter, pr.Limiting, er.RetryAfter, er.Limiting)
			}
			// Peek counts before consumption; an allowed Evaluate after.
			want := pr.Status(0).Remaining
			if er.Allowed {
				want -= p.cost
			}
			if er.Status(0).Remaining != want {
				e.t.Errorf("%s: Peek said %d remaining before cost %d, Evaluate %d after (allowed %t)", label, pr.Status(0).Remaining, p.cost, er.Status(0).Remaining, er.Allowed)
			}
		}
	})
}

func resetForgetsOnlyThatKey(e *env) {
	m := time.Minute
	sl := window(domain.SlidingLog, 3, 10*m)
	gc := window(domain.GCRA, 3, 9*m) // T = 3min
	// Keys that share a prefix or hold a glob character: a Reset by
	// pattern or prefix would touch them.
	a := limitOf(e.key("a"), sl, 1)
	ab := limitOf(e.key("ab"), sl, 1)
	star := limitOf(e.key("a*"), sl, 1)
	g := limitOf(e.key("g"), gc, 1)
	g2 := limitOf(e.key("g:2"), gc, 1)
	for _, l := range []domain.Limit{a, ab, star, g, g2} {
		e.consume("filling "+l.Key, e.t0, l, 2)
	}
	e.reset("reset a", a.Key)
	e.reset("reset g", g.Key)
	for _, l := range []domain.Limit{a, g} {
		r := e.peek("peek "+l.Key+" after its reset", e.t0, l)
		e.checkStatus("peek "+l.Key+" after its reset", r.Status(0), status{allowed: true, remaining: 3})
	}
	e.checkStatus("peek ab (not reset)", e.peek("peek ab", e.t0, ab).Status(0), status{allowed: true, remaining: 1, resetAfter: 10 * m})
	e.checkStatus("peek a* (not reset)", e.peek("peek a*", e.t0, star).Status(0), status{allowed: true, remaining: 1, resetAfter: 10 * m})
	e.checkStatus("peek g:2 (not reset)", e.peek("peek g:2", e.t0, g2).Status(0), status{allowed: true, remaining: 1, resetAfter: 6 * m})
	// A reset key counts afresh.
	e.consume("refilling a", e.t0, a, 3)
	e.consume("refilling g", e.t0, g, 3)
	if r := e.evaluate("a beyond its limit", e.t0, a); r.Allowed {
		e.t.Errorf("a beyond its limit after a reset: allowed, want refused")
	}
}

func resetOfUnknownKeyIsNoError(e *env) {
	e.reset("reset of a key never used", e.key("never-used"))
	e.reset("reset twice", e.key("never-used"))
	l := limitOf(e.key("a"), window(domain.GCRA, 2, 2*time.Minute), 1)
	e.consume("using a", e.t0, l, 1)
	e.reset("reset a", l.Key)
	e.reset("reset a again", l.Key)
	e.checkStatus("peek a", e.peek("peek a", e.t0, l).Status(0), status{allowed: true, remaining: 2})
}

// forgetReportsWhatTheKeyHeld: a ports.Forgetter says whether the key
// held state, so that a reset can report what it deleted: true for a key
// that counts units, of either algorithm; false for a key never written,
// only peeked, already forgotten or reset. It forgets as Reset does, that
// key only. A store without it is not failed for it.
func forgetReportsWhatTheKeyHeld(e *env) {
	f, ok := e.store.(ports.Forgetter)
	if !ok {
		e.t.Logf("the store does not implement ports.Forgetter: nothing to check")
		return
	}
	forget := func(label, key string, want bool) {
		e.t.Helper()
		got, err := f.Forget(e.ctx, key)
		if err != nil {
			e.t.Fatalf("%s: Forget(%q): unexpected error: %v", label, key, err)
		}
		if got != want {
			e.t.Errorf("%s: Forget(%q) reports %v, want %v", label, key, got, want)
		}
	}
	m := time.Minute
	sl := window(domain.SlidingLog, 3, 10*m)
	a, ab := limitOf(e.key("a"), sl, 1), limitOf(e.key("ab"), sl, 1)
	g := limitOf(e.key("g"), window(domain.GCRA, 3, 9*m), 1)
	forget("a key never written", e.key("never-used"), false)
	e.peek("peeking a before any write", e.t0, a)
	forget("a key only peeked", a.Key, false)
	for _, l := range []domain.Limit{a, ab, g} {
		e.consume("filling "+l.Key, e.t0, l, 2)
	}
	forget("a sliding log counting 2 units", a.Key, true)
	e.checkStatus("peek a after Forget", e.peek("peek a", e.t0, a).Status(0), status{allowed: true, remaining: 3})
	forget("a forgotten twice", a.Key, false)
	forget("a GCRA key counting 2 units", g.Key, true)
	e.checkStatus("peek g after Forget", e.peek("peek g", e.t0, g).Status(0), status{allowed: true, remaining: 3})
	e.consume("refilling a", e.t0, a, 1)
	e.reset("reset a", a.Key)
	forget("a after its Reset", a.Key, false)
	// The key alone: ab, which a prefix would match, still counts.
	e.checkStatus("peek ab (not forgotten)", e.peek("peek ab", e.t0, ab).Status(0), status{allowed: true, remaining: 1, resetAfter: 10 * m})
	forget("ab, forgotten at last", ab.Key, true)
}

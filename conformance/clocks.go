package conformance

import (
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Clocks out of order: instants going backwards or jittering never
// admit more than a limit.

func clockBackwardsNeverAdmitsMoreThanLimit(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		s := time.Second
		l := limitOf(e.key("a"), window(a, 5, 10*s), 1)
		e.consume("filling at t0", e.t0, l, 5)
		for _, back := range []time.Duration{-time.Microsecond, -s, -10 * s, -11 * s, -time.Hour} {
			label := "evaluate at t0" + back.String()
			if r := e.evaluate(label, e.at(back), l); r.Allowed {
				e.t.Errorf("%s after the limit was reached at t0: allowed, want refused", label)
			}
			label = "peek at t0" + back.String()
			if r := e.peek(label, e.at(back), l); r.Allowed {
				e.t.Errorf("%s after the limit was reached at t0: allowed, want refused", label)
			}
		}
		if r := e.evaluate("evaluate at t0 again", e.t0, l); r.Allowed {
			e.t.Errorf("evaluate at t0 after the backward calls: allowed, want refused")
		}
		// Time moving forward again still works: the key is not wedged.
		// Sliding log: the t0 units leave at t0+10s. GCRA (T = 2s): the
		// arrival time is t0+10s, so the full quota is back then.
		r := e.evaluate("evaluate at t0+10s", e.at(10*s), l)
		e.checkStatus("evaluate at t0+10s", r.Status(0), status{allowed: true, remaining: 4, resetAfter: resetAfterOne(a, 10*s, 5)})
	})
}

// resetAfterOne is the reset-after of a fresh key after one unit: a sliding
// log waits for the unit to leave, GCRA for one emission interval.
func resetAfterOne(a domain.Algorithm, period time.Duration, limit int64) time.Duration {
	if a == domain.GCRA {
		return period / time.Duration(limit)
	}
	return period
}

func clockJitterNeverAdmitsMoreThanLimit(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		// 5 per 10s (GCRA: T = 2s) and instants jumping back and forth
		// within 1.8s, less than one emission interval: no unit may come
		// back, so no more than 5 may be admitted in total.
		ms := time.Millisecond
		l := limitOf(e.key("a"), window(a, 5, 10*time.Second), 1)
		offsets := []time.Duration{900 * ms, -900 * ms, 500 * ms, -500 * ms, 0, 900 * ms, -900 * ms, 100 * ms, -100 * ms, 899 * ms,
			-899 * ms, 0, 300 * ms, -300 * ms, 900 * ms, -900 * ms, 0, 700 * ms, -700 * ms, 0}
		admitted := 0
		for _, off := range offsets {
			if r := e.evaluate("evaluate at t0"+off.String(), e.at(off), l); r.Allowed {
				admitted++
			}
		}
		// Every instant lies within one period of every other, so a
		// sliding log counts all of them: exactly 5.
		if admitted > 5 {
			e.t.Errorf("admitted %d of %d requests with a clock jumping back and forth, want at most 5", admitted, len(offsets))
		}
		if a == domain.SlidingLog && admitted != 5 {
			e.t.Errorf("sliding log admitted %d of %d requests within one period, want exactly 5", admitted, len(offsets))
		}
	})
}

package conformance

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// cases lists the properties every store must have, each named for what it
// proves. Expected values are worked out by hand from the semantics in
// domain (SlidingLog: units inside (now-Period, now]; GCRA: emission
// interval T = Period/Limit truncated to the microsecond) and written down
// literally, so a store that merely shares a bug with the domain package
// still fails.
//
// The cases that are not scripted send every request at t0 and use
// windows of minutes, so they hold on a store that reads its own clock:
// no unit can leave a window, or come back to GCRA, while they run.
func cases() []testCase {
	list := []testCase{
		// At one instant: these hold on any clock.
		{name: "SlidingLogAdmitsExactlyLimit", run: slidingLogAdmitsExactlyLimit},
		{name: "GCRAAdmitsExactlyLimitAsBurst", run: gcraAdmitsExactlyLimitAsBurst},
		{name: "GCRABurstCapacityUsesTruncatedEmissionInterval", run: gcraBurstCapacityUsesTruncatedEmissionInterval},
		{name: "GCRAHandlesTheLargestWindow", run: gcraHandlesTheLargestWindow},
		{name: "CostConsumesThatManyUnits", run: costConsumesThatManyUnits},
		{name: "CostThatDoesNotFitIsRefusedWhileSmallerCostPasses", run: costThatDoesNotFitIsRefusedWhileSmallerCostPasses},
		{name: "KeysAreIsolated", run: keysAreIsolated},
		{name: "AllOrNothingAcrossNineKeys", run: allOrNothingAcrossNineKeys},
		{name: "RefusalReportsLongestRetryAfter", run: refusalReportsLongestRetryAfter},
		{name: "AllowedReportsLeastRemaining", run: allowedReportsLeastRemaining},
		{name: "PeekConsumesNothing", run: peekConsumesNothing},
		{name: "ResetForgetsOnlyThatKey", run: resetForgetsOnlyThatKey},
		{name: "ResetOfUnknownKeyIsNoError", run: resetOfUnknownKeyIsNoError},
		{name: "CancelledContextIsAnErrorAndConsumesNothing", run: cancelledContextIsAnErrorAndConsumesNothing},
		{name: "ExpiredDeadlineIsAnError", run: expiredDeadlineIsAnError},
		{name: "InvalidRequestIsRejectedAndConsumesNothing", run: invalidRequestIsRejectedAndConsumesNothing},
		{name: "RequestsAtTheBoundsAreAccepted", run: requestsAtTheBoundsAreAccepted},
		{name: "ConcurrentRequestsOnOneKeyAdmitExactlyLimit", run: concurrentRequestsOnOneKeyAdmitExactlyLimit},
		{name: "ConcurrentRequestsAcrossTwoKeysAreAllOrNothing", run: concurrentRequestsAcrossTwoKeysAreAllOrNothing},
		{name: "LimitsSliceIsNotKeptAfterTheCall", run: limitsSliceIsNotKeptAfterTheCall},
		{name: "ClosedStoreReturnsErrStoreClosed", run: closedStoreReturnsErrStoreClosed},

		// Timelines: they move the caller's clock.
		{name: "SlidingLogUnitsLeaveExactlyOnePeriodLater", scripted: true, run: slidingLogUnitsLeaveExactlyOnePeriodLater},
		{name: "SlidingLogRetryAfterWaitsForEnoughOldestUnits", scripted: true, run: slidingLogRetryAfterWaitsForEnoughOldestUnits},
		{name: "SlidingLogResetAfterIsWhenNewestUnitLeaves", scripted: true, run: slidingLogResetAfterIsWhenNewestUnitLeaves},
		{name: "GCRARetryAfterUsesTruncatedEmissionInterval", scripted: true, run: gcraRetryAfterUsesTruncatedEmissionInterval},
		{name: "GCRARefillsOneUnitPerEmissionInterval", scripted: true, run: gcraRefillsOneUnitPerEmissionInterval},
		{name: "GCRAEmissionIntervalIsAtLeastOneMicrosecond", scripted: true, run: gcraEmissionIntervalIsAtLeastOneMicrosecond},
		{name: "MinPeriodWindowsRefillAfterOneMillisecond", scripted: true, run: minPeriodWindowsRefillAfterOneMillisecond},
		{name: "SlidingLogAndGCRAInOneRequest", scripted: true, run: slidingLogAndGCRAInOneRequest},
		{name: "PeekAgreesWithEvaluate", scripted: true, run: peekAgreesWithEvaluate},
		{name: "ClockBackwardsNeverAdmitsMoreThanLimit", scripted: true, run: clockBackwardsNeverAdmitsMoreThanLimit},
		{name: "ClockJitterNeverAdmitsMoreThanLimit", scripted: true, run: clockJitterNeverAdmitsMoreThanLimit},

		// Beyond ports.Store: stores of one fleet.
		{name: "TwoStoresShareTheirCounts", shared: true, run: twoStoresShareTheirCounts},
	}
	// Changes of a key's window, and instants out of order (changes.go);
	// the optional ports.Reserver (reservations.go); shared logs
	// (sharedlogs.go) and the optional ports.Repeater (repeated.go).
	list = append(list, changeCases()...)
	list = append(list, reservationCases()...)
	list = append(list, sharedLogCases()...)
	return append(list, testCase{name: "RepeatedRequestsAnswerAsSequentialOnes", run: repeatedRequestsAnswerAsSequentialOnes})
}

// algorithms lists both algorithms, for properties that hold for each.
var algorithms = []domain.Algorithm{domain.SlidingLog, domain.GCRA}

func window(a domain.Algorithm, limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: a}
}

func limitOf(key string, w domain.Window, cost int64) domain.Limit {
	return domain.Limit{Key: key, Window: w, Cost: cost}
}

// forEachAlgorithm runs f once per algorithm, as parallel subtests named
// after it, each with its own keys (the namespace is shared; the key names
// differ).
func (e *env) forEachAlgorithm(f func(e *env, a domain.Algorithm)) {
	for _, a := range algorithms {
		e.t.Run(a.String(), func(t tb) {
			t.Parallel()
			f(e.sub(t, a.String()+":"), a)
		})
	}
}

func slidingLogAdmitsExactlyLimit(e *env) {
	m := time.Minute
	w := window(domain.SlidingLog, 5, 10*m)
	full := status{allowed: false, remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m}
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, want: status{allowed: true, remaining: 4, resetAfter: 10 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 3, resetAfter: 10 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 10 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 10 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 10 * m}},
		{at: 0, cost: 1, want: full},
		{at: 0, cost: 1, want: full},
	})
}

func gcraAdmitsExactlyLimitAsBurst(e *env) {
	// T = 10min/5 = 2min: the i-th unit of a burst pushes the theoretical
	// arrival time to t0+2i min.
	m := time.Minute
	w := window(domain.GCRA, 5, 10*m)
	full := status{allowed: false, remaining: 0, retryAfter: 2 * m, resetAfter: 10 * m}
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, want: status{allowed: true, remaining: 4, resetAfter: 2 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 3, resetAfter: 4 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 6 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 8 * m}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 10 * m}},
		{at: 0, cost: 1, want: full},
		{at: 0, cost: 1, want: full},
	})
}

func slidingLogUnitsLeaveExactlyOnePeriodLater(e *env) {
	// A unit admitted at t counts inside (now-10s, now]: it still counts at
	// t+10s-1µs and is gone at exactly t+10s.
	w := window(domain.SlidingLog, 3, 10*time.Second)
	s := time.Second
	us := time.Microsecond
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 10 * s}},
		{at: 2 * s, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 10 * s}},
		{at: 4 * s, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 10 * s}},
		{at: 10*s - us, cost: 1, peek: true, want: status{remaining: 0, retryAfter: us, resetAfter: 4*s + us}},
		{at: 10*s - us, cost: 1, want: status{remaining: 0, retryAfter: us, resetAfter: 4*s + us}},
		{at: 10 * s, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 10 * s}},
		{at: 11 * s, cost: 1, want: status{remaining: 0, retryAfter: s, resetAfter: 9 * s}},
		{at: 12 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 1, resetAfter: 8 * s}},
		{at: 14 * s, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 10 * s}},
		{at: 24*s - us, cost: 1, peek: true, want: status{allowed: true, remaining: 2, resetAfter: us}},
		{at: 24 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 3}},
		{at: time.Hour, cost: 3, want: status{allowed: true, remaining: 0, resetAfter: 10 * s}},
	})
}

func slidingLogRetryAfterWaitsForEnoughOldestUnits(e *env) {
	// Units at t0 (2), t0+1s (1), t0+3s (2), limit 5 per 10s: cost 3 at
	// t0+5s needs the 2 units of t0 and the unit of t0+1s to leave, at
	// t0+11s.
	w := window(domain.SlidingLog, 5, 10*time.Second)
	s := time.Second
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 2, want: status{allowed: true, remaining: 3, resetAfter: 10 * s}},
		{at: 1 * s, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 10 * s}},
		{at: 3 * s, cost: 2, want: status{allowed: true, remaining: 0, resetAfter: 10 * s}},
		{at: 5 * s, cost: 3, want: status{remaining: 0, retryAfter: 6 * s, resetAfter: 8 * s}},
		{at: 5 * s, cost: 2, want: status{remaining: 0, retryAfter: 5 * s, resetAfter: 8 * s}},
		{at: 5 * s, cost: 1, want: status{remaining: 0, retryAfter: 5 * s, resetAfter: 8 * s}},
		{at: 10 * s, cost: 3, peek: true, want: status{remaining: 2, retryAfter: s, resetAfter: 3 * s}},
		{at: 10 * s, cost: 3, want: status{remaining: 2, retryAfter: s, resetAfter: 3 * s}},
		{at: 11 * s, cost: 3, want: status{allowed: true, remaining: 0, resetAfter: 10 * s}},
	})
}

func slidingLogResetAfterIsWhenNewestUnitLeaves(e *env) {
	w := window(domain.SlidingLog, 10, 10*time.Second)
	s := time.Second
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, peek: true, want: status{allowed: true, remaining: 10}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 9, resetAfter: 10 * s}},
		{at: 3 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 9, resetAfter: 7 * s}},
		{at: 3 * s, cost: 2, want: status{allowed: true, remaining: 7, resetAfter: 10 * s}},
		{at: 9 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 7, resetAfter: 4 * s}},
		{at: 10 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 8, resetAfter: 3 * s}},
		{at: 13 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 10}},
	})
}

func gcraRetryAfterUsesTruncatedEmissionInterval(e *env) {
	// 3 per 2s: T = 2000000µs/3 = 666666µs (truncated, not rounded), so the
	// burst capacity is 1999998µs and the 4th unit waits exactly 666666µs.
	w := window(domain.GCRA, 3, 2*time.Second)
	us := time.Microsecond
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 666666 * us}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 1333332 * us}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 1999998 * us}},
		{at: 0, cost: 1, want: status{remaining: 0, retryAfter: 666666 * us, resetAfter: 1999998 * us}},
		{at: 666665 * us, cost: 1, want: status{remaining: 0, retryAfter: us, resetAfter: 1333333 * us}},
		{at: 666666 * us, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 1999998 * us}},
		{at: 666666 * us, cost: 1, want: status{remaining: 0, retryAfter: 666666 * us, resetAfter: 1999998 * us}},
	})
}

func gcraRefillsOneUnitPerEmissionInterval(e *env) {
	// 3 per 3s: T = 1s. After a burst of 3 at t0 the theoretical arrival
	// time is t0+3s; one unit comes back every second.
	w := window(domain.GCRA, 3, 3*time.Second)
	s := time.Second
	ms := time.Millisecond
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 3, want: status{allowed: true, remaining: 0, resetAfter: 3 * s}},
		{at: 1 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 1, resetAfter: 2 * s}},
		{at: 2500 * ms, cost: 1, peek: true, want: status{allowed: true, remaining: 2, resetAfter: 500 * ms}},
		{at: 3 * s, cost: 1, peek: true, want: status{allowed: true, remaining: 3}},
		{at: 1 * s, cost: 2, peek: true, want: status{remaining: 1, retryAfter: s, resetAfter: 2 * s}},
		{at: 1 * s, cost: 2, want: status{remaining: 1, retryAfter: s, resetAfter: 2 * s}},
		{at: 1 * s, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 3 * s}},
		{at: 10 * s, cost: 3, want: status{allowed: true, remaining: 0, resetAfter: 3 * s}},
		// The arrival time is t0+13s: one unit is back at t0+11s, not a
		// microsecond earlier.
		{at: 11*s - time.Microsecond, cost: 1, want: status{remaining: 0, retryAfter: time.Microsecond, resetAfter: 2*s + time.Microsecond}},
		{at: 11 * s, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 3 * s}},
		{at: 11 * s, cost: 1, want: status{remaining: 0, retryAfter: s, resetAfter: 3 * s}},
	})
}

func gcraEmissionIntervalIsAtLeastOneMicrosecond(e *env) {
	// 2000 per 1ms: 1000µs/2000 truncates to 0, and T is clamped to 1µs,
	// so the burst capacity is 2000µs and each unit then costs 1µs.
	w := window(domain.GCRA, 2000, time.Millisecond)
	us := time.Microsecond
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 2000, want: status{allowed: true, remaining: 0, resetAfter: 2000 * us}},
		{at: 0, cost: 1, want: status{remaining: 0, retryAfter: us, resetAfter: 2000 * us}},
		{at: 5 * us, cost: 5, want: status{allowed: true, remaining: 0, resetAfter: 2000 * us}},
		{at: 5 * us, cost: 1, want: status{remaining: 0, retryAfter: us, resetAfter: 2000 * us}},
	})
}

func gcraBurstCapacityUsesTruncatedEmissionInterval(e *env) {
	// 7 per minute: T = 60000000µs/7 = 8571428µs (truncated; rounding
	// would give 8571429µs), so a burst of 7 leaves the arrival time
	// 59999996µs ahead, 4µs short of the period.
	us := time.Microsecond
	e.replay(e.key("a"), window(domain.GCRA, 7, time.Minute), []step{
		{at: 0, cost: 7, want: status{allowed: true, remaining: 0, resetAfter: 59999996 * us}},
		{at: 0, cost: 1, want: status{remaining: 0, retryAfter: 8571428 * us, resetAfter: 59999996 * us}},
	})
}

func gcraHandlesTheLargestWindow(e *env) {
	// MaxLimit units per MaxPeriod: T = 31622400000000µs / 2^30 = 29450µs
	// (truncated). The arithmetic stays exact in every store (Lua numbers
	// included) far beyond today's instants. 2^20 more units wait 2^20 T,
	// about 8.6 hours: exact in T, and far beyond a case's duration.
	w := window(domain.GCRA, domain.MaxLimit, domain.MaxPeriod)
	us := time.Microsecond
	capacity := 29450 * us * domain.MaxLimit
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: domain.MaxLimit, want: status{allowed: true, remaining: 0, resetAfter: capacity}},
		{at: 0, cost: 1 << 20, want: status{remaining: 0, retryAfter: 29450 * us << 20, resetAfter: capacity}},
	})
}

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

func cancelledContextIsAnErrorAndConsumesNothing(e *env) {
	m := time.Minute
	x := limitOf(e.key("x"), window(domain.SlidingLog, 3, 10*m), 1)
	y := limitOf(e.key("y"), window(domain.GCRA, 3, 9*m), 1)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.store.Evaluate(ctx, e.t0, []domain.Limit{x, y}); !errors.Is(err, context.Canceled) {
		e.t.Errorf("Evaluate with a cancelled context: error %v, want one wrapping context.Canceled", err)
	}
	if _, err := e.store.Peek(ctx, e.t0, []domain.Limit{x, y}); !errors.Is(err, context.Canceled) {
		e.t.Errorf("Peek with a cancelled context: error %v, want one wrapping context.Canceled", err)
	}
	for _, l := range []domain.Limit{x, y} {
		r := e.peek("peek after the cancelled calls", e.t0, l)
		e.checkStatus("peek "+l.Key+" after the cancelled calls", r.Status(0), status{allowed: true, remaining: 3})
	}
	e.consume("using x", e.t0, x, 1)
	if err := e.store.Reset(ctx, x.Key); !errors.Is(err, context.Canceled) {
		e.t.Errorf("Reset with a cancelled context: error %v, want one wrapping context.Canceled", err)
	}
}

func expiredDeadlineIsAnError(e *env) {
	x := limitOf(e.key("x"), window(domain.GCRA, 3, 9*time.Minute), 1)
	ctx, cancel := context.WithDeadline(e.ctx, e.t0.Add(-time.Hour))
	defer cancel()
	expired := func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, domain.ErrStoreTimeout)
	}
	if _, err := e.store.Evaluate(ctx, e.t0, []domain.Limit{x}); !expired(err) {
		e.t.Errorf("Evaluate past its deadline: error %v, want one wrapping context.DeadlineExceeded or domain.ErrStoreTimeout", err)
	}
	if _, err := e.store.Peek(ctx, e.t0, []domain.Limit{x}); !expired(err) {
		e.t.Errorf("Peek past its deadline: error %v, want one wrapping context.DeadlineExceeded or domain.ErrStoreTimeout", err)
	}
	if err := e.store.Reset(ctx, x.Key); !expired(err) {
		e.t.Errorf("Reset past its deadline: error %v, want one wrapping context.DeadlineExceeded or domain.ErrStoreTimeout", err)
	}
	e.checkStatus("peek after the expired calls", e.peek("peek", e.t0, x).Status(0), status{allowed: true, remaining: 3})
}

func invalidRequestIsRejectedAndConsumesNothing(e *env) {
	s := time.Second
	good := window(domain.SlidingLog, 3, 10*s)
	ok := limitOf(e.key("ok"), good, 1)
	other := limitOf(e.key("other"), window(domain.GCRA, 3, 9*s), 1)
	withWindow := func(w domain.Window) []domain.Limit {
		return []domain.Limit{ok, limitOf(e.key("bad"), w, 1)}
	}
	withCost := func(cost int64) []domain.Limit {
		return []domain.Limit{ok, limitOf(e.key("bad"), good, cost)}
	}
	seventeen := make([]domain.Limit, domain.MaxLimits+1)
	for i := range seventeen {
		seventeen[i] = limitOf(e.key("many"+strconv.Itoa(i)), good, 1)
	}
	seventeen[0] = ok
	long := "conf:{" + e.ns + "}:"
	long += strings.Repeat("x", domain.MaxKeyLen+1-len(long))
	rows := []struct {
		name   string
		limits []domain.Limit
		index  int
		field  string
	}{
		{"NoLimits", nil, -1, "limits"},
		{"EmptyLimits", []domain.Limit{}, -1, "limits"},
		{"SeventeenKeys", seventeen, -1, "limits"},
		{"ZeroLimit", withWindow(window(domain.SlidingLog, 0, 10*s)), 1, "limit"},
		{"NegativeLimit", withWindow(window(domain.GCRA, -1, 10*s)), 1, "limit"},
		{"LimitAboveMaxLimit", withWindow(window(domain.GCRA, domain.MaxLimit+1, 10*s)), 1, "limit"},
		{"SlidingLogLimitAboveMaxSlidingLogLimit", withWindow(window(domain.SlidingLog, domain.MaxSlidingLogLimit+1, 10*s)), 1, "limit"},
		{"ZeroPeriod", withWindow(window(domain.SlidingLog, 3, 0)), 1, "period"},
		{"NegativePeriod", withWindow(window(domain.GCRA, 3, -s)), 1, "period"},
		{"PeriodBelowMinPeriod", withWindow(window(domain.SlidingLog, 3, domain.MinPeriod-time.Microsecond)), 1, "period"},
		{"PeriodAboveMaxPeriod", withWindow(window(domain.GCRA, 3, domain.MaxPeriod+time.Microsecond)), 1, "period"},
		{"PeriodNotWholeMicroseconds", withWindow(window(domain.SlidingLog, 3, s+time.Nanosecond)), 1, "period"},
		{"UnknownAlgorithm", withWindow(window(domain.Algorithm(7), 3, s)), 1, "algorithm"},
		{"EmptyKey", []domain.Limit{ok, limitOf("", good, 1)}, 1, "key"},
		{"KeyTooLong", []domain.Limit{ok, limitOf(long, good, 1)}, 1, "key"},
		{"ZeroCost", withCost(0), 1, "cost"},
		{"NegativeCost", withCost(-1), 1, "cost"},
		{"CostAboveLimit", withCost(4), 1, "cost"},
		{"DuplicateKey", []domain.Limit{ok, other, ok}, 2, "key"},
	}
	// Serial, unlike the suite's other subtests: the check after the loop
	// must come after every row's calls.
	for _, row := range rows {
		e.t.Run(row.name, func(t tb) {
			check := func(op string, err error) {
				t.Helper()
				le, ok := isLimitError(err)
				if !ok {
					t.Errorf("%s: error %v, want a *domain.LimitError wrapping domain.ErrInvalidLimit", op, err)
					return
				}
				if le.Index != row.index || le.Field != row.field {
					t.Errorf("%s: LimitError{Index: %d, Field: %q}, want Index %d, Field %q (the offence domain.ValidateLimits names)", op, le.Index, le.Field, row.index, row.field)
				}
			}
			_, err := e.store.Evaluate(e.ctx, e.t0, row.limits)
			check("Evaluate", err)
			_, err = e.store.Peek(e.ctx, e.t0, row.limits)
			check("Peek", err)
		})
	}
	// The valid limits of the refused requests consumed nothing.
	r := e.peek("peek the valid limits", e.t0, ok, other)
	e.checkStatus("peek ok after the invalid requests", r.Status(0), status{allowed: true, remaining: 3})
	e.checkStatus("peek other after the invalid requests", r.Status(1), status{allowed: true, remaining: 3})
}

func requestsAtTheBoundsAreAccepted(e *env) {
	m := time.Minute
	e.t.Run("SixteenKeys", func(t tb) {
		t.Parallel()
		e := e.sub(t, "16:")
		w := window(domain.SlidingLog, 3, 10*m)
		limits := make([]domain.Limit, domain.MaxLimits)
		for i := range limits {
			limits[i] = limitOf(e.key("k"+strconv.Itoa(i)), w, 1)
		}
		r := e.evaluate("sixteen keys", e.t0, limits...)
		e.checkResult("sixteen keys", r, outcome{allowed: true, remaining: 2, resetAfter: 10 * m})
		e.checkStatus("sixteen keys: last limit", r.Status(domain.MaxLimits-1), status{allowed: true, remaining: 2, resetAfter: 10 * m})
	})
	e.t.Run("KeyOfMaxKeyLenBytes", func(t tb) {
		t.Parallel()
		e := e.sub(t, "len:")
		name := strings.Repeat("x", domain.MaxKeyLen-len(e.key("")))
		l := limitOf(e.key(name), window(domain.GCRA, 2, 2*m), 1)
		if len(l.Key) != domain.MaxKeyLen {
			e.t.Fatalf("built a key of %d bytes, want %d", len(l.Key), domain.MaxKeyLen)
		}
		e.checkStatus("long key", e.evaluate("long key", e.t0, l).Status(0), status{allowed: true, remaining: 1, resetAfter: m})
	})
	e.t.Run("CostEqualToLimit", func(t tb) {
		t.Parallel()
		e := e.sub(t, "cost:")
		e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
			l := limitOf(e.key("a"), window(a, 5, 10*m), 5)
			e.checkStatus("cost 5 of 5", e.evaluate("cost 5 of 5", e.t0, l).Status(0), status{allowed: true, remaining: 0, resetAfter: 10 * m})
		})
	})
	e.t.Run("SlidingLogLargeLimitAndMaxPeriod", func(t tb) {
		t.Parallel()
		// The largest sliding-log limit the domain accepts (a log keeps
		// one record per unit; larger limits belong to GCRA).
		const large = domain.MaxSlidingLogLimit
		e := e.sub(t, "max:")
		e.replay(e.key("a"), window(domain.SlidingLog, large, domain.MaxPeriod), []step{
			{at: 0, cost: 1000, want: status{allowed: true, remaining: large - 1000, resetAfter: domain.MaxPeriod}},
			{at: 0, cost: large, want: status{remaining: large - 1000, retryAfter: domain.MaxPeriod, resetAfter: domain.MaxPeriod}},
		})
	})
}

func minPeriodWindowsRefillAfterOneMillisecond(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		ms := time.Millisecond
		e.replay(e.key("a"), window(a, 1, domain.MinPeriod), []step{
			{at: 0, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: ms}},
			{at: 0, cost: 1, want: status{remaining: 0, retryAfter: ms, resetAfter: ms}},
			{at: ms - time.Microsecond, cost: 1, want: status{remaining: 0, retryAfter: time.Microsecond, resetAfter: time.Microsecond}},
			{at: ms, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: ms}},
		})
	})
}

// workers is how many goroutines the concurrency cases release at once.
const workers = 64

// hangTimeout bounds how long the concurrency cases wait for their
// goroutines: far beyond any store's latency, it only turns a deadlock into
// a failure instead of a stuck test binary.
const hangTimeout = 30 * time.Second

// answer is one concurrent call's outcome.
type answer struct {
	r   domain.Result
	err error
}

// releaseTogether runs call in n goroutines released at once by closing a
// channel, and returns their answers; it ends the subtest if they do not
// all return within hangTimeout.
func (e *env) releaseTogether(n int, call func(i int) (domain.Result, error)) []answer {
	e.t.Helper()
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := call(i)
			answers[i] = answer{r, err}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(start)
	select {
	case <-done:
	case <-time.After(hangTimeout):
		e.t.Fatalf("%d concurrent calls did not all return within %v: a deadlock?", n, hangTimeout)
	}
	for i, a := range answers {
		if a.err != nil {
			e.t.Fatalf("concurrent call %d: unexpected error: %v", i, a.err)
		}
	}
	return answers
}

func concurrentRequestsOnOneKeyAdmitExactlyLimit(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		const limit = 50
		l := limitOf(e.key("a"), window(a, limit, 10*time.Minute), 1)
		answers := e.releaseTogether(workers, func(int) (domain.Result, error) {
			return e.store.Evaluate(e.ctx, e.t0, []domain.Limit{l})
		})
		// At one instant each admitted unit leaves one fewer: the admitted
		// calls must have seen every remaining count from 49 down to 0
		// exactly once, as if they had run one after another.
		seen := make(map[int64]int)
		admitted := 0
		for _, a := range answers {
			if a.r.Allowed {
				admitted++
				seen[a.r.Remaining]++
			} else if a.r.Remaining != 0 {
				e.t.Errorf("a refused call reported %d remaining, want 0", a.r.Remaining)
			}
		}
		if admitted != limit {
			e.t.Fatalf("%d goroutines on one key with limit %d: %d admitted, want exactly %d", workers, limit, admitted, limit)
		}
		for rem := range int64(limit) {
			if seen[rem] != 1 {
				e.t.Errorf("remaining %d reported by %d admitted calls, want exactly 1: calls were not serialised", rem, seen[rem])
			}
		}
		r := e.peek("peek after the burst", e.t0, l)
		if r.Allowed || r.Remaining != 0 {
			e.t.Errorf("peek after the burst: allowed %t remaining %d, want refused with 0 remaining", r.Allowed, r.Remaining)
		}
	})
}

func concurrentRequestsAcrossTwoKeysAreAllOrNothing(e *env) {
	// A: SlidingLog 20 per 10min. B: GCRA 40 per 10min. A third of the
	// goroutines ask for B alone; the others for A and B, half of them in
	// the opposite order (a store that locks keys in request order
	// deadlocks here).
	const limitA, limitB = 20, 40
	a := limitOf(e.key("A"), window(domain.SlidingLog, limitA, 10*time.Minute), 1)
	b := limitOf(e.key("B"), window(domain.GCRA, limitB, 10*time.Minute), 1)
	request := func(i int) []domain.Limit {
		switch i % 3 {
		case 0:
			return []domain.Limit{b}
		case 1:
			return []domain.Limit{a, b}
		}
		return []domain.Limit{b, a}
	}
	answers := e.releaseTogether(workers, func(i int) (domain.Result, error) {
		return e.store.Evaluate(e.ctx, e.t0, request(i))
	})
	var both, onlyB int64
	var bothRefused, onlyBRefused bool
	for i, ans := range answers {
		switch {
		case i%3 == 0 && ans.r.Allowed:
			onlyB++
		case i%3 == 0:
			onlyBRefused = true
		case ans.r.Allowed:
			both++
		default:
			bothRefused = true
		}
	}
	if both > limitA || both+onlyB > limitB {
		e.t.Errorf("admitted %d requests on A and B and %d on B alone: A got %d of %d, B %d of %d", both, onlyB, both, limitA, both+onlyB, limitB)
	}
	if onlyBRefused && both+onlyB != limitB {
		e.t.Errorf("a request on B alone was refused while B had admitted only %d of %d", both+onlyB, limitB)
	}
	if bothRefused && both != limitA && both+onlyB != limitB {
		e.t.Errorf("a request on A and B was refused while A had %d of %d and B %d of %d", both, limitA, both+onlyB, limitB)
	}
	// What the stores hold must match what they admitted, unit for unit.
	r := e.peek("peek A and B", e.t0, a, b)
	if got := r.Status(0).Remaining; got != limitA-both {
		e.t.Errorf("A has %d remaining after %d admitted requests, want %d", got, both, limitA-both)
	}
	if got := r.Status(1).Remaining; got != limitB-both-onlyB {
		e.t.Errorf("B has %d remaining after %d admitted requests, want %d", got, both+onlyB, limitB-both-onlyB)
	}
}

func limitsSliceIsNotKeptAfterTheCall(e *env) {
	m := time.Minute
	sl, gc := window(domain.SlidingLog, 3, 10*m), window(domain.GCRA, 3, 9*m) // T = 3min
	a, b := limitOf(e.key("a"), sl, 1), limitOf(e.key("b"), gc, 1)
	c, d := limitOf(e.key("c"), sl, 1), limitOf(e.key("d"), gc, 1)
	limits := []domain.Limit{a, b}
	r, err := e.store.Evaluate(e.ctx, e.t0, limits)
	if err != nil || !r.Allowed {
		e.t.Fatalf("evaluate [a b] on fresh keys: allowed %t, error %v; want allowed", r.Allowed, err)
	}
	// The caller reuses the slice's memory once the call has returned, as
	// the app's pooled evaluations do. Under the race detector, a store
	// still reading it races with these writes.
	limits[0], limits[1] = c, d
	r = e.peek("peek after the slice was reused", e.t0, a, b, c, d)
	e.checkStatus("a", r.Status(0), status{allowed: true, remaining: 2, resetAfter: 10 * m})
	e.checkStatus("b", r.Status(1), status{allowed: true, remaining: 2, resetAfter: 3 * m})
	e.checkStatus("c (written into the reused slice)", r.Status(2), status{allowed: true, remaining: 3})
	e.checkStatus("d (written into the reused slice)", r.Status(3), status{allowed: true, remaining: 3})
}

func closedStoreReturnsErrStoreClosed(e *env) {
	l := limitOf(e.key("a"), window(domain.SlidingLog, 3, 10*time.Minute), 1)
	e.consume("using the store", e.t0, l, 1)
	if err := e.store.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	if _, err := e.store.Evaluate(e.ctx, e.t0, []domain.Limit{l}); !errors.Is(err, domain.ErrStoreClosed) {
		e.t.Errorf("Evaluate after Close: error %v, want one wrapping domain.ErrStoreClosed", err)
	}
	if _, err := e.store.Peek(e.ctx, e.t0, []domain.Limit{l}); !errors.Is(err, domain.ErrStoreClosed) {
		e.t.Errorf("Peek after Close: error %v, want one wrapping domain.ErrStoreClosed", err)
	}
	if err := e.store.Reset(e.ctx, l.Key); !errors.Is(err, domain.ErrStoreClosed) {
		e.t.Errorf("Reset after Close: error %v, want one wrapping domain.ErrStoreClosed", err)
	}
	// Idempotent: a second Close (the constructor's cleanup makes a third)
	// returns nil, as ports.Store says.
	if err := e.store.Close(); err != nil {
		e.t.Errorf("second Close: error %v, want nil", err)
	}
}

func twoStoresShareTheirCounts(e *env) {
	// A second instance on the same state: same keys, another store.
	other := e.sub(e.t, "")
	other.store = e.open()
	m := time.Minute
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, 5, 10*m), 1)
	gc := limitOf(e.key("gc"), window(domain.GCRA, 5, 10*m), 1) // T = 2min
	for i := range 3 {
		if r := e.evaluate("first store", e.t0, sl, gc); !r.Allowed {
			e.t.Fatalf("first store, request %d of 3 on fresh keys: refused", i+1)
		}
	}
	r := other.peek("the other store after 3 units", e.t0, sl, gc)
	other.checkStatus("the other store, sliding log", r.Status(0), status{allowed: true, remaining: 2, resetAfter: 10 * m})
	other.checkStatus("the other store, GCRA", r.Status(1), status{allowed: true, remaining: 2, resetAfter: 6 * m})
	for i := range 2 {
		if r := other.evaluate("the other store", e.t0, sl, gc); !r.Allowed {
			e.t.Fatalf("the other store, request %d of 2 with 2 units left: refused", i+1)
		}
	}
	r = e.evaluate("first store after the other's units", e.t0, sl, gc)
	e.checkResult("first store after the other's units", r, outcome{allowed: false, limiting: 0, remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	e.checkStatus("first store after the other's units, GCRA", r.Status(1), status{remaining: 0, retryAfter: 2 * m, resetAfter: 10 * m})
	other.reset("the other store resets the sliding log", sl.Key)
	// Closing one instance leaves the state, and the other instance, alone.
	if err := other.store.Close(); err != nil {
		e.t.Errorf("closing the other store: %v", err)
	}
	r = e.peek("first store after the other's reset and close", e.t0, sl, gc)
	e.checkStatus("first store after the other's reset, sliding log", r.Status(0), status{allowed: true, remaining: 5})
	e.checkStatus("first store after the other's close, GCRA", r.Status(1), status{remaining: 0, retryAfter: 2 * m, resetAfter: 10 * m})
}

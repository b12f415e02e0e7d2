package conformance

import (
	"time"

	"github.com/sluicehq/sluice/domain"
)

// One key, one window: each algorithm's own rules (the units a sliding
// log holds and when they leave; GCRA's emission interval, burst and
// refill).

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
		// A unit comes back every 29.45 ms: a store on its own clock may
		// show one back if the case took that long between the steps.
		{at: 0, cost: 1 << 20, want: status{remaining: 0, retryAfter: 29450 * us << 20, resetAfter: capacity}, refill: 29450 * us},
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

package conformance

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The cases of this file hold a store that implements the optional
// ports.Reserver to its contract (docs/adr/012): reservations that settle
// (a refund of the reservation's own units, never below zero; a charge
// recorded past the limit; idempotence), leases that expire (a crashed
// holder's units stay counted at the cost reserved, its slots come back),
// concurrency windows (at most Limit held, RetryAfter and ResetAfter from
// the leases' expiries, Renew), all or nothing across rate and concurrency
// windows, and exactness under 200 goroutines. A store without the
// capability is reported in the test log by every case of this file,
// never failed for it (as ports.Repeater); EvaluateRefusesConcurrencyWindows
// applies to every store.

// reservationCases lists the cases of this file, in the suite's order.
func reservationCases() []testCase {
	return []testCase{
		{name: "EvaluateRefusesConcurrencyWindows", run: evaluateRefusesConcurrencyWindows},
		{name: "SettleRefundsTheDifference", run: settleRefundsTheDifference},
		{name: "SettleChargesPastTheLimit", run: settleChargesPastTheLimit},
		{name: "ConcurrencyWindowHoldsAtMostLimit", run: concurrencyWindowHoldsAtMostLimit},
		{name: "ReservationIsAllOrNothingAcrossRateAndConcurrencyWindows", run: reservationIsAllOrNothing},
		{name: "InvalidReservationRequestsAreRejected", run: invalidReservationRequestsAreRejected},
		{name: "ClosedStoreRefusesReservations", run: closedStoreRefusesReservations},
		{name: "ReservationsUnderContentionAreExact", run: reservationsUnderContentionAreExact},
		{name: "CrashedHoldersSlotsComeBackWithinTheTTL", run: crashedHoldersSlotsComeBackWithinTheTTL},
		{name: "SettleChargesAreStampedAtTheSettleInstant", scripted: true, run: settleChargesAreStampedAtTheSettleInstant},
		{name: "RefundNeverGoesBelowZero", scripted: true, run: refundNeverGoesBelowZero},
		{name: "ExpiredLeaseCountsItsReservedCost", scripted: true, run: expiredLeaseCountsItsReservedCost},
		{name: "ConcurrencySlotsComeBackAtLeaseExpiry", scripted: true, run: concurrencySlotsComeBackAtLeaseExpiry},
		{name: "RenewKeepsTheSlotPastItsExpiry", scripted: true, run: renewKeepsTheSlotPastItsExpiry},
		{name: "TwoStoresShareTheirLeases", shared: true, run: twoStoresShareTheirLeases},
	}
}

// reserver returns the store's ports.Reserver, or nil, having said so in
// the test log, when it has none.
func (e *env) reserver() ports.Reserver {
	r, ok := e.store.(ports.Reserver)
	if !ok {
		e.t.Logf("the store does not implement ports.Reserver: reservations not checked")
		return nil
	}
	return r
}

// concurrency returns a concurrency window of limit slots; its Period,
// the lease TTL an entry point would pass, is a minute.
func concurrency(limit int64) domain.Window {
	return domain.Window{Name: "c", Limit: limit, Period: time.Minute, Algorithm: domain.Concurrency}
}

// reserve calls Reserve and ends the subtest on an error. A refusal must
// come with the zero Lease, an admission with a valid one of ttl.
func (e *env) reserve(label string, now time.Time, ttl time.Duration, limits ...domain.Limit) (domain.Result, domain.Lease) {
	e.t.Helper()
	r, lease, err := e.store.(ports.Reserver).Reserve(e.ctx, now, limits, ttl)
	if err != nil {
		e.t.Fatalf("%s: Reserve: unexpected error: %v", label, err)
	}
	e.checkN(label, r, len(limits))
	switch {
	case !r.Allowed && lease != (domain.Lease{}):
		e.t.Errorf("%s: a refused Reserve returned the lease %+v, want the zero Lease", label, lease)
	case r.Allowed && (!lease.Valid() || lease.TTL != ttl):
		e.t.Errorf("%s: Reserve returned the lease %+v, want a valid one with TTL %v", label, lease, ttl)
	case r.Allowed && !e.ownClock && !lease.At.Equal(now):
		e.t.Errorf("%s: lease.At = %v, want the instant of the reservation %v", label, lease.At, now)
	}
	return r, lease
}

// mustReserve is reserve for a setup that must be admitted.
func (e *env) mustReserve(label string, now time.Time, ttl time.Duration, limits ...domain.Limit) domain.Lease {
	e.t.Helper()
	r, lease := e.reserve(label, now, ttl, limits...)
	if !r.Allowed {
		e.t.Fatalf("%s: refused (limiting %d, remaining %d), want admitted", label, r.Limiting, r.Remaining)
	}
	return lease
}

// settle calls Settle and checks what it did.
func (e *env) settle(label string, now time.Time, lease domain.Lease, actual int64, want domain.Settlement, limits ...domain.Limit) {
	e.t.Helper()
	got, err := e.store.(ports.Reserver).Settle(e.ctx, now, lease, limits, actual)
	if err != nil {
		e.t.Fatalf("%s: Settle(%d): unexpected error: %v", label, actual, err)
	}
	if got != want {
		e.t.Errorf("%s: Settle(%d) = %v, want %v", label, actual, got, want)
	}
}

// renewEnded calls Renew and checks that it refuses a lease no longer
// held with domain.ErrLeaseEnded.
func (e *env) renewEnded(label string, now time.Time, lease domain.Lease, limits ...domain.Limit) {
	e.t.Helper()
	_, err := e.store.(ports.Reserver).Renew(e.ctx, now, lease, limits, time.Minute)
	if !errors.Is(err, domain.ErrLeaseEnded) {
		e.t.Errorf("%s: Renew: error %v, want one wrapping domain.ErrLeaseEnded", label, err)
	}
}

// remaining peeks limits (cost 1 each) and checks each one's Remaining.
func (e *env) remaining(label string, now time.Time, limits []domain.Limit, want ...int64) {
	e.t.Helper()
	peek := make([]domain.Limit, len(limits))
	for i, l := range limits {
		peek[i] = limitOf(l.Key, l.Window, 1)
	}
	r := e.peek(label, now, peek...)
	for i, w := range want {
		if got := r.Status(i).Remaining; got != w {
			e.t.Errorf("%s: limit %d (%s, limit %d): %d remaining, want %d", label, i, peek[i].Window.Algorithm, peek[i].Window.Limit, got, w)
		}
	}
}

// eventually checks cond at the lease's expiry: at once at now+ttl on a
// store that takes the caller's clock; on a store with its own clock, by
// polling with this machine's clock every ttl/100 until cond holds, for at
// most ttl plus 10 s (a bound against a hang, not a measure of speed). It
// returns how long the store took past the reservation on its own clock.
func (e *env) eventually(label string, reserved time.Time, ttl time.Duration, cond func(now time.Time) bool) time.Duration {
	e.t.Helper()
	if !e.ownClock {
		if !cond(e.t0.Add(ttl)) {
			e.t.Errorf("%s: not so at the lease's expiry, t0+%v", label, ttl)
		}
		return ttl
	}
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		if cond(e.t0) {
			return time.Since(reserved)
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%s: still not so %v after the reservation (lease TTL %v)", label, time.Since(reserved), ttl)
			return 0
		}
		time.Sleep(max(ttl/100, time.Millisecond))
	}
}

func evaluateRefusesConcurrencyWindows(e *env) {
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, 3, 10*time.Minute), 1)
	c := limitOf(e.key("c"), concurrency(2), 1)
	check := func(op string, err error) {
		e.t.Helper()
		le, ok := isLimitError(err)
		if !ok {
			e.t.Errorf("%s with a concurrency window: error %v, want a *domain.LimitError", op, err)
			return
		}
		if le.Index != 1 || le.Field != "algorithm" {
			e.t.Errorf("%s with a concurrency window: LimitError{Index: %d, Field: %q}, want Index 1, Field \"algorithm\" (domain.ValidateLimits)", op, le.Index, le.Field)
		}
	}
	_, err := e.store.Evaluate(e.ctx, e.t0, []domain.Limit{sl, c})
	check("Evaluate", err)
	if rep, ok := e.store.(ports.Repeater); ok {
		_, err := rep.EvaluateRepeated(e.ctx, e.t0, []domain.Limit{sl, c}, 2)
		check("EvaluateRepeated", err)
	}
	e.checkStatus("the sliding log after the refused calls", e.peek("peek", e.t0, sl).Status(0), status{allowed: true, remaining: 3})
}

// rateShapes are the rate windows the settle cases run on: both
// algorithms, and a sliding log above the Redis store's compact bound
// (1024, adapters/redis), which it keeps as a ZSET.
var rateShapes = []struct {
	name string
	w    domain.Window
}{
	{"SlidingLog10", window(domain.SlidingLog, 10, 10*time.Minute)},
	{"SlidingLog2000", window(domain.SlidingLog, 2000, 10*time.Minute)},
	{"GCRA10", window(domain.GCRA, 10, 10*time.Minute)},
	{"GCRA2000", window(domain.GCRA, 2000, 10*time.Minute)},
}

// forEachShape runs f once per rate shape, as parallel subtests.
func (e *env) forEachShape(f func(e *env, w domain.Window)) {
	for _, sh := range rateShapes {
		e.t.Run(sh.name, func(t tb) {
			t.Parallel()
			f(e.sub(t, sh.name+":"), sh.w)
		})
	}
}

func settleRefundsTheDifference(e *env) {
	if e.reserver() == nil {
		return
	}
	e.forEachShape(func(e *env, w domain.Window) {
		// In tenths of the limit, at one instant (GCRA: TAT' = max(TAT −
		// d·T, now), d·T whole here).
		L := w.Limit
		k := e.key("a")
		r1 := limitOf(k, w, 6*L/10)
		r, a := e.reserve("reserve 6/10", e.t0, time.Hour, r1)
		e.checkStatus("reserve 6/10", r.Status(0), status{allowed: true, remaining: 4 * L / 10, resetAfter: resetAfterUnits(w, 6*L/10)})
		e.settle("settle 6/10 at 2/10", e.t0, a, 2*L/10, domain.Settled, r1)
		e.remaining("after the refund of 4/10", e.t0, []domain.Limit{r1}, 8*L/10)
		e.settle("settle again at 0", e.t0, a, 0, domain.AlreadySettled, r1)
		e.remaining("after the second settle", e.t0, []domain.Limit{r1}, 8*L/10)
		r2 := limitOf(k, w, 5*L/10)
		_, b := e.reserve("reserve 5/10", e.t0, time.Hour, r2)
		if a.ID == b.ID {
			e.t.Errorf("two reservations share the lease ID %s", a.ID)
		}
		e.remaining("after reserving 5/10", e.t0, []domain.Limit{r2}, 3*L/10)
		e.settle("settle 5/10 at 0", e.t0, b, 0, domain.Settled, r2)
		e.remaining("after the full refund", e.t0, []domain.Limit{r2}, 8*L/10)
		// The refunds are real room: exactly 8/10 more pass.
		if r := e.evaluate("spend 8/10", e.t0, limitOf(k, w, 8*L/10)); !r.Allowed || r.Remaining != 0 {
			e.t.Errorf("spending the 8/10 left: allowed %t remaining %d, want allowed with 0 remaining", r.Allowed, r.Remaining)
		}
		if r := e.evaluate("one more", e.t0, limitOf(k, w, 1)); r.Allowed {
			e.t.Errorf("one unit past the limit after the refunds was admitted")
		}
	})
}

// resetAfterUnits is a fresh window's ResetAfter after u units at one
// instant: a sliding log's newest unit leaves one period on; GCRA's TAT is
// u emission intervals ahead.
func resetAfterUnits(w domain.Window, u int64) time.Duration {
	if w.Algorithm == domain.GCRA {
		return domain.Micros(u * w.EmissionMicros())
	}
	return w.Period
}

func settleChargesPastTheLimit(e *env) {
	if e.reserver() == nil {
		return
	}
	m := time.Minute
	e.forEachShape(func(e *env, w domain.Window) {
		// 8/10 reserved, 2/10 evaluated: full. Settled at 3 L: the charge
		// of 3L − 8/10 L is recorded, not refused. A sliding log records
		// at most Limit of it (it stays full one period anyway); GCRA's
		// TAT moves 2.2 L intervals past the full window.
		L := w.Limit
		k := e.key("a")
		res := limitOf(k, w, 8*L/10)
		_, a := e.reserve("reserve 8/10", e.t0, time.Hour, res)
		e.consume("spend 2/10", e.t0, limitOf(k, w, 2*L/10), 1)
		e.settle("settle at 3L", e.t0, a, 3*L, domain.Settled, res)
		want := status{remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m}
		if w.Algorithm == domain.GCRA {
			t := domain.Micros(w.EmissionMicros())
			tat := 10*m + time.Duration(3*L-8*L/10)*t
			want = status{remaining: 0, retryAfter: tat + t - 10*m, resetAfter: tat}
		}
		e.checkStatus("peek after the charge", e.peek("peek", e.t0, limitOf(k, w, 1)).Status(0), want)
	})
	e.t.Run("GCRAChargeStopsAtMaxPeriod", func(t tb) {
		t.Parallel()
		e := e.sub(t, "max:")
		// T = MaxPeriod/2. A charge of MaxLimit units would push the TAT
		// far past MaxPeriod: it stops at now + MaxPeriod.
		w := window(domain.GCRA, 2, domain.MaxPeriod)
		res := limitOf(e.key("a"), w, 1)
		_, a := e.reserve("reserve 1", e.t0, time.Hour, res)
		e.settle("settle at MaxLimit", e.t0, a, domain.MaxLimit, domain.Settled, res)
		e.checkStatus("peek after the charge", e.peek("peek", e.t0, res).Status(0),
			status{remaining: 0, retryAfter: domain.MaxPeriod / 2, resetAfter: domain.MaxPeriod})
	})
}

func settleChargesAreStampedAtTheSettleInstant(e *env) {
	if e.reserver() == nil {
		return
	}
	m := time.Minute
	e.t.Run("SlidingLog", func(t tb) {
		t.Parallel()
		e := e.sub(t, "sl:")
		for _, L := range []int64{10, 2000} {
			// Reserved 4/10 at t0, settled at 9/10 at t0+5m: the 5/10
			// charged are stamped at t0+5m and leave at t0+15m.
			w := window(domain.SlidingLog, L, 10*m)
			res := limitOf(e.key(strconv.FormatInt(L, 10)), w, 4*L/10)
			_, a := e.reserve("reserve 4/10", e.at(0), time.Hour, res)
			e.settle("settle at 9/10", e.at(5*m), a, 9*L/10, domain.Settled, res)
			e.checkStatus("peek at t0+5m", e.peek("peek", e.at(5*m), limitOf(res.Key, w, 1)).Status(0), status{allowed: true, remaining: L / 10, resetAfter: 10 * m})
			e.checkStatus("peek at t0+10m", e.peek("peek", e.at(10*m), limitOf(res.Key, w, 1)).Status(0), status{allowed: true, remaining: 5 * L / 10, resetAfter: 5 * m})
			e.checkStatus("peek at t0+15m", e.peek("peek", e.at(15*m), limitOf(res.Key, w, 1)).Status(0), status{allowed: true, remaining: L})
		}
	})
	e.t.Run("GCRA", func(t tb) {
		t.Parallel()
		e := e.sub(t, "gcra:")
		// T = 1m. Reserved 4 at t0 (TAT t0+4m), settled at 9 at t0+2m:
		// TAT = max(t0+4m, t0+2m) + 5m = t0+9m.
		w := window(domain.GCRA, 10, 10*m)
		res := limitOf(e.key("a"), w, 4)
		_, a := e.reserve("reserve 4", e.at(0), time.Hour, res)
		e.settle("settle at 9", e.at(2*m), a, 9, domain.Settled, res)
		e.checkStatus("peek at t0+2m", e.peek("peek", e.at(2*m), limitOf(res.Key, w, 1)).Status(0), status{allowed: true, remaining: 3, resetAfter: 7 * m})
	})
}

func refundNeverGoesBelowZero(e *env) {
	if e.reserver() == nil {
		return
	}
	m := time.Minute
	w := window(domain.SlidingLog, 10, 10*m)
	e.t.Run("UnitsThatLeftTheWindow", func(t tb) {
		t.Parallel()
		e := e.sub(t, "left:")
		// The reservation's 5 units left the window at t0+10m; a full
		// refund then takes nothing from the 10 units spent since.
		res := limitOf(e.key("a"), w, 5)
		_, a := e.reserve("reserve 5", e.at(0), time.Hour, res)
		e.consume("spend 10 at t0+10m", e.at(10*m), limitOf(res.Key, w, 10), 1)
		e.settle("settle at 0", e.at(10*m), a, 0, domain.Settled, res)
		e.checkStatus("peek", e.peek("peek", e.at(10*m), limitOf(res.Key, w, 1)).Status(0), status{remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	})
	e.t.Run("KeyResetSinceTheReservation", func(t tb) {
		t.Parallel()
		e := e.sub(t, "reset:")
		res := limitOf(e.key("a"), w, 5)
		_, a := e.reserve("reserve 5", e.at(0), time.Hour, res)
		e.reset("reset", res.Key)
		e.consume("spend 3 at t0+1m", e.at(m), limitOf(res.Key, w, 3), 1)
		e.settle("settle at 0", e.at(m), a, 0, domain.Settled, res)
		e.checkStatus("peek", e.peek("peek", e.at(m), limitOf(res.Key, w, 1)).Status(0), status{allowed: true, remaining: 7, resetAfter: 10 * m})
	})
	e.t.Run("OnlyItsOwnUnits", func(t tb) {
		t.Parallel()
		e := e.sub(t, "own:")
		// Units of others, before and after: a refund of 5 takes the 5
		// stamped at t0+1m, never more.
		k := e.key("a")
		e.consume("spend 2 at t0", e.at(0), limitOf(k, w, 2), 1)
		res := limitOf(k, w, 5)
		_, a := e.reserve("reserve 5", e.at(m), time.Hour, res)
		e.consume("spend 3 at t0+2m", e.at(2*m), limitOf(k, w, 3), 1)
		e.settle("settle at 0", e.at(2*m), a, 0, domain.Settled, res)
		e.remaining("after the refund", e.at(2*m), []domain.Limit{res}, 5)
		e.remaining("at t0+10m: the 2 of t0 left", e.at(10*m), []domain.Limit{res}, 7)
		e.remaining("at t0+12m: the 3 of t0+2m left", e.at(12*m), []domain.Limit{res}, 10)
	})
	e.t.Run("GCRA", func(t tb) {
		t.Parallel()
		e := e.sub(t, "gcra:")
		// T = 1m; TAT t0+5m. At t0+3m a refund of 5 stops at now.
		g := window(domain.GCRA, 10, 10*m)
		res := limitOf(e.key("a"), g, 5)
		_, a := e.reserve("reserve 5", e.at(0), time.Hour, res)
		e.settle("settle at 0", e.at(3*m), a, 0, domain.Settled, res)
		e.checkStatus("peek", e.peek("peek", e.at(3*m), limitOf(res.Key, g, 1)).Status(0), status{allowed: true, remaining: 10})
		if n := e.spendUntilRefused("spend at t0+3m", e.at(3*m), limitOf(res.Key, g, 1), 20); n != 10 {
			e.t.Errorf("after a full refund at t0+3m: %d admitted, want 10", n)
		}
	})
}

func expiredLeaseCountsItsReservedCost(e *env) {
	if e.reserver() == nil {
		return
	}
	m := time.Minute
	us := time.Microsecond
	e.forEachAlgorithm(func(e *env, alg domain.Algorithm) {
		// 6 of 10 per 10m and a slot of 1, under a lease of 1m. At
		// t0+1m the lease has expired: its 6 units stay counted (GCRA: T
		// = 1m, one drained), its slot is back, Settle changes nothing.
		rate := limitOf(e.key("r"), window(alg, 10, 10*m), 6)
		slot := limitOf(e.key("c"), concurrency(1), 1)
		_, a := e.reserve("reserve", e.at(0), m, rate, slot)
		r, _ := e.reserve("another at t0+1m-1µs", e.at(m-us), m, slot)
		e.checkStatus("another at t0+1m-1µs", r.Status(0), status{remaining: 0, retryAfter: us, resetAfter: us})
		e.settle("settle at 0 at t0+1m", e.at(m), a, 0, domain.Expired, rate, slot)
		left := int64(4)
		if alg == domain.GCRA {
			left = 5
		}
		e.remaining("after the expiry", e.at(m), []domain.Limit{rate, slot}, left, 1)
		e.renewEnded("renew after the expiry", e.at(m), a, rate, slot)
		// Just before its expiry, a lease still settles.
		rate2 := limitOf(e.key("r2"), window(alg, 10, 10*m), 6)
		_, b := e.reserve("reserve another", e.at(0), m, rate2)
		e.settle("settle at 0 at t0+1m-1µs", e.at(m-us), b, 0, domain.Settled, rate2)
		e.remaining("after its refund", e.at(m-us), []domain.Limit{rate2}, 10)
	})
}

func concurrencyWindowHoldsAtMostLimit(e *env) {
	if e.reserver() == nil {
		return
	}
	m := time.Minute
	c := limitOf(e.key("c"), concurrency(3), 1)
	r, _ := e.reserve("A (lease 1m)", e.t0, m, c)
	e.checkStatus("A", r.Status(0), status{allowed: true, remaining: 2, resetAfter: m})
	r, b := e.reserve("B (lease 3m)", e.t0, 3*m, c)
	e.checkStatus("B", r.Status(0), status{allowed: true, remaining: 1, resetAfter: 3 * m})
	r, _ = e.reserve("C (lease 2m)", e.t0, 2*m, c)
	e.checkStatus("C", r.Status(0), status{allowed: true, remaining: 0, resetAfter: 3 * m})
	// Refused: retry when the earliest slot surely comes back, reset when
	// the last one does.
	full := status{remaining: 0, retryAfter: m, resetAfter: 3 * m}
	r, _ = e.reserve("D", e.t0, m, c)
	e.checkStatus("D", r.Status(0), full)
	for i := range 2 {
		e.checkStatus("peek "+strconv.Itoa(i+1), e.peek("peek", e.t0, c).Status(0), full)
	}
	e.settle("settle B", e.t0, b, 1, domain.Settled, c)
	e.checkStatus("peek after B settled", e.peek("peek", e.t0, c).Status(0), status{allowed: true, remaining: 1, resetAfter: 2 * m})
	r, _ = e.reserve("cost 2 with one slot free", e.t0, m, limitOf(c.Key, c.Window, 2))
	e.checkStatus("cost 2 with one slot free", r.Status(0), status{remaining: 1, retryAfter: m, resetAfter: 2 * m})
	r, _ = e.reserve("E", e.t0, m, c)
	e.checkStatus("E", r.Status(0), status{allowed: true, remaining: 0, resetAfter: 2 * m})
	e.settle("settle B again", e.t0, b, 1, domain.AlreadySettled, c)
	// A, C and E hold the 3 slots (leases of 1m, 2m and 1m).
	e.checkStatus("peek after settling B twice", e.peek("peek", e.t0, c).Status(0), status{remaining: 0, retryAfter: m, resetAfter: 2 * m})
	// Cost > 1 takes that many slots.
	five := concurrency(5)
	k := e.key("five")
	e.mustReserve("3 of 5", e.t0, m, limitOf(k, five, 3))
	if r, _ := e.reserve("3 more of 5", e.t0, m, limitOf(k, five, 3)); r.Allowed || r.Remaining != 2 {
		e.t.Errorf("3 more of 5 with 3 held: allowed %t remaining %d, want refused with 2 remaining", r.Allowed, r.Remaining)
	}
	if r, _ := e.reserve("2 more of 5", e.t0, m, limitOf(k, five, 2)); !r.Allowed || r.Remaining != 0 {
		e.t.Errorf("2 more of 5 with 3 held: allowed %t remaining %d, want admitted with 0 remaining", r.Allowed, r.Remaining)
	}
}

func concurrencySlotsComeBackAtLeaseExpiry(e *env) {
	if e.reserver() == nil {
		return
	}
	s := time.Second
	c := limitOf(e.key("c"), concurrency(2), 1)
	e.mustReserve("A at t0, lease 30s", e.at(0), 30*s, c)
	e.mustReserve("B at t0+10s, lease 60s", e.at(10*s), 60*s, c)
	r, _ := e.reserve("at t0+20s", e.at(20*s), 60*s, c)
	e.checkStatus("at t0+20s", r.Status(0), status{remaining: 0, retryAfter: 10 * s, resetAfter: 50 * s})
	e.checkStatus("peek at t0+30s", e.peek("peek", e.at(30*s), c).Status(0), status{allowed: true, remaining: 1, resetAfter: 40 * s})
	r, _ = e.reserve("C at t0+30s, lease 60s", e.at(30*s), 60*s, c)
	e.checkStatus("C at t0+30s", r.Status(0), status{allowed: true, remaining: 0, resetAfter: 60 * s})
	e.checkStatus("peek at t0+70s", e.peek("peek", e.at(70*s), c).Status(0), status{allowed: true, remaining: 1, resetAfter: 20 * s})
	e.checkStatus("peek at t0+90s", e.peek("peek", e.at(90*s), c).Status(0), status{allowed: true, remaining: 2})
}

func renewKeepsTheSlotPastItsExpiry(e *env) {
	if e.reserver() == nil {
		return
	}
	s := time.Second
	c := limitOf(e.key("c"), concurrency(1), 1)
	rate := limitOf(e.key("r"), window(domain.SlidingLog, 10, 10*time.Minute), 1)
	a := e.mustReserve("A at t0, lease 60s", e.at(0), 60*s, c, rate)
	renewed, err := e.store.(ports.Reserver).Renew(e.ctx, e.at(50*s), a, []domain.Limit{c, rate}, 60*s)
	if err != nil {
		e.t.Fatalf("Renew at t0+50s: %v", err)
	}
	if renewed.ID != a.ID || !renewed.At.Equal(a.At) || renewed.TTL != 60*s {
		e.t.Errorf("Renew returned %+v, want the lease %s of %v with TTL 60s", renewed, a.ID, a.At)
	}
	e.checkStatus("peek at t0+70s", e.peek("peek", e.at(70*s), c).Status(0), status{remaining: 0, retryAfter: 40 * s, resetAfter: 40 * s})
	e.settle("settle at t0+90s", e.at(90*s), renewed, 1, domain.Settled, c, rate)
	e.remaining("after the settle", e.at(90*s), []domain.Limit{c, rate}, 1, 9)
	e.renewEnded("renew after the settle", e.at(90*s), renewed, c, rate)
	b := e.mustReserve("B at t0+90s, lease 60s", e.at(90*s), 60*s, c, rate)
	e.renewEnded("renew B at its expiry", e.at(150*s), b, c, rate)
	e.settle("settle B after its expiry", e.at(150*s), b, 0, domain.Expired, c, rate)
	e.remaining("after B expired", e.at(150*s), []domain.Limit{c, rate}, 1, 8)
}

func reservationIsAllOrNothing(e *env) {
	if e.reserver() == nil {
		return
	}
	m := time.Minute
	c := limitOf(e.key("c"), concurrency(1), 1)
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, 10, 10*m), 2)
	g := limitOf(e.key("g"), window(domain.GCRA, 10, 10*m), 3) // T = 1m
	r, a := e.reserve("A", e.t0, m, c, sl, g)
	e.checkStatus("A: concurrency", r.Status(0), status{allowed: true, remaining: 0, resetAfter: m})
	e.checkStatus("A: sliding log", r.Status(1), status{allowed: true, remaining: 8, resetAfter: 10 * m})
	e.checkStatus("A: GCRA", r.Status(2), status{allowed: true, remaining: 7, resetAfter: 3 * m})
	r, _ = e.reserve("B: the slot is held", e.t0, m, c, sl, g)
	e.checkResult("B", r, outcome{allowed: false, limiting: 0, remaining: 0, retryAfter: m, resetAfter: m})
	e.remaining("after B's refusal", e.t0, []domain.Limit{c, sl, g}, 0, 8, 7)
	// Settled at 2: the sliding log's cost stands, GCRA gets 1 back.
	e.settle("settle A at 2", e.t0, a, 2, domain.Settled, c, sl, g)
	e.remaining("after A settled", e.t0, []domain.Limit{c, sl, g}, 1, 8, 8)
	e.consume("fill the sliding log", e.t0, limitOf(sl.Key, sl.Window, 8), 1)
	r, _ = e.reserve("C: the sliding log is full", e.t0, m, c, sl, g)
	e.checkResult("C", r, outcome{allowed: false, limiting: 1, remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	e.remaining("after C's refusal", e.t0, []domain.Limit{c, sl, g}, 1, 0, 8)
}

func invalidReservationRequestsAreRejected(e *env) {
	rs := e.reserver()
	if rs == nil {
		return
	}
	m := time.Minute
	c := limitOf(e.key("c"), concurrency(1), 1)
	rate := limitOf(e.key("r"), window(domain.GCRA, 10, 10*m), 1)
	ok := []domain.Limit{c, rate}
	wantField := func(op, field string, err error) {
		e.t.Helper()
		le, isLE := isLimitError(err)
		switch {
		case !isLE:
			e.t.Errorf("%s: error %v, want a *domain.LimitError", op, err)
		case field != "" && le.Field != field:
			e.t.Errorf("%s: LimitError.Field %q, want %q", op, le.Field, field)
		}
	}
	for _, ttl := range []time.Duration{0, -m, domain.MinLeaseTTL - time.Microsecond, domain.MaxLeaseTTL + time.Microsecond, m + time.Nanosecond} {
		_, lease, err := rs.Reserve(e.ctx, e.t0, ok, ttl)
		wantField("Reserve with ttl "+ttl.String(), "ttl", err)
		if lease != (domain.Lease{}) {
			e.t.Errorf("Reserve with ttl %v returned the lease %+v", ttl, lease)
		}
	}
	badWindows := map[string]domain.Window{
		"ConcurrencyLimitAboveMax":          {Name: "c", Limit: domain.MaxConcurrencyLimit + 1, Period: m, Algorithm: domain.Concurrency},
		"ConcurrencyPeriodAboveMaxLeaseTTL": {Name: "c", Limit: 1, Period: domain.MaxLeaseTTL + time.Microsecond, Algorithm: domain.Concurrency},
		"ZeroLimit":                         {Name: "c", Limit: 0, Period: m, Algorithm: domain.Concurrency},
	}
	for name, w := range badWindows {
		_, _, err := rs.Reserve(e.ctx, e.t0, []domain.Limit{rate, limitOf(e.key("bad"), w, 1)}, m)
		wantField("Reserve with "+name, "", err)
	}
	_, _, err := rs.Reserve(e.ctx, e.t0, nil, m)
	wantField("Reserve with no limits", "limits", err)
	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, _, err := rs.Reserve(cancelled, e.t0, ok, m); !errors.Is(err, context.Canceled) {
		e.t.Errorf("Reserve with a cancelled context: error %v, want one wrapping context.Canceled", err)
	}
	e.remaining("after the refused reservations", e.t0, ok, 1, 10)

	a := e.mustReserve("A", e.t0, m, ok...)
	for _, actual := range []int64{-1, domain.MaxLimit + 1} {
		_, err := rs.Settle(e.ctx, e.t0, a, ok, actual)
		wantField("Settle("+strconv.FormatInt(actual, 10)+")", "actual", err)
	}
	badLeases := map[string]domain.Lease{
		"Zero":        {},
		"UpperCaseID": {ID: "0123456789ABCDEF0123456789ABCDEF", At: a.At, TTL: m},
		"ShortID":     {ID: a.ID[:domain.LeaseIDLen-1], At: a.At, TTL: m},
		"ZeroTTL":     {ID: a.ID, At: a.At},
	}
	for name, lease := range badLeases {
		_, err := rs.Settle(e.ctx, e.t0, lease, ok, 0)
		wantField("Settle with the lease "+name, "", err)
		_, err = rs.Renew(e.ctx, e.t0, lease, ok, m)
		wantField("Renew with the lease "+name, "", err)
	}
	_, err = rs.Renew(e.ctx, e.t0, a, ok, 0)
	wantField("Renew with ttl 0", "ttl", err)
	// A well-formed lease no store returned holds nothing.
	unknown := domain.Lease{ID: "00000000000000000000000000000000", At: e.t0, TTL: m}
	e.settle("settle an unknown lease", e.t0, unknown, 0, domain.Expired, ok...)
	e.renewEnded("renew an unknown lease", e.t0, unknown, ok...)
	// A still holds what it took.
	e.remaining("after the invalid calls", e.t0, ok, 0, 9)
	e.settle("settle A", e.t0, a, 0, domain.Settled, ok...)
	e.remaining("after A settled", e.t0, ok, 1, 10)
}

func closedStoreRefusesReservations(e *env) {
	rs := e.reserver()
	if rs == nil {
		return
	}
	c := []domain.Limit{limitOf(e.key("c"), concurrency(1), 1)}
	a := e.mustReserve("A", e.t0, time.Minute, c...)
	if err := e.store.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	if _, _, err := rs.Reserve(e.ctx, e.t0, c, time.Minute); !errors.Is(err, domain.ErrStoreClosed) {
		e.t.Errorf("Reserve after Close: error %v, want one wrapping domain.ErrStoreClosed", err)
	}
	if _, err := rs.Settle(e.ctx, e.t0, a, c, 1); !errors.Is(err, domain.ErrStoreClosed) {
		e.t.Errorf("Settle after Close: error %v, want one wrapping domain.ErrStoreClosed", err)
	}
	if _, err := rs.Renew(e.ctx, e.t0, a, c, time.Minute); !errors.Is(err, domain.ErrStoreClosed) {
		e.t.Errorf("Renew after Close: error %v, want one wrapping domain.ErrStoreClosed", err)
	}
}

// contenders is how many goroutines reserve and settle at once in the
// contention cases (issue 18 asks for 200).
const contenders = 200

func reservationsUnderContentionAreExact(e *env) {
	rs := e.reserver()
	if rs == nil {
		return
	}
	// Rate windows far from full (at most 200·5·12 units), so that only
	// the concurrency window refuses; GCRA over MaxPeriod, so that its T
	// outlasts the case on a store with its own clock.
	const slots, big, rounds, tries = 8, 100_000, 5, 200
	c := limitOf(e.key("c"), concurrency(slots), 1)
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, big, 10*time.Minute), 1)
	g := limitOf(e.key("g"), window(domain.GCRA, big, domain.MaxPeriod), 1)
	var inFlight, peak, admitted, refused, units atomic.Int64
	var mu sync.Mutex
	var failures []string
	fail := func(s string) {
		mu.Lock()
		failures = append(failures, s)
		mu.Unlock()
	}
	e.releaseTogether(contenders, func(i int) (domain.Result, error) {
		rnd := rand.New(rand.NewPCG(uint64(i), 18))
		// Each goroutine tries until rounds of its reservations were
		// admitted, or it gave up after tries attempts.
		for done, tried := 0, 0; done < rounds && tried < tries; tried++ {
			cost := 1 + rnd.Int64N(3)
			limits := []domain.Limit{limitOf(c.Key, c.Window, cost), limitOf(sl.Key, sl.Window, cost), limitOf(g.Key, g.Window, cost)}
			r, lease, err := rs.Reserve(e.ctx, e.t0, limits, time.Hour)
			if err != nil {
				return r, err
			}
			if !r.Allowed {
				refused.Add(1)
				if r.Limiting != 0 {
					fail("a reservation was refused by limit " + strconv.Itoa(r.Limiting) + ", not by the concurrency window")
				}
				runtime.Gosched()
				continue
			}
			done++
			n := inFlight.Add(cost)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if n > slots {
				fail(strconv.FormatInt(n, 10) + " slots in flight, limit " + strconv.Itoa(slots))
			}
			actual := rnd.Int64N(13)
			// Hold the slots a moment, so that holders overlap, then
			// release them in the test's count before Settle frees them
			// in the store's.
			runtime.Gosched()
			inFlight.Add(-cost)
			got, err := rs.Settle(e.ctx, e.t0, lease, limits, actual)
			if err != nil {
				return r, err
			}
			if got != domain.Settled {
				fail("Settle of a fresh lease: " + got.String())
			}
			admitted.Add(1)
			units.Add(actual)
		}
		return domain.Result{}, nil
	})
	for _, f := range failures {
		e.t.Errorf("%s", f)
	}
	if admitted.Load() == 0 {
		e.t.Fatalf("no reservation was admitted")
	}
	e.t.Logf("%d goroutines, each reserving until %d were admitted (at most %d tries): %d admitted, %d refused by the concurrency window of %d (peak in flight %d), %d units settled",
		contenders, rounds, tries, admitted.Load(), refused.Load(), slots, peak.Load(), units.Load())
	u := units.Load()
	e.remaining("after every settle: the actual costs, and no slot held", e.t0, []domain.Limit{c, sl, g}, slots, big-u, big-u)
}

func crashedHoldersSlotsComeBackWithinTheTTL(e *env) {
	rs := e.reserver()
	if rs == nil {
		return
	}
	// Every admitted holder "crashes": it never settles. Its rate units
	// stay counted at the cost reserved; its slots come back at its
	// lease's expiry. On a store with its own clock the lease is short
	// (2 s) and the case polls (eventually).
	const slots, big, cost = 10, 100_000, 3
	ttl := time.Minute
	if e.ownClock {
		ttl = 2 * time.Second
	}
	c := limitOf(e.key("c"), concurrency(slots), 1)
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, big, 10*time.Minute), cost)
	var mu sync.Mutex
	var leases []domain.Lease
	reserved := time.Now()
	e.releaseTogether(contenders, func(int) (domain.Result, error) {
		r, lease, err := rs.Reserve(e.ctx, e.t0, []domain.Limit{c, sl}, ttl)
		if r.Allowed {
			mu.Lock()
			leases = append(leases, lease)
			mu.Unlock()
		}
		return r, err
	})
	if len(leases) != slots {
		e.t.Fatalf("%d goroutines on a concurrency window of %d: %d admitted, want exactly %d", contenders, slots, len(leases), slots)
	}
	// On a store with its own clock, only while the leases surely run:
	// a loaded machine may take a while to release 200 goroutines.
	if !e.ownClock || time.Since(reserved) < ttl/2 {
		e.remaining("while the crashed holders' leases run", e.t0, []domain.Limit{c, sl}, 0, big-slots*cost)
	}
	if !e.ownClock {
		e.remaining("a microsecond before their expiry", e.t0.Add(ttl-time.Microsecond), []domain.Limit{c, sl}, 0, big-slots*cost)
	}
	took := e.eventually("every slot back", reserved, ttl, func(now time.Time) bool {
		r := e.peek("peek", now, limitOf(c.Key, c.Window, 1), limitOf(sl.Key, sl.Window, 1))
		return r.Status(0).Remaining == slots
	})
	e.t.Logf("%d holders crashed with slots of a %v lease: every slot back %v after the reservation", slots, ttl, took)
	at := e.t0
	if !e.ownClock {
		at = e.t0.Add(ttl)
	}
	e.remaining("after the expiry: the reserved cost stays counted", at, []domain.Limit{c, sl}, slots, big-slots*cost)
	e.settle("settle a crashed holder's lease", at, leases[0], 0, domain.Expired, c, sl)
	e.remaining("after that settle", at, []domain.Limit{c, sl}, slots, big-slots*cost)
}

func twoStoresShareTheirLeases(e *env) {
	if e.reserver() == nil {
		return
	}
	other := e.sub(e.t, "")
	other.store = e.open()
	m := time.Minute
	c := limitOf(e.key("c"), concurrency(1), 1)
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, 10, 10*m), 4)
	a := e.mustReserve("first store reserves", e.t0, m, c, sl)
	other.remaining("the other store sees the lease", e.t0, []domain.Limit{c, sl}, 0, 6)
	if r, _ := other.reserve("the other store reserves", e.t0, m, c, sl); r.Allowed {
		e.t.Errorf("the other store took a slot the first one holds")
	}
	other.settle("the other store settles the first one's lease", e.t0, a, 1, domain.Settled, c, sl)
	e.settle("the first store settles it again", e.t0, a, 1, domain.AlreadySettled, c, sl)
	e.remaining("the first store after the other's settle", e.t0, []domain.Limit{c, sl}, 1, 9)
	other.renewEnded("the other store renews the settled lease", e.t0, a, c, sl)
}

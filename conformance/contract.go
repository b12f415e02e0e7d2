package conformance

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// The call's contract: a cancelled or expired context, invalid requests,
// the bounds of a request, the caller's slice, a closed store.

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

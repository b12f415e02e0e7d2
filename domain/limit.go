package domain

import (
	"fmt"
	"time"
)

// MaxLimits is how many limits one store request may carry. A sluice
// decision needs at most 9 (4 dimensions × 2 windows + the tenant-global
// key); the margin serves custom profiles.
const MaxLimits = 16

// MaxKeyLen bounds a store key, in bytes.
const MaxKeyLen = 512

// Limit is one check of a store request: consume Cost units on Key under
// Window.
//
// Several limits of one request may name the same Key when each is a
// SlidingLog window of the same Cost: the key is then one shared log that
// serves each of their windows (docs/adr/015). A store records the
// request's units in it once, not once per window; each window counts the
// log's units inside its own period and decides alone, and the request
// is admitted only when every window admits. The log keeps its units for
// the longest period among the windows that name it (with the store's
// grace, rule S5), so a sliding-log window of a principal reads the same
// units whatever its period. Settle refunds or charges the key once, and
// Reset(key) forgets every window of the log.
type Limit struct {
	Key    string
	Window Window
	// Cost is how many units the request consumes; at least 1 and at most
	// Window.Limit.
	Cost int64
}

// ValidateLimits checks a request for Store.Evaluate against the store
// contract: ValidateHeld's rules, and no Concurrency window (only a
// reservation holds one, docs/adr/012). It returns a *LimitError naming
// the first offence.
func ValidateLimits(limits []Limit) error {
	if err := ValidateHeld(limits); err != nil {
		return err
	}
	for i := range limits {
		if limits[i].Window.Algorithm == Concurrency {
			return &LimitError{Index: i, Field: "algorithm", Reason: "a concurrency window is held by a reservation (Reserve), not consumed by Evaluate"}
		}
	}
	return nil
}

// ValidateHeld checks a request for Store.Peek and Reserver.Reserve,
// which accept every kind of window: 1 to MaxLimits limits, each with a
// non-empty key of at most MaxKeyLen bytes, a valid window and a cost
// between 1 and the window's limit. A key named by several limits is one
// shared log (SharesLog): each of them must be a SlidingLog window of the
// same Cost, no two with the same limit and period. It returns a
// *LimitError naming the first offence.
func ValidateHeld(limits []Limit) error {
	if len(limits) == 0 {
		return &LimitError{Index: -1, Field: "limits", Reason: "at least one limit is required"}
	}
	if len(limits) > MaxLimits {
		return &LimitError{Index: -1, Field: "limits", Reason: fmt.Sprintf("at most %d limits per request, got %d", MaxLimits, len(limits))}
	}
	for i := range limits {
		l := &limits[i]
		switch {
		case l.Key == "":
			return &LimitError{Index: i, Field: "key", Reason: "must not be empty"}
		case len(l.Key) > MaxKeyLen:
			return &LimitError{Index: i, Field: "key", Reason: fmt.Sprintf("must be at most %d bytes", MaxKeyLen)}
		}
		if err := l.Window.validate(i); err != nil {
			return err
		}
		switch {
		case l.Cost < 1:
			return &LimitError{Index: i, Field: "cost", Reason: "must be at least 1"}
		case l.Cost > l.Window.Limit:
			return &LimitError{Index: i, Field: "cost", Reason: "must not exceed the window's limit"}
		}
		for j := 0; j < i; j++ {
			if limits[j].Key != l.Key {
				continue
			}
			switch {
			case l.Window.Algorithm != SlidingLog || limits[j].Window.Algorithm != SlidingLog:
				return &LimitError{Index: i, Field: "key", Reason: fmt.Sprintf("duplicates limit %d: only sliding-log windows share a key (one log, docs/adr/015)", j)}
			case l.Cost != limits[j].Cost:
				return &LimitError{Index: i, Field: "cost", Reason: fmt.Sprintf("differs from limit %d's, whose key it shares: one log records each request's units once (docs/adr/015)", j)}
			case l.Window.Period == limits[j].Window.Period && l.Window.Limit == limits[j].Window.Limit:
				return &LimitError{Index: i, Field: "key", Reason: fmt.Sprintf("duplicates limit %d: the same window twice on one log", j)}
			}
		}
	}
	return nil
}

// LimitStatus is what a store reports for one limit of a request.
type LimitStatus struct {
	// Allowed says whether this limit alone would admit the cost.
	Allowed bool
	// Remaining is the units left after the call: after consumption when the
	// whole request was allowed, before it otherwise (a refused request
	// consumes nothing).
	Remaining int64
	// RetryAfter is, for a limit that refused, the wait until it would admit
	// the same cost; zero otherwise.
	RetryAfter time.Duration
	// ResetAfter is the wait until the limit is back to its full quota if
	// nothing more is consumed.
	ResetAfter time.Duration
}

// Result is a store's answer to a request of N limits. A refusal is a
// result, not an error. Build one with NewResult, so that the aggregation
// rules below are the same in every store.
type Result struct {
	// Allowed is true when every limit admitted its cost; then, and only
	// then, the cost was consumed on every key.
	Allowed bool
	// Limiting is the index of the limit that decides the answer: when
	// refused, the refusing limit with the longest RetryAfter (lowest index
	// on a tie); when allowed, the limit with the least Remaining (lowest
	// index on a tie).
	Limiting int
	// Remaining is the minimum Remaining across every limit.
	Remaining int64
	// RetryAfter is zero when allowed, else the longest RetryAfter among the
	// refusing limits: the earliest instant at which the same request could
	// pass if nothing else is consumed meanwhile.
	RetryAfter time.Duration
	// ResetAfter is the ResetAfter of the limiting limit.
	ResetAfter time.Duration

	// perLimit[:n] holds the statuses in request order. A fixed array keeps
	// a decision free of allocation.
	n        int
	perLimit [MaxLimits]LimitStatus
}

// NewResult aggregates the per-limit statuses of one request, in request
// order, into a Result: Allowed, Limiting, Remaining, RetryAfter and
// ResetAfter follow the rules documented on Result's fields. It panics on
// more than MaxLimits statuses, a request no store accepts. It is small
// enough to be inlined, so that a store builds its Result in place.
func NewResult(statuses []LimitStatus) (r Result) {
	r.n = copy(r.perLimit[:], statuses)
	r.finish(len(statuses))
	return r
}

// Statuses returns the per-limit statuses, in request order.
func (r *Result) Statuses() []LimitStatus { return r.perLimit[:r.n] }

// Status returns the status of the i-th limit of the request.
func (r Result) Status(i int) LimitStatus { return r.perLimit[:r.n][i] }

// finish fills Allowed, Limiting, Remaining, RetryAfter and ResetAfter from
// perLimit[:n], once n statuses of want were copied.
func (r *Result) finish(want int) {
	if r.n != want {
		panic(fmt.Sprintf("domain.NewResult: %d statuses, at most %d", want, MaxLimits))
	}
	r.Allowed = true
	r.Limiting, r.RetryAfter, r.Remaining, r.ResetAfter = 0, 0, 0, 0
	if r.n == 0 {
		return
	}
	for i := 0; i < r.n; i++ {
		if !r.perLimit[i].Allowed {
			r.Allowed = false
			break
		}
	}
	r.Remaining = r.perLimit[0].Remaining
	for i := 0; i < r.n; i++ {
		s := &r.perLimit[i]
		if s.Remaining < r.Remaining {
			r.Remaining = s.Remaining
		}
		if r.Allowed {
			if s.Remaining < r.perLimit[r.Limiting].Remaining {
				r.Limiting = i
			}
			continue
		}
		if !s.Allowed && (r.perLimit[r.Limiting].Allowed || s.RetryAfter > r.RetryAfter) {
			r.Limiting, r.RetryAfter = i, s.RetryAfter
		}
	}
	r.ResetAfter = r.perLimit[r.Limiting].ResetAfter
}

// SharesLog reports whether limits[i] names the same key as an earlier
// limit of the request (a shared log, docs/adr/015), and that earlier
// limit's index: the first limit naming a key is the one a store reads
// and writes it for; the later ones only count in it.
func SharesLog(limits []Limit, i int) (first int, shared bool) {
	k := limits[i].Key
	for j := 0; j < i; j++ {
		if limits[j].Key == k {
			return j, true
		}
	}
	return i, false
}

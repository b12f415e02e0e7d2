package domain

import "time"

// Repeated is a store's answer to n identical requests (the same limits:
// keys, windows and costs) decided at one instant, in order, exactly as n
// sequential Evaluate calls at that instant would decide them: the first
// Admitted are allowed and consume their cost, every later one is refused
// and consumes nothing. It is what a store returns to a Limiter that
// coalesced a burst of decisions on one key set into one call
// (ports.Repeater).
//
// Identical requests at one instant make the answers follow from two
// results: the last admitted request's and the first refused one's. Use
// For to get the i-th request's own Result.
type Repeated struct {
	// N is how many requests were decided; Admitted how many of them, the
	// first ones, were allowed (0 ≤ Admitted ≤ N).
	N, Admitted int
	// Last is the Result of request Admitted-1, after its consumption;
	// meaningful only when Admitted > 0.
	Last Result
	// Refused is the Result every request from Admitted on got (refused,
	// nothing consumed); meaningful only when Admitted < N.
	Refused Result
}

// For returns the Result of the i-th request (0 ≤ i < N) of limits, the
// limits every request carried. An admitted request i sees, on each limit,
// the units the k−1−i requests after it have not yet consumed (k =
// Admitted): Remaining larger by (k−1−i)·Cost, and for a GCRA limit a
// ResetAfter shorter by (k−1−i)·Cost emission intervals. A sliding log's
// ResetAfter is that of its newest unit, the same for every request of
// the instant.
func (r *Repeated) For(i int, limits []Limit) Result {
	if i >= r.Admitted {
		return r.Refused
	}
	back := int64(r.Admitted - 1 - i)
	if back == 0 {
		return r.Last
	}
	var st [MaxLimits]LimitStatus
	for j, s := range r.Last.Statuses() {
		l := &limits[j]
		s.Remaining += back * l.Cost
		if l.Window.Algorithm == GCRA {
			s.ResetAfter -= time.Duration(back*l.Cost*l.Window.EmissionMicros()) * time.Microsecond
		}
		st[j] = s
	}
	return NewResult(st[:r.Last.n])
}

package domain

import "sort"

// Settling a reservation on a rate window (docs/adr/012): the window then
// counts the actual cost instead of the cost reserved. Refund takes the
// difference back, Charge adds it. Both are what every store does, so they
// live beside the state rules of docs/adr/009.

// Refund takes back d units of a reservation made at the instant at, on a
// key read at now under w, the reservation's window. It never takes more
// than the key still counts:
//
//   - a sliding log loses up to d of the units stamped at at, and nothing
//     when they already left w at now (at ≤ now − Period);
//   - a GCRA state moves its TAT back by d emission intervals (the
//     interval it was written with), never before now:
//     TAT' = max(TAT − d·T_w, now).
//
// The key's state is refunded in the algorithm it is stored in: a key
// rewritten in the other algorithm since the reservation (its window
// changed) gives back what its converted state still holds.
func (k *KeyState) Refund(now, at int64, w Window, d int64) {
	if d <= 0 {
		return
	}
	if k.algo == GCRA {
		k.gcra.refund(now, d)
		return
	}
	if at <= now-w.PeriodMicros() {
		return
	}
	k.log.remove(at, d)
}

// Charge adds d units at now on a key under w, even past the window's
// limit: a charge is recorded, never refused. A sliding log records at
// most Limit of them (beyond that the window is full until now + Period
// anyway); a GCRA state moves its TAT on by d emission intervals, at most
// MaxPeriod ahead of now: TAT' = min(max(TAT, now) + d·T, now + MaxPeriod).
// The key is rewritten in w's algorithm, the other one's state converted
// first (S6 of docs/adr/009).
func (k *KeyState) Charge(now int64, w Window, d, grace int64) {
	if d <= 0 {
		return
	}
	if w.Algorithm == GCRA {
		t := w.EmissionMicros()
		base := max(k.tat(now, w, grace), now)
		// Committed converts the state (S6) and writes it under t; the
		// charge then replaces its TAT.
		k.Committed(now, w, 0, grace, LimitStatus{})
		k.gcra = GCRAState{TAT: min(base+unitsSpan(d, t), now+MaxPeriodMicros), Interval: t}
		return
	}
	k.Committed(now, w, min(d, w.Limit), grace, LimitStatus{})
}

// refund moves the TAT back by d intervals, never before now.
func (s *GCRAState) refund(now, d int64) {
	if s.Interval == 0 || s.TAT <= now {
		return
	}
	if d > (s.TAT-now)/s.Interval {
		s.TAT = now
		return
	}
	s.TAT -= d * s.Interval
}

// remove forgets up to d of the units recorded at the instant at.
func (s *LogState) remove(at, d int64) {
	live := s.entries[s.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].at >= at })
	if i == len(live) || live[i].at != at {
		return
	}
	j := s.head + int32(i)
	n := min(d, s.entries[j].n)
	s.total -= n
	if s.entries[j].n -= n; s.entries[j].n > 0 {
		s.removed(j, n, false)
		return
	}
	copy(s.entries[j:], s.entries[j+1:])
	s.entries = s.entries[:len(s.entries)-1]
	s.removed(j, n, true)
	if s.head == s.size() {
		s.Reset()
	}
}

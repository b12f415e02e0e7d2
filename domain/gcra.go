package domain

import "time"

// MaxPeriodMicros is MaxPeriod in microseconds: the furthest a converted
// GCRA state may reach ahead of now (rule S1 of docs/adr/009).
const MaxPeriodMicros = int64(MaxPeriod / time.Microsecond)

// GCRAState is the counting state of one GCRA key: the theoretical arrival
// time (unix microseconds) of the next unit, and the emission interval it
// was written with. A key admits cost units when max(TAT, now) + cost·T −
// now ≤ T·Limit, where T is the window's emission interval; it then sets TAT
// to that sum.
//
// The zero value is the empty state: a key never written, with its full
// quota at any instant (before 1970 too), distinct from a TAT of 0. A state
// written under another emission interval (the window's limit or period
// changed) keeps its consumed units: it reads as TAT' = now + min(u·T,
// MaxPeriodMicros), u = ⌈(TAT − now)/Interval⌉ (rule S1 of docs/adr/009;
// a partly drained unit counts whole, so a change never admits more).
//
// A GCRAState is not safe for simultaneous use.
type GCRAState struct {
	// TAT is the theoretical arrival time, meaningful when Interval > 0.
	TAT int64
	// Interval is the emission interval (µs) TAT was written with; 0 marks
	// the empty state. A value stored without its interval (the Redis
	// script v2's) is read with Interval set to the reading window's.
	Interval int64
}

// Empty reports whether the state was never written.
func (s *GCRAState) Empty() bool { return s.Interval == 0 }

// Outstanding returns the units still outstanding at now: ⌈(TAT −
// now)/Interval⌉, 0 for an empty state or a TAT not after now.
func (s *GCRAState) Outstanding(now int64) int64 {
	if s.Interval == 0 || s.TAT <= now {
		return 0
	}
	d := s.TAT - now
	return (d + s.Interval - 1) / s.Interval
}

// tatUnder returns the TAT the state reads as under emission interval t at
// now: now for an empty or drained state, TAT itself when t is the interval
// it was written with, else the converted TAT' of rule S1.
func (s *GCRAState) tatUnder(now, t int64) int64 {
	switch {
	case s.Interval == 0 || s.TAT <= now:
		return now
	case s.Interval == t:
		return s.TAT
	}
	return now + unitsSpan(s.Outstanding(now), t)
}

// unitsSpan returns min(u·t, MaxPeriodMicros) without overflow.
func unitsSpan(u, t int64) int64 {
	if u > MaxPeriodMicros/t {
		return MaxPeriodMicros
	}
	return min(u*t, MaxPeriodMicros)
}

// Check reports whether cost units would be admitted at now, without
// consuming anything.
func (s *GCRAState) Check(now int64, w Window, cost int64) LimitStatus {
	t := w.EmissionMicros()
	return gcraCheck(s.tatUnder(now, t), now, t, w.Limit, cost)
}

// gcraCheck is GCRA's check of cost units at now on a key whose TAT (as
// read under t) is tat.
func gcraCheck(tat, now, t, limit, cost int64) LimitStatus {
	capacity := t * limit
	base := max(tat, now)
	next := base + cost*t
	st := LimitStatus{}
	if next-now <= capacity {
		st.Allowed = true
	} else {
		st.RetryAfter = Micros(next - capacity - now)
	}
	st.Remaining = max(quo(capacity-(base-now), t), 0)
	st.ResetAfter = Micros(base - now)
	return st
}

// gcraFit returns how many requests of cost units, one after another at
// now, a key whose TAT (as read under t) is tat admits.
func gcraFit(tat, now, t, limit, cost int64) int64 {
	room := t*limit - (max(tat, now) - now)
	if room <= 0 {
		return 0
	}
	return room / (cost * t)
}

// Committed consumes cost units at now and returns the status after
// consumption. Call it only after Check allowed them. The state is then
// written under the window's emission interval.
func (s *GCRAState) Committed(now int64, w Window, cost int64, checked LimitStatus) LimitStatus {
	return s.committed(now, w.EmissionMicros(), w.Limit, cost, checked)
}

// committed is Committed under the window's emission interval t and limit.
func (s *GCRAState) committed(now, t, limit, cost int64, checked LimitStatus) LimitStatus {
	s.TAT = max(s.tatUnder(now, t), now) + cost*t
	s.Interval = t
	checked.Remaining = max(quo(t*limit-(s.TAT-now), t), 0)
	checked.ResetAfter = Micros(s.TAT - now)
	return checked
}

// Idle reports whether the key is back to its full quota at now.
func (s *GCRAState) Idle(now int64) bool { return s.Interval == 0 || s.TAT <= now }

package domain

// GCRAState is the counting state of one GCRA key: the theoretical arrival
// time (unix microseconds) of the next unit. A key admits cost units when
// max(TAT, now) + cost·T − now ≤ T·Limit, where T is the window's emission
// interval; it then sets TAT to that sum.
//
// The zero value is a key with its full quota. A GCRAState is not safe for
// simultaneous use.
type GCRAState struct {
	TAT int64
}

// Check reports whether cost units would be admitted at now, without
// consuming anything.
func (s *GCRAState) Check(now int64, w Window, cost int64) LimitStatus {
	t := w.EmissionMicros()
	capacity := t * w.Limit
	base := max(s.TAT, now)
	next := base + cost*t
	st := LimitStatus{}
	if next-now <= capacity {
		st.Allowed = true
	} else {
		st.RetryAfter = Micros(next - capacity - now)
	}
	st.Remaining = max((capacity-(base-now))/t, 0)
	st.ResetAfter = Micros(base - now)
	return st
}

// Committed consumes cost units at now and returns the status after
// consumption. Call it only after Check allowed them.
func (s *GCRAState) Committed(now int64, w Window, cost int64, checked LimitStatus) LimitStatus {
	t := w.EmissionMicros()
	s.TAT = max(s.TAT, now) + cost*t
	checked.Remaining = max((t*w.Limit-(s.TAT-now))/t, 0)
	checked.ResetAfter = Micros(s.TAT - now)
	return checked
}

// Idle reports whether the key is back to its full quota at now.
func (s *GCRAState) Idle(now int64) bool { return s.TAT <= now }

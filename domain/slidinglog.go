package domain

// LogState is the counting state of one SlidingLog key: the admitted units
// with their timestamps (unix microseconds), oldest first. Units admitted at
// the same instant share one entry, so a key holds at most Limit entries.
//
// The zero value is an empty log. A LogState is not safe for simultaneous
// use; a store guards it with its own lock.
type LogState struct {
	entries []logEntry
	total   int64 // sum of entries[i].n
}

type logEntry struct {
	at int64 // unix microseconds
	n  int64 // units admitted at `at`
}

// trim drops the entries that left the window (now-period, now].
func (s *LogState) trim(now int64, w Window) {
	cutoff := now - w.PeriodMicros()
	i := 0
	for i < len(s.entries) && s.entries[i].at <= cutoff {
		s.total -= s.entries[i].n
		i++
	}
	if i > 0 {
		n := copy(s.entries, s.entries[i:])
		clear(s.entries[n:])
		s.entries = s.entries[:n]
	}
}

// Check reports whether cost units would be admitted at now, without
// consuming anything. Expired entries are dropped on the way, which changes
// no answer.
func (s *LogState) Check(now int64, w Window, cost int64) LimitStatus {
	s.trim(now, w)
	st := LimitStatus{Remaining: max(w.Limit-s.total, 0)}
	if s.total+cost <= w.Limit {
		st.Allowed = true
	} else {
		// The request passes once enough of the oldest units leave.
		need := s.total + cost - w.Limit
		for _, e := range s.entries {
			need -= e.n
			if need <= 0 {
				st.RetryAfter = Micros(e.at + w.PeriodMicros() - now)
				break
			}
		}
	}
	if len(s.entries) > 0 {
		st.ResetAfter = Micros(s.entries[len(s.entries)-1].at + w.PeriodMicros() - now)
	}
	return st
}

// Commit records cost units at now. Call it only after Check allowed them
// (and, across keys, after every Check of the request allowed).
func (s *LogState) Commit(now int64, w Window, cost int64) {
	s.total += cost
	n := len(s.entries)
	switch {
	case n == 0 || s.entries[n-1].at < now:
		s.entries = append(s.entries, logEntry{at: now, n: cost})
	case s.entries[n-1].at == now:
		s.entries[n-1].n += cost
	default:
		// The clock went backwards: keep the log ordered.
		i := n - 1
		for i > 0 && s.entries[i-1].at > now {
			i--
		}
		if i > 0 && s.entries[i-1].at == now {
			s.entries[i-1].n += cost
			return
		}
		s.entries = append(s.entries, logEntry{})
		copy(s.entries[i+1:], s.entries[i:])
		s.entries[i] = logEntry{at: now, n: cost}
	}
}

// Committed applies Commit and returns the status after consumption.
func (s *LogState) Committed(now int64, w Window, cost int64, checked LimitStatus) LimitStatus {
	s.Commit(now, w, cost)
	checked.Remaining = max(w.Limit-s.total, 0)
	checked.ResetAfter = Micros(s.entries[len(s.entries)-1].at + w.PeriodMicros() - now)
	return checked
}

// Len returns the number of admitted units still recorded (expired ones
// included until the next Check).
func (s *LogState) Len() int64 { return s.total }

// Idle reports whether the log holds nothing inside the window at now: the
// key may then be dropped without changing any answer.
func (s *LogState) Idle(now int64, w Window) bool {
	n := len(s.entries)
	return n == 0 || s.entries[n-1].at <= now-w.PeriodMicros()
}

// Reset empties the log.
func (s *LogState) Reset() {
	clear(s.entries)
	s.entries = s.entries[:0]
	s.total = 0
}

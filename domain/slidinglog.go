package domain

// LogState is the counting state of one SlidingLog key: the admitted units
// with their timestamps (unix microseconds), oldest first. Units admitted at
// the same instant share one entry, so a key holds at most Limit entries.
//
// The zero value is an empty log. A LogState is not safe for simultaneous
// use; a store guards it with its own lock.
type LogState struct {
	// entries[head:] are the recorded entries; entries[:head] have left the
	// window and wait to be compacted away, so that expiring the oldest
	// entry costs O(1) instead of a copy of the whole log.
	entries []logEntry
	head    int
	total   int64 // sum of entries[head:].n
}

// compactAt is how many expired entries may sit before the live ones
// before the log is compacted (and only once they are half the slice).
const compactAt = 32

type logEntry struct {
	at int64 // unix microseconds
	n  int64 // units admitted at `at`
}

// trim drops the entries that left the window (now-period, now].
func (s *LogState) trim(now int64, w Window) {
	cutoff := now - w.PeriodMicros()
	for s.head < len(s.entries) && s.entries[s.head].at <= cutoff {
		s.total -= s.entries[s.head].n
		s.head++
	}
	switch {
	case s.head == len(s.entries):
		s.entries, s.head = s.entries[:0], 0
	case s.head >= compactAt && 2*s.head >= len(s.entries):
		n := copy(s.entries, s.entries[s.head:])
		s.entries, s.head = s.entries[:n], 0
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
		for _, e := range s.entries[s.head:] {
			need -= e.n
			if need <= 0 {
				st.RetryAfter = Micros(e.at + w.PeriodMicros() - now)
				break
			}
		}
	}
	if len(s.entries) > s.head {
		st.ResetAfter = Micros(s.entries[len(s.entries)-1].at + w.PeriodMicros() - now)
	}
	return st
}

// commit records cost units at now. Call it only after Check allowed them
// (and, across keys, after every Check of the request allowed).
func (s *LogState) commit(now int64, w Window, cost int64) {
	s.total += cost
	n := len(s.entries)
	switch {
	case n == s.head || s.entries[n-1].at < now:
		s.entries = append(s.entries, logEntry{at: now, n: cost})
	case s.entries[n-1].at == now:
		s.entries[n-1].n += cost
	default:
		// The clock went backwards: keep the log ordered.
		i := n - 1
		for i > s.head && s.entries[i-1].at > now {
			i--
		}
		if i > s.head && s.entries[i-1].at == now {
			s.entries[i-1].n += cost
			return
		}
		s.entries = append(s.entries, logEntry{})
		copy(s.entries[i+1:], s.entries[i:])
		s.entries[i] = logEntry{at: now, n: cost}
	}
}

// Committed records cost units at now and returns the status after
// consumption. Call it only after Check allowed them (for a request, after
// every Check of the request allowed).
func (s *LogState) Committed(now int64, w Window, cost int64, checked LimitStatus) LimitStatus {
	s.commit(now, w, cost)
	checked.Remaining = max(w.Limit-s.total, 0)
	checked.ResetAfter = Micros(s.entries[len(s.entries)-1].at + w.PeriodMicros() - now)
	return checked
}

// Len returns the number of admitted units still recorded (expired ones
// included until the next Check).
func (s *LogState) Len() int64 { return s.total }

// Entries returns how many distinct instants the log records, the measure
// of its memory; Cap the entries its backing array can hold.
func (s *LogState) Entries() int { return len(s.entries) - s.head }

// Cap returns how many entries the log can hold without growing.
func (s *LogState) Cap() int { return cap(s.entries) }

// Idle reports whether the log holds nothing inside the window at now: the
// key may then be dropped without changing any answer.
func (s *LogState) Idle(now int64, w Window) bool {
	n := len(s.entries)
	return n == s.head || s.entries[n-1].at <= now-w.PeriodMicros()
}

// Reset empties the log.
func (s *LogState) Reset() {
	s.entries, s.head, s.total = s.entries[:0], 0, 0
}

package domain

// LogState is the counting state of one SlidingLog key: the admitted units
// with their timestamps (unix microseconds), oldest first. Units admitted at
// the same instant share one entry, so a key holds at most Limit entries
// per period it keeps.
//
// A request counts the units in (now−Period, ∞): units recorded at a later
// instant than its own count too, so a clock that goes backwards never
// admits more. Check and Committed forget a unit for good once it left the
// window at now; KeyState keeps units longer, for callers whose instants
// lag another's (rule S5 of docs/adr/009).
//
// The zero value is an empty log. A LogState is not safe for simultaneous
// use; a store guards it with its own lock.
type LogState struct {
	// entries[head:] are the recorded entries; entries[:head] were
	// forgotten and wait to be compacted away, so that forgetting the
	// oldest entry costs O(1) instead of a copy of the whole log.
	entries []logEntry
	// head and mid are int32, as no log holds 2³¹ entries: a smaller
	// state is a smaller entry in a store.
	head  int32
	mid   [2]int32
	total int64 // sum of entries[head:].n
	// entries[head:mid[c]] are recorded but at or before the cutoff of
	// the last count with cursor c (now−Period): kept for a lagging
	// caller, not counted at that instant (mid is declared with head).
	// early[c] is their sum. A cursor moves with the instants asked, in
	// amortised O(1) while they advance. Cursor 0 serves the log's
	// longest window; cursor 1 a shorter window sharing the log
	// (docs/adr/015), which would otherwise move cursor 0 back and forth
	// across every unit between the two cutoffs at each decision.
	early [2]int64
}

// Cursors of a log (LogState.mid).
const (
	longCursor  = 0
	shortCursor = 1
)

// compactAt is how many forgotten entries may sit before the live ones
// before the log is compacted (and only once they are half the slice).
const compactAt = 32

type logEntry struct {
	at int64 // unix microseconds
	n  int64 // units admitted at `at`
}

// size returns the length of entries.
func (s *LogState) size() int32 { return int32(len(s.entries)) }

// forget drops, for good, the entries at or before cut.
func (s *LogState) forget(cut int64) {
	for s.head < s.size() && s.entries[s.head].at <= cut {
		n := s.entries[s.head].n
		s.total -= n
		for c := range s.mid {
			if s.head < s.mid[c] {
				s.early[c] -= n
			}
		}
		s.head++
	}
	for c := range s.mid {
		if s.mid[c] < s.head {
			s.mid[c], s.early[c] = s.head, 0
		}
	}
	switch {
	case s.head == s.size():
		s.Reset()
	case s.head >= compactAt && 2*s.head >= s.size():
		n := copy(s.entries, s.entries[s.head:])
		s.mid[0] -= s.head
		s.mid[1] -= s.head
		s.entries, s.head = s.entries[:n], 0
	}
}

// added records, for the cursors, that n units were added to the entry
// at index i (inserted there when inserted), the entries after it moving
// up by one.
func (s *LogState) added(i int32, n int64, inserted bool) {
	for c := range s.mid {
		if i < s.mid[c] {
			s.early[c] += n
			if inserted {
				s.mid[c]++
			}
		}
	}
}

// removed records, for the cursors, that n units were taken from the
// entry at index i (removed from the log when removed), the entries after
// it moving down by one.
func (s *LogState) removed(i int32, n int64, removed bool) {
	for c := range s.mid {
		if i < s.mid[c] {
			s.early[c] -= n
			if removed {
				s.mid[c]--
			}
		}
	}
}

// seek places cursor c so that entries[head:mid[c]] are exactly those at
// or before cut, and returns the units after cut.
func (s *LogState) seek(c int, cut int64) int64 {
	mid, early := s.mid[c], s.early[c]
	for mid > s.head && s.entries[mid-1].at > cut {
		mid--
		early -= s.entries[mid].n
	}
	for mid < s.size() && s.entries[mid].at <= cut {
		early += s.entries[mid].n
		mid++
	}
	s.mid[c], s.early[c] = mid, early
	return s.total - early
}

// Count returns the units a window of period p counts at now: those
// recorded after now−p, later instants included. It forgets nothing.
func (s *LogState) Count(now, p int64) int64 { return s.seek(longCursor, now-p) }

// Check reports whether cost units would be admitted at now, without
// consuming anything. Entries that left the window at now are forgotten
// on the way, which changes no answer at now or later.
func (s *LogState) Check(now int64, w Window, cost int64) LimitStatus {
	p := w.PeriodMicros()
	s.forget(now - p)
	return s.check(longCursor, now, p, w.Limit, cost)
}

// check is Check, for a window of period p (µs) and limit, with cursor
// c, without forgetting anything: it counts the units after now−p,
// whatever older ones the log still keeps.
func (s *LogState) check(c int, now, p, limit, cost int64) LimitStatus {
	counted := s.seek(c, now-p)
	st := LimitStatus{Remaining: max(limit-counted, 0)}
	if counted+cost <= limit {
		st.Allowed = true
	} else {
		// The request passes once enough of the oldest counted units leave.
		need := counted + cost - limit
		for _, e := range s.entries[s.mid[c]:] {
			need -= e.n
			if need <= 0 {
				st.RetryAfter = Micros(e.at + p - now)
				break
			}
		}
	}
	if s.size() > s.mid[c] {
		st.ResetAfter = Micros(s.entries[len(s.entries)-1].at + p - now)
	}
	return st
}

// fit returns how many requests of cost units, one after another at now,
// the log admits under w, counted with cursor c.
func (s *LogState) fit(c int, now int64, w Window, cost int64) int64 {
	return max((w.Limit-s.seek(c, now-w.PeriodMicros()))/cost, 0)
}

// commit records cost units at now. Call it only after Check allowed them
// (and, across keys, after every Check of the request allowed).
func (s *LogState) commit(now int64, cost int64) {
	s.total += cost
	n := s.size()
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
			s.added(i-1, cost, false)
			return
		}
		s.entries = append(s.entries, logEntry{})
		copy(s.entries[i+1:], s.entries[i:])
		s.entries[i] = logEntry{at: now, n: cost}
		s.added(i, cost, true)
	}
}

// Committed records cost units at now and returns the status after
// consumption. Call it only after Check allowed them (for a request, after
// every Check of the request allowed).
func (s *LogState) Committed(now int64, w Window, cost int64, checked LimitStatus) LimitStatus {
	return s.committed(longCursor, now, w.PeriodMicros(), w.Limit, cost, checked)
}

// committed is Committed for a window of period p (µs) and limit,
// counted with cursor c.
func (s *LogState) committed(c int, now, p, limit, cost int64, checked LimitStatus) LimitStatus {
	s.commit(now, cost)
	return s.after(c, now, p, limit, checked)
}

// after is the status of a window of period p (µs) and limit at now once
// the request checked was recorded in the log: its Remaining and
// ResetAfter read from the log as it now is, with cursor c.
func (s *LogState) after(c int, now, p, limit int64, checked LimitStatus) LimitStatus {
	checked.Remaining = max(limit-s.seek(c, now-p), 0)
	checked.ResetAfter = Micros(s.entries[len(s.entries)-1].at + p - now)
	return checked
}

// Len returns the number of admitted units still recorded, counted or not.
func (s *LogState) Len() int64 { return s.total }

// Entries returns how many distinct instants the log records, the measure
// of its memory; Cap the entries its backing array can hold.
func (s *LogState) Entries() int { return int(s.size() - s.head) }

// Cap returns how many entries the log can hold without growing.
func (s *LogState) Cap() int { return cap(s.entries) }

// Idle reports whether the log holds nothing inside the window at now: the
// key may then be dropped without changing any answer.
func (s *LogState) Idle(now int64, w Window) bool { return s.idleAfter(now - w.PeriodMicros()) }

// idleAfter reports whether the log records nothing after cut.
func (s *LogState) idleAfter(cut int64) bool {
	n := s.size()
	return n == s.head || s.entries[n-1].at <= cut
}

// Reset empties the log, keeping its backing array.
func (s *LogState) Reset() {
	s.entries, s.head, s.total, s.mid, s.early = s.entries[:0], 0, 0, [2]int32{}, [2]int64{}
}

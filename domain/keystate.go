package domain

import "time"

// KeyState is the counting state of one key, whichever algorithm wrote it:
// a sliding log or a GCRA state, read by a window of either algorithm
// under the rules every sluice store follows (docs/adr/009):
//
//   - S1: a GCRA state carries its emission interval; read under another
//     one it keeps its outstanding units (GCRAState).
//   - S2: a sliding log read by a GCRA window: the log's units after
//     now−P (P the GCRA window's period) read as TAT = now + units·T.
//   - S3: a GCRA state read by a sliding-log window: u = ⌈(TAT−now)/T_w⌉
//     outstanding units, all stamped at now (they leave at now+P).
//   - S4: a sliding log under another limit or period: its timestamps
//     speak for themselves.
//   - S5: a call at now forgets a unit of a sliding log for good only
//     once it is at or before now − P − G, P the longest period a
//     sliding-log window wrote the log with, G = min(grace, P): a caller
//     lagging another by less than G sees every unit of its window. Units
//     recorded ahead of now count for every caller, and are no clock: an
//     allotment records its units ahead (docs/adr/019).
//   - S6: an admitted request rewrites the key in its window's algorithm,
//     the old state converted by S1–S3 first.
//
// Peek is Check alone (S7). grace is the store's, in microseconds, the
// same on every call.
//
// The zero value is a key never written. A KeyState is not safe for
// simultaneous use; a store guards it with its own lock.
type KeyState struct {
	log  LogState
	gcra GCRAState
	// span is the longest period (µs) of the sliding-log windows that
	// wrote the log: what it keeps (S5), so that a longer window of the
	// same key still counts its units after a shorter one used it.
	span int64
	algo Algorithm // which of log and gcra holds the state
}

// Algorithm returns the algorithm the state was last written with; a key
// never written reads as SlidingLog with an empty log.
func (k *KeyState) Algorithm() Algorithm { return k.algo }

// trimLog forgets the log's units that no window of the key (nor one of
// period p, the window about to read it) can count any more at now, nor
// for a caller lagging now by less than the grace (S5).
func (k *KeyState) trimLog(now, p, grace int64) {
	span := max(k.span, p)
	if span == 0 {
		return
	}
	k.log.forget(now - span - min(grace, span))
}

// tat returns the TAT the key reads as under the GCRA window w at now (S1,
// S2): now when nothing is outstanding.
func (k *KeyState) tat(now int64, w Window, grace int64) int64 {
	return k.tatUnder(now, w, w.EmissionMicros(), grace)
}

// tatUnder is tat with w's emission interval t already computed: a
// decision divides once per key, not once per step.
func (k *KeyState) tatUnder(now int64, w Window, t, grace int64) int64 {
	if k.algo == GCRA {
		return k.gcra.tatUnder(now, t)
	}
	k.trimLog(now, w.PeriodMicros(), grace)
	return now + k.log.Count(now, w.PeriodMicros())*t
}

// Check reports whether cost units would be admitted at now under w,
// without consuming anything. Units that no window can count any more are
// forgotten on the way (S5), which changes no answer.
func (k *KeyState) Check(now int64, w Window, cost, grace int64) LimitStatus {
	switch {
	case w.Algorithm == GCRA:
		t := w.emissionIs(k.gcra.Interval)
		return gcraCheck(k.tatUnder(now, w, t, grace), now, t, w.Limit, cost)
	case k.algo == GCRA:
		return stampedCheck(k.gcra.Outstanding(now), w, cost)
	}
	k.trimLog(now, w.PeriodMicros(), grace)
	p := w.PeriodMicros()
	return k.log.check(k.cursor(p), now, p, w.Limit, cost)
}

// cursor returns the log's cursor that counts for a window of period p:
// the short one for a window shorter than the log's longest (a shared
// log, docs/adr/015), so that each window's count moves in amortised
// O(1).
func (k *KeyState) cursor(p int64) int {
	if p < k.span {
		return shortCursor
	}
	return longCursor
}

// stampedCheck is a sliding log's check at now of cost units on a key
// holding u units stamped at now (S3): they leave together one period on.
func stampedCheck(u int64, w Window, cost int64) LimitStatus {
	st := LimitStatus{Remaining: max(w.Limit-u, 0), Allowed: u+cost <= w.Limit}
	if !st.Allowed {
		st.RetryAfter = w.Period
	}
	if u > 0 {
		st.ResetAfter = w.Period
	}
	return st
}

// Fit returns how many requests of cost units, one after another at now,
// the key admits under w: what n sequential Evaluate calls of one limit
// would admit (domain.Repeated), computed in O(1) for GCRA and in the
// log's amortised O(1) for a sliding log. Call it after Check at now.
func (k *KeyState) Fit(now int64, w Window, cost, grace int64) int64 {
	switch {
	case w.Algorithm == GCRA:
		t := w.EmissionMicros()
		return gcraFit(k.tatUnder(now, w, t, grace), now, t, w.Limit, cost)
	case k.algo == GCRA:
		return max((w.Limit-k.gcra.Outstanding(now))/cost, 0)
	}
	k.trimLog(now, w.PeriodMicros(), grace)
	return k.log.fit(k.cursor(w.PeriodMicros()), now, w, cost)
}

// Committed consumes cost units at now under w and returns the status
// after consumption, checked being what Check returned. Call it only after
// Check allowed them (for a request, after every Check of the request
// allowed). The key is rewritten in w's algorithm, the other algorithm's
// state converted first (S6).
func (k *KeyState) Committed(now int64, w Window, cost, grace int64, checked LimitStatus) LimitStatus {
	if w.Algorithm == GCRA {
		t := w.emissionIs(k.gcra.Interval)
		if k.algo != GCRA {
			k.gcra = GCRAState{}
			if tat := k.tatUnder(now, w, t, grace); tat > now {
				k.gcra = GCRAState{TAT: tat, Interval: t}
			}
			// The zero value releases the log's backing array.
			k.log, k.span, k.algo = LogState{}, 0, GCRA
		}
		return k.gcra.committed(now, t, w.Limit, cost, checked)
	}
	p := w.PeriodMicros()
	k.logFor(now, p, grace)
	return k.log.committed(k.cursor(p), now, p, w.Limit, cost, checked)
}

// logFor readies the key to record in its sliding log at now for a
// window of period p (µs): a GCRA state converted first (S3, S6), the
// log kept for p at least, what no window counts any more forgotten
// (S5).
func (k *KeyState) logFor(now, p, grace int64) {
	if k.algo == GCRA {
		u := k.gcra.Outstanding(now)
		k.gcra, k.algo = GCRAState{}, SlidingLog
		k.log.Reset()
		if u > 0 {
			k.log.commit(now, u)
		}
	}
	k.span = max(k.span, p)
	k.trimLog(now, p, grace)
}

// CommittedShared records cost units at now, once, in a sliding log that
// several windows of the request share (docs/adr/015), and returns the
// status after consumption of w, one of them, checked being what Check
// returned for it. The log is kept for period, the longest among those
// windows, so that it holds every unit each of them counts (S5). Call it
// only after every Check of the request allowed; the other windows of
// the log then read theirs with SharedCommitted.
func (k *KeyState) CommittedShared(now int64, period time.Duration, w Window, cost, grace int64, checked LimitStatus) LimitStatus {
	k.logFor(now, int64(period/time.Microsecond), grace)
	k.log.commit(now, cost)
	return k.SharedCommitted(now, w, checked)
}

// SharedCommitted returns the status after consumption of the
// sliding-log window w on a key whose log it shares with other windows of
// the request (docs/adr/015), checked being what Check returned for w:
// the request's units were recorded once, by Committed under the log's
// window (the longest period among the windows, so that the log keeps
// what each of them counts), and w reads its Remaining and ResetAfter
// from that log, as it would from a log of its own holding the same
// units. Call it only after that Committed.
func (k *KeyState) SharedCommitted(now int64, w Window, checked LimitStatus) LimitStatus {
	p := w.PeriodMicros()
	return k.log.after(k.cursor(p), now, p, w.Limit, checked)
}

// Idle reports whether dropping the key changes no answer for any caller
// whose instant is at or after now: a GCRA state back to its full quota,
// a log with no unit inside its longest window. A store passes its latest
// instant minus its grace.
func (k *KeyState) Idle(now int64) bool {
	if k.algo == GCRA {
		return k.gcra.Idle(now)
	}
	return k.span == 0 || k.log.idleAfter(now-k.span)
}

// LogCap returns how many entries the sliding log's backing array holds,
// the measure of the key's memory beyond a fixed size.
func (k *KeyState) LogCap() int { return k.log.Cap() }

// Reset forgets every unit counted, keeping the log's backing array.
func (k *KeyState) Reset() {
	k.log.Reset()
	k.gcra, k.algo, k.span = GCRAState{}, SlidingLog, 0
}

// Release forgets every unit counted and the log's backing array.
func (k *KeyState) Release() { *k = KeyState{} }

package local

import (
	"sync"
	"unsafe"

	"github.com/sluicehq/sluice/domain"
)

// entry is the counting state of one key. Ristretto and the directory hold
// pointers to it; the state is mutated in place behind the pointer, so a
// value ristretto holds never goes stale.
type entry struct {
	key string // immutable

	mu sync.Mutex
	// Guarded by mu.
	algo   domain.Algorithm // which of log and gcra holds the state
	dead   bool             // left the directory: look the key up again
	period int64            // period (µs) of the window last consumed under
	log    domain.LogState
	gcra   domain.GCRAState
	// logCost is the entry count the cost estimate covers: twice the
	// capacity of the log's backing array when it last outgrew the
	// estimate, which only a reset shrinks.
	logCost int64
	// resident is set when a Get found the entry in ristretto, cleared when
	// ristretto gave it up (eviction, refusal) or a Get missed it.
	resident bool

	// Guarded by the directory shard's lock.
	inflight   bool  // a Set was accepted and has not resolved yet
	misses     int32 // directory lookups since the last Set
	backoff    int32 // directory lookups to wait before the next Set
	pendCost   int64 // cost counted in the shard's pending bytes
	prev, next *entry
	pending    bool // linked in the shard's pending list
}

// Cost estimate, in bytes, of an entry (see the package doc).
const (
	// entryBytes is the entry itself, rounded up to its allocation class.
	entryBytes = (int64(unsafe.Sizeof(entry{})) + 15) &^ 15
	// indexBytes covers the slots that point at an entry beyond the one
	// ristretto counts itself (its storeItem): the directory's map slot, the
	// rest of ristretto's map slot and its policy's cost slot, each with the
	// headroom a growing Go map keeps.
	indexBytes = 192
	// logEntryBytes is one sliding-log entry (a 16-byte timestamp and unit
	// count) with the headroom of a slice grown by append.
	logEntryBytes = 24
	// baseEntries is how many log entries the first estimate covers, so
	// that a short log never needs a cost update.
	baseEntries = 4
)

// costLocked returns the entry's estimated size. Called with mu held.
func (e *entry) costLocked() int64 {
	return entryBytes + indexBytes + (int64(len(e.key))+15)&^15 + max(e.logCost, baseEntries)*logEntryBytes
}

// idleLocked reports whether dropping the state changes no answer at now.
// Called with mu held.
func (e *entry) idleLocked(now int64) bool {
	if e.algo == domain.GCRA {
		return e.gcra.Idle(now)
	}
	return e.log.Idle(now, domain.Window{Period: domain.Micros(e.period)})
}

// check reports what l would get from e at now without consuming. A nil
// entry, or one counted with another algorithm, answers as a fresh key.
// Called with mu held (when e is not nil).
func check(e *entry, l *domain.Limit, now int64) domain.LimitStatus {
	w := l.Window
	if e == nil || e.algo != w.Algorithm {
		if w.Algorithm == domain.GCRA {
			var g domain.GCRAState
			return g.Check(now, w, l.Cost)
		}
		var g domain.LogState
		return g.Check(now, w, l.Cost)
	}
	if w.Algorithm == domain.GCRA {
		return e.gcra.Check(now, w, l.Cost)
	}
	return e.log.Check(now, w, l.Cost)
}

// commitLocked consumes l's cost at now, after check allowed it, and
// returns the status after consumption. It reports whether a sliding log
// outgrew its cost estimate. Called with mu held.
func (e *entry) commitLocked(l *domain.Limit, now int64, checked domain.LimitStatus) (domain.LimitStatus, bool) {
	w := l.Window
	if e.algo != w.Algorithm {
		// The old algorithm's state means nothing to the new one; the zero
		// values also release a log's backing array.
		e.log, e.gcra, e.algo = domain.LogState{}, domain.GCRAState{}, w.Algorithm
	}
	e.period = w.PeriodMicros()
	if w.Algorithm == domain.GCRA {
		return e.gcra.Committed(now, w, l.Cost, checked), false
	}
	st := e.log.Committed(now, w, l.Cost, checked)
	if c := int64(e.log.Cap()); c > max(e.logCost, baseEntries) {
		// Cover twice the capacity: the estimate stays ahead of the log
		// until it doubles, which bounds the cost updates to log2(limit).
		e.logCost = 2 * c
		return st, true
	}
	return st, false
}

// resetLocked forgets every unit counted. Called with mu held.
func (e *entry) resetLocked() {
	e.log, e.gcra = domain.LogState{}, domain.GCRAState{}
}

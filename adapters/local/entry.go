package local

import (
	"sync"

	"github.com/sluicehq/sluice/domain"
)

// entry is the counting state of one key. The directory and ristretto hold
// pointers to it; the state is mutated in place behind the pointer, so a
// value ristretto holds never goes stale.
type entry struct {
	key  string // immutable
	hash uint64 // immutable: the key's hash under the store's seed
	id   uint64 // immutable: creation order, the lock order of a decision

	mu sync.Mutex
	// Guarded by mu.
	dead   bool   // left the directory: look the key up again
	cached bool   // ristretto holds the entry (state == inCache)
	hits   uint32 // decisions and peeks, for sampling (see access)
	// used is the latest instant (µs) a decision or peek used the entry:
	// where it goes back in the store's list of pending entries when
	// ristretto gives it up.
	used int64
	// st is the key's counting state, whichever algorithm wrote it: the
	// domain applies the state rules of docs/adr/009.
	st domain.KeyState
	// logCover is how many log entries the size estimate covers: twice
	// the capacity of the log's backing array when it last outgrew the
	// estimate. An int32 (no log holds 2³¹ entries) packed with the flags
	// below keeps the entry in the 224-byte size class with held.
	logCover int32

	// Guarded by the directory shard's lock.
	state     uint8 // pending, inFlight, inCache or forgotten
	slot      bool  // ristretto's maps hold the entry (counted in Store.slots)
	delQueued bool  // a Del of the key waits for the sweeper
	deferred  bool  // waits in the store's hand-off queue for room in flight
	// Guarded by the store's hand-off queue lock and lru lock (they sit
	// here, among the flags, to keep the entry in a smaller size class).
	queued  bool  // in the hand-off queue
	listed  bool  // in the store's list of entries it may forget
	again   bool  // lru: used more than once, as of its listing or last move
	misses  int32 // accesses while pending since the last Set
	backoff int32 // accesses while pending to wait before the next Set
	hidx    int32 // lru: its index in the list's heap
	// charge is what the entry counts against the share of keys held
	// outside ristretto: its size while pending (its growth only while
	// ristretto still counts its old size), plus ristretto's Item while in
	// flight.
	charge int64
	// cost is the size ristretto counts for the entry, from its admission.
	cost int64

	// Guarded by the store's hand-off queue lock.
	hprev, hnext *entry // the hand-off queue

	// Guarded by the store's lru lock: its place in the list of pending
	// entries (see lru; hidx and again sit among the flags above).
	rank int64
	seq  uint64

	// Guarded by mu. held is what the key holds for reservations
	// (reserve.go): the slots of its concurrency window, the records of
	// the leases whose first key it is. Nil for a key no reservation
	// touched, which is most; off the decision path, so last.
	held *held
}

// Where an entry is, as the directory shard records it.
const (
	// pending: held outside ristretto (new, refused, evicted or grown),
	// on the shard's pending list, counted in Store.outBytes.
	pending uint8 = iota
	// inFlight: a Set waits in ristretto's buffer; counted in outBytes
	// and inflightBytes until ristretto takes it (Store.admitting).
	inFlight
	// inCache: ristretto admitted it and counts its size.
	inCache
	// forgotten: out of the directory; its key starts afresh.
	forgotten
)

// lastUse returns the latest instant a decision used e, and whether
// decisions or peeks used it more than once. Called without e.mu held.
func (e *entry) lastUse() (used int64, again bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.used, e.hits > 1
}

// sizeLocked returns the entry's estimated heap bytes: itself, its key,
// its directory slot and its sliding log's backing array. Called with mu
// held.
func (e *entry) sizeLocked() int64 {
	n := entryBytes + sizeClass(int64(len(e.key))) + dirBytes
	if e.logCover > 0 {
		n += sizeClass(int64(e.logCover) * logEntryBytes)
	}
	if e.held != nil {
		n += e.held.size()
	}
	return n
}

// idleLocked reports whether dropping the state changes no answer for any
// caller at or after now: the counting state is back to its full quota,
// no slot is held and no lease runs (their records ended before now are
// forgotten on the way). Called with mu held.
func (e *entry) idleLocked(now int64) bool {
	return e.st.Idle(now) && (e.held == nil || e.held.idle(now))
}

// check reports what l would get from e at now without consuming, grace
// being the store's IdleGrace (µs). A nil entry answers as a fresh key.
// Called with mu held (when e is not nil).
func check(e *entry, l *domain.Limit, now, grace int64) domain.LimitStatus {
	if l.Window.Algorithm == domain.Concurrency {
		return slotsCheck(e, l, now, grace)
	}
	if e == nil {
		var fresh domain.KeyState
		return fresh.Check(now, l.Window, l.Cost, grace)
	}
	return e.st.Check(now, l.Window, l.Cost, grace)
}

// commitLocked consumes cost units at now under w, after check allowed
// them, and returns the status after consumption: the key is rewritten in
// the window's algorithm (the domain converts the other one's state). It
// reports whether a sliding log outgrew its size estimate. Called with mu
// held.
func (e *entry) commitLocked(w *domain.Window, cost, now, grace int64, checked domain.LimitStatus) (domain.LimitStatus, bool) {
	st := e.st.Committed(now, *w, cost, grace, checked)
	return st, e.grownLocked()
}

// grownLocked reports whether the sliding log outgrew its size estimate,
// and if so covers it anew. Called with mu held, after a write.
func (e *entry) grownLocked() bool {
	if c := int32(e.st.LogCap()); c > e.logCover {
		// Cover twice the capacity: the estimate stays ahead of the log
		// until it doubles, which bounds the updates to log2(limit).
		e.logCover = max(2*c, baseLogEntries)
		return true
	}
	return false
}

// resetLocked forgets every unit counted and every slot held; the
// records of leases stay, so that settling one later refunds nothing and
// answers as it should. Called with mu held.
func (e *entry) resetLocked() {
	e.st.Reset()
	if e.held != nil {
		e.held.slots = nil
	}
}

// releaseLocked forgets every unit counted and the log's array, for an
// entry leaving the directory. Called with mu held.
func (e *entry) releaseLocked() {
	e.st.Release()
	e.held = nil
}

package local

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/sluicehq/sluice/domain"
)

// The directory is split in shards by the top bits of a key's hash, so that
// creating, offering and sweeping entries contends on one shard in 64.
const (
	shardBits = 6
	numShards = 1 << shardBits
)

// maxBackoff caps the wait after repeated refusals, in accesses of the key:
// a key ristretto keeps refusing is offered again every maxBackoff accesses.
const maxBackoff = 1024

// shard is one part of the directory: the table of its entries, the list
// of those held outside ristretto, and the Dels it waits for.
type shard struct {
	tab atomic.Pointer[table] // read without the lock

	mu sync.Mutex
	// Guarded by mu.
	closed  bool
	cached  int      // entries inCache
	pending int      // entries pending
	dels    []*entry // entries whose Del waits for the sweeper
	_       [64]byte // keep neighbouring shards' locks off one cache line
}

func (s *Store) shardOf(h uint64) *shard { return &s.shards[shardIndex(h)] }

func shardIndex(h uint64) int { return int(h >> (64 - shardBits)) }

// load finds key's entry without a lock: the decision path. It may miss an
// entry being created, or return one being forgotten; the caller then
// takes the slow path (lookup).
func (s *Store) load(h uint64, key string) *entry {
	return s.shardOf(h).tab.Load().find(h, key)
}

// lookup finds l's entry under its shard lock, creating it when create is
// set; it records the access of an entry held outside ristretto. It
// returns nil only when create is false and the key has no state, and
// errClosed once Close began. It never forgets an entry, so that a
// decision's entries stay alive until it locks them: the decision trims
// once it is done (settle).
func (s *Store) lookup(h uint64, l *domain.Limit, t int64, create bool) (*entry, error) {
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return nil, errClosed
	}
	tab := sh.tab.Load()
	if e := tab.find(h, l.Key); e != nil {
		s.touchLocked(sh, e)
		return e, nil
	}
	if !create {
		return nil, nil
	}
	// A copy, so that an entry never pins a caller's larger buffer and its
	// size estimate counts what it holds.
	e := &entry{key: strings.Clone(l.Key), hash: h, id: s.nextID.Add(1), used: t}
	if l.Window.Algorithm == domain.SlidingLog {
		e.logCover = baseLogEntries
	}
	s.park(sh, e, e.sizeLocked()) // no one else can hold e yet
	sh.tab.Store(tab.insert(e))
	s.offer(sh, e)
	return e, nil
}

// touchLocked records an access to e that did not find it in ristretto's
// cache: a pending entry moves to the back of the store's list of pending
// entries, and is offered to ristretto again once its back-off has passed.
// Called with the shard lock held.
func (s *Store) touchLocked(sh *shard, e *entry) {
	if e.state != pending {
		return
	}
	if e.listed {
		used, _ := e.lastUse()
		s.lru.touch(e, used)
	}
	if e.slot || e.delQueued {
		return
	}
	e.misses++
	if e.misses > e.backoff {
		s.offer(sh, e)
	}
}

// offer hands a pending e to ristretto when the writes on their way to it
// leave room; otherwise e stays pending, to be offered at a later access.
// An accepted Set takes e off the pending list; ristretto then either
// admits it or refuses it (admitting, displaced). Called with e's shard
// lock held: Set never blocks, so ristretto's callbacks, which take shard
// locks, cannot wait on it.
func (s *Store) offer(sh *shard, e *entry) {
	e.misses = 0
	c := e.charge + itemBytes
	if sh.closed {
		return
	}
	if !s.roomInFlight(c) || !s.roomBesideKeysInUse(e, c) {
		// Offered again as soon as ristretto takes the writes in flight
		// (handOff), not only at the key's next access: a key used once
		// would otherwise wait outside ristretto until trimmed, far below
		// the bound.
		if !e.deferred {
			e.deferred = true
			s.handoff.push(e)
		}
		return
	}
	if !s.cache.Set(e.key, e, 0) { // cost 0: ristretto asks admitting
		// Its buffer was full: not expected, since the store bounds what it
		// puts there (maxInflightSets, delBatch).
		s.stats.setsDropped.Add(1)
		e.backoff = grow(e.backoff)
		return
	}
	s.unpark(sh, e)
	e.state, e.charge = inFlight, c
	s.outBytes.Add(c)
	s.inflightBytes.Add(c)
	s.inflight.Add(1)
}

// roomInFlight reports whether a Set of c bytes fits in the writes on
// their way to ristretto.
func (s *Store) roomInFlight(c int64) bool {
	n := s.inflightBytes.Load()
	return s.inflight.Load() < maxInflightSets && (n == 0 || n+c <= s.inflightCap.Load())
}

// roomBesideKeysInUse reports whether e, of c bytes once on its way to
// ristretto, may go there without leaving the keys used more than once
// held outside ristretto as the trim's only choice. An entry on its way
// to ristretto, or one whose Del waits, cannot be forgotten: were the
// bytes of those to fill the share with the keys in use beside them, a
// key in use would lose its state while the keys used once were safe in
// ristretto's buffer. So a key used once goes only while those bytes, its
// own and the listed keys used more than once fit the share; otherwise it
// waits, listed, and at the bound it is the one forgotten. A key used
// more than once always goes. Called with e's shard lock held.
func (s *Store) roomBesideKeysInUse(e *entry, c int64) bool {
	once, again, eOnce := s.lru.weigh(e)
	if !eOnce {
		return true
	}
	held := s.outBytes.Load() - once - again // in flight, grown, the list's array
	return held+c+again <= s.outCap.Load()+s.cacheRoom.Load()
}

// handoffQueue is the entries the in-flight limit kept from ristretto,
// oldest first: a list through the entries, so that an entry forgotten
// while it waits leaves it at once and nothing it holds outlives it. Its
// lock is taken inside a shard lock, never the other way round.
type handoffQueue struct {
	mu         sync.Mutex
	head, tail *entry
}

func (h *handoffQueue) push(e *entry) {
	h.mu.Lock()
	e.queued, e.hprev, e.hnext = true, h.tail, nil
	if h.tail != nil {
		h.tail.hnext = e
	} else {
		h.head = e
	}
	h.tail = e
	h.mu.Unlock()
}

// remove takes e out of the queue if it is still there.
func (h *handoffQueue) remove(e *entry) {
	h.mu.Lock()
	h.removeLocked(e)
	h.mu.Unlock()
}

func (h *handoffQueue) removeLocked(e *entry) {
	if !e.queued {
		return
	}
	if e.hprev != nil {
		e.hprev.hnext = e.hnext
	} else {
		h.head = e.hnext
	}
	if e.hnext != nil {
		e.hnext.hprev = e.hprev
	} else {
		h.tail = e.hprev
	}
	e.queued, e.hprev, e.hnext = false, nil, nil
}

// pop takes out and returns the oldest entry, or nil.
func (h *handoffQueue) pop() *entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.head
	if e != nil {
		h.removeLocked(e)
	}
	return e
}

// handOff offers the deferred entries to ristretto, oldest first, while
// the writes in flight leave room. The sweeper runs it when ristretto
// takes a write (admit).
func (s *Store) handOff() {
	for {
		e := s.handoff.pop()
		if e == nil {
			return
		}
		sh := s.shardOf(e.hash)
		sh.mu.Lock()
		if !e.deferred {
			sh.mu.Unlock()
			continue
		}
		e.deferred = false
		if e.state == pending && !e.slot && !e.delQueued {
			s.offer(sh, e)
		}
		full := e.deferred // offer queued it again: no room yet
		sh.mu.Unlock()
		if full {
			return
		}
	}
}

func grow(backoff int32) int32 { return min(max(2*backoff, 1), maxBackoff) }

// park makes e pending, of the given size: counted against the share of
// keys held outside ristretto, and listed by its last use in the store's
// list of entries it may forget, unless a slot in ristretto or a queued
// Del holds it. Called with the shard lock held.
func (s *Store) park(sh *shard, e *entry, size int64) {
	e.state, e.charge = pending, size
	s.outBytes.Add(size)
	sh.pending++
	if forgettable(e) {
		used, again := e.lastUse()
		s.lru.push(e, used, again)
	}
}

// unpark uncounts a pending e and takes it off the list. Called with the
// shard lock held.
func (s *Store) unpark(sh *shard, e *entry) {
	if e.listed {
		s.lru.remove(e)
	}
	sh.pending--
	s.outBytes.Add(-e.charge)
	e.charge = 0
}

// relist lists a pending e once neither a slot in ristretto nor a queued
// Del holds it any more. Called with the shard lock held.
func (s *Store) relist(e *entry) {
	if forgettable(e) && !e.listed {
		used, again := e.lastUse()
		s.lru.push(e, used, again)
	}
}

// forget removes a pending e from the directory and marks it dead,
// counting a loss of state unless e was idle. With ifIdle, it does so only
// if e is idle, checked in the same critical section that marks it dead: a
// decision that commits on e in between keeps its units. e must hold no
// slot in ristretto and have no Del queued: until then the directory keeps
// the key's entry, so that no newer entry of the key can meet the old one
// in ristretto. Called with the shard lock held.
func (s *Store) forget(sh *shard, e *entry, ifIdle bool) {
	e.mu.Lock()
	idle := s.idle(e)
	if ifIdle && !idle {
		e.mu.Unlock()
		return
	}
	e.dead = true
	e.releaseLocked() // release a log's array: no one reads a dead entry
	e.mu.Unlock()
	s.unpark(sh, e)
	sh.tab.Store(sh.tab.Load().remove(e))
	if e.deferred {
		s.handoff.remove(e)
		e.deferred = false
	}
	e.state = forgotten
	if idle {
		s.stats.expired.Add(1)
	} else {
		s.stats.dropped.Add(1)
	}
}

// forgettable reports whether e may leave the directory now.
func forgettable(e *entry) bool { return e.state == pending && !e.slot && !e.delQueued }

// over reports whether the keys held outside ristretto exceed their share,
// with the room ristretto's own share has left: a burst of new keys
// outruns ristretto's goroutine, and may wait outside it in memory the
// cache does not use yet, since every byte of it is counted once, either
// side. Only at the bound is a live key forgotten.
func (s *Store) over() bool { return s.outBytes.Load() > s.outCap.Load()+s.cacheRoom.Load() }

// trim forgets the least recently used pending entries while the keys held
// outside ristretto exceed their share. Called without any lock: each
// candidate is locked with its shard, and forgotten only if it is still
// first.
func (s *Store) trim() {
	for s.over() {
		if s.waitForWrites() {
			return
		}
		e := s.lru.first()
		if e == nil {
			return
		}
		sh := s.shardOf(e.hash)
		sh.mu.Lock()
		closed := sh.closed
		if !closed && e.listed && s.lru.first() == e {
			s.forget(sh, e, false)
		}
		sh.mu.Unlock()
		if closed {
			return
		}
	}
}

// waitForWrites reports whether the trim should leave the keys held
// outside ristretto over their share until ristretto takes the writes on
// their way to it: the keys listed are all used more than once, and
// those writes (keys used once among them, at their first use) are all
// of the excess. Each one is admitted, when ristretto evicts what its
// policy rates lowest, or refused, when it comes back at the front of
// the list: forgetting a key in use now would forget it ahead of them.
// The wait ends with the writes: the callback that takes the last one
// trims again (admitting, displaced).
func (s *Store) waitForWrites() bool {
	n := s.inflightBytes.Load()
	return n > 0 && s.outBytes.Load()-n <= s.outCap.Load()+s.cacheRoom.Load() && s.lru.firstAgain()
}

// idle reports whether e's state has been trivial for IdleGrace at the
// latest instant the store has seen, so that forgetting it changes no
// answer for any caller lagging that instant by less than IdleGrace. Called
// with e.mu held.
func (s *Store) idle(e *entry) bool {
	hw := s.hw.Load()
	if hw == noInstant {
		return false
	}
	return e.idleLocked(hw - s.grace)
}

// admitting is ristretto's Cost function: ristretto calls it from its own
// goroutine when it takes one of the store's Sets from its buffer, just
// before it decides whether to admit it. The entry's size moves from the
// writes on their way to ristretto's cost; a refusal follows at once
// (displaced), an admission is silent. When ristretto holds more keys
// than ever before, the shares are worked out again (plan.shares), and the
// keys held outside ristretto trimmed to their new share.
func (s *Store) admitting(e *entry) int64 {
	size, reshared := s.admit(e)
	s.noteRoom(size)
	if reshared || s.over() {
		s.trim()
	}
	return size
}

// noteRoom records the room left in ristretto's share once coming more
// bytes are added: what the keys held outside it may borrow (over). It
// runs on ristretto's goroutine, from its callbacks, with no lock of the
// store held.
func (s *Store) noteRoom(coming int64) {
	if s.closing.Load() {
		return
	}
	s.cacheRoom.Store(max(s.cache.RemainingCost()-coming, 0))
}

func (s *Store) admit(e *entry) (size int64, reshared bool) {
	sh := s.shardOf(e.hash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.mu.Lock()
	size = e.sizeLocked()
	if e.state != inFlight || s.closing.Load() {
		e.mu.Unlock()
		return size, false
	}
	e.cached = true
	e.mu.Unlock()
	s.outBytes.Add(-e.charge)
	s.inflightBytes.Add(-e.charge)
	s.inflight.Add(-1)
	select {
	case s.offerWake <- struct{}{}:
	default: // a hand-off is already due
	}
	e.state, e.slot, e.charge, e.backoff, e.cost = inCache, true, 0, 0, size
	sh.cached++
	if n := s.slots.Add(1); n > s.peakSlots.Load() {
		s.peakSlots.Store(n) // only this goroutine raises it
		s.rebudget()
		return size, true
	}
	return size, false
}

// rebudget applies the shares of MaxMemory for the current reservation.
func (s *Store) rebudget() {
	cache, out := s.plan.shares(s.peakSlots.Load())
	s.outCap.Store(out)
	s.inflightCap.Store(out / 2)
	s.cache.UpdateMaxCost(cache)
	s.cacheRoom.Store(max(s.cache.RemainingCost(), 0))
}

// rejected and evicted are ristretto's OnReject and OnEvict.
func (s *Store) rejected(item *ristretto.Item[*entry]) {
	s.noteRoom(0)
	s.displaced(item.Value, true)
}

func (s *Store) evicted(item *ristretto.Item[*entry]) {
	s.noteRoom(0) // ristretto has uncounted the victim already
	s.displaced(item.Value, false)
}

// displaced handles ristretto giving e up: refused at admission, or
// evicted. A live entry stays in the directory, pending; an idle one is
// forgotten. Ristretto calls it from its own goroutine with none of its
// locks held, except during Close, when it is ignored.
func (s *Store) displaced(e *entry, refused bool) {
	if e == nil || s.closing.Load() {
		return // nil: a Del of the sweeper's took it out first
	}
	sh := s.shardOf(e.hash)
	sh.mu.Lock()
	if e.slot {
		if refused {
			s.stats.rejected.Add(1)
			e.backoff = grow(e.backoff)
		} else {
			s.stats.evicted.Add(1)
		}
		s.leave(sh, e)
	}
	sh.mu.Unlock()
	s.trim()
}

// leave records that ristretto no longer holds e: its slot is free, and an
// entry counted in the cache goes back to the pending list, or is
// forgotten if idle. Called with the shard lock held.
func (s *Store) leave(sh *shard, e *entry) {
	freed := e.slot
	if e.slot {
		e.slot = false
		s.slots.Add(-1)
	}
	if e.state != inCache {
		if e.state == pending {
			if freed {
				// A grown entry was charged its growth only while
				// ristretto still counted its old size: now all of it.
				e.mu.Lock()
				size := e.sizeLocked()
				e.mu.Unlock()
				s.outBytes.Add(size - e.charge)
				e.charge = size
			}
			s.relist(e)
		}
		return
	}
	sh.cached--
	e.mu.Lock()
	e.cached = false
	size := e.sizeLocked()
	e.mu.Unlock()
	s.park(sh, e, size)
	if forgettable(e) {
		s.forget(sh, e, true)
	}
}

// recostLocked records that e's sliding log outgrew its size estimate. The
// bytes counted for a pending entry, or one on its way, grow; an entry
// ristretto holds leaves the cache (a Del, by the sweeper) to be admitted
// again at its new size, evicting what ristretto must. Until the Del is
// done, ristretto still counts the old size, and the share held outside
// it only the growth: a flood of keys whose logs grow together does not
// count them twice and push out the keys in use. Called with the shard
// lock held.
func (s *Store) recostLocked(sh *shard, e *entry) {
	e.mu.Lock()
	size := e.sizeLocked()
	e.mu.Unlock()
	switch e.state {
	case pending:
		if e.slot {
			size = max(size-e.cost, 0)
		}
		s.lru.recharge(e, size-e.charge)
		s.outBytes.Add(size - e.charge)
		e.charge = size
	case inFlight:
		d := size + itemBytes - e.charge
		s.outBytes.Add(d)
		s.inflightBytes.Add(d)
		e.charge += d
	case inCache:
		sh.cached--
		e.mu.Lock()
		e.cached = false
		e.mu.Unlock()
		s.park(sh, e, max(size-e.cost, 0))
		s.queueDel(sh, e)
	}
}

// queueDel asks the sweeper to take e's key out of ristretto. Called with
// the shard lock held.
func (s *Store) queueDel(sh *shard, e *entry) {
	if e.delQueued {
		return
	}
	e.delQueued = true
	sh.dels = append(sh.dels, e)
	select {
	case s.delWake <- struct{}{}:
	default: // already due
	}
}

// sweep forgets every idle entry. It first lets the writes on their way
// to ristretto land, so that it sees every entry where it settled. An idle
// entry ristretto holds is forgotten once the sweeper's Del took it out of
// the cache. Each shard is locked in turn; decisions on keys found without
// the lock never wait for it.
func (s *Store) sweep() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.Wait()
	for i := range s.shards {
		select {
		case <-s.stop:
			return
		default:
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			return
		}
		sh.tab.Load().each(func(e *entry) {
			if e.state != pending && e.state != inCache || e.delQueued {
				return
			}
			e.mu.Lock()
			idle := s.idle(e)
			e.mu.Unlock()
			switch {
			case !idle:
			case e.state == inCache:
				s.queueDel(sh, e)
			case forgettable(e):
				s.forget(sh, e, true)
			}
		})
		sh.mu.Unlock()
		s.processDels(i)
	}
}

// processDels takes the entries queued in shard i's Dels out of
// ristretto, in batches it waits for (a Del may wait for room in
// ristretto's buffer, so only the sweeper calls it, holding sweepMu and no
// shard lock), then settles each one.
func (s *Store) processDels(i int) {
	sh := &s.shards[i]
	sh.mu.Lock()
	dels := sh.dels
	sh.dels = nil
	sh.mu.Unlock()
	for len(dels) > 0 {
		batch := dels[:min(len(dels), delBatch)]
		dels = dels[len(batch):]
		s.rw.RLock()
		if s.closed.Load() {
			s.rw.RUnlock()
			return
		}
		for _, e := range batch {
			s.cache.Del(e.key)
		}
		s.cache.Wait()
		s.rw.RUnlock()
		sh.mu.Lock()
		for _, e := range batch {
			s.delDone(sh, e)
		}
		sh.mu.Unlock()
	}
	s.trim()
}

// delDone settles e once ristretto applied the Del of its key: its slot
// is free, and an entry still counted in the cache goes back to pending,
// or is forgotten if idle. Called with the shard lock held.
func (s *Store) delDone(sh *shard, e *entry) {
	e.delQueued = false
	if sh.closed || e.state == forgotten {
		return
	}
	s.leave(sh, e)
	s.relist(e)
	if forgettable(e) {
		s.forget(sh, e, true)
	}
	if e.state == pending && forgettable(e) {
		// Live, and out of ristretto at its new size: offered again at
		// once, not at its next access, so that a key in use does not
		// wait in the share held outside ristretto.
		s.offer(sh, e)
	}
}

// sweeper runs sweep whenever observe wakes it, and the queued Dels
// whenever a grown log asks, until Close.
func (s *Store) sweeper() {
	defer close(s.sweepDone)
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			s.sweep()
		case <-s.offerWake:
			s.handOff()
		case <-s.delWake:
			s.sweepMu.Lock()
			for i := range s.shards {
				s.processDels(i)
			}
			s.sweepMu.Unlock()
		}
	}
}

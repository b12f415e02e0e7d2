package local

import (
	"strings"
	"sync"

	"github.com/dgraph-io/ristretto/v2"
)

// numShards splits the directory so that creating entries, and sweeping
// them, contends on one shard in 64.
const numShards = 64

// Set back-off, counted in directory lookups of the key.
const (
	// maxBackoff caps the wait after repeated refusals: a key ristretto
	// keeps refusing is offered again every maxBackoff lookups.
	maxBackoff = 1024
	// inflightRetry re-offers an entry whose accepted Set never became
	// visible (a concurrent sweep's Del can remove it without a callback).
	inflightRetry = 64
)

// shard is one part of the directory: every entry with state whose key
// hashes to it, and the list of those held outside ristretto.
type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	// The pending list, oldest first, and its estimated bytes.
	head, tail   *entry
	pendingLen   int
	pendingBytes int64
	_            [64]byte // keep neighbouring shards' locks off one cache line
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[s.hash(key)%numShards]
}

// lookup finds key's entry in the directory, after the cache missed it (or
// held a dead entry), creating it when create is set. It returns nil only
// when create is false and the key has no state.
func (s *Store) lookup(key string, create bool) *entry {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil {
		if !create {
			return nil
		}
		// A copy, so that an entry never pins a caller's larger buffer and
		// its cost estimate counts what it holds.
		key = strings.Clone(key)
		e = &entry{key: key}
		sh.m[key] = e
		s.offer(sh, e, e.costLocked()) // no one else can hold e yet
		return e
	}
	// The cache does not hold e (or holds something else under its key).
	e.mu.Lock()
	e.resident = false
	cost := e.costLocked()
	e.mu.Unlock()
	e.misses++
	switch {
	case (!e.inflight && e.misses >= e.backoff) || e.misses >= inflightRetry:
		s.offer(sh, e, cost)
	case !e.inflight:
		s.park(sh, e, cost)
	}
	return e
}

// offer hands e to ristretto. An accepted Set takes e off the pending list:
// ristretto either admits it or reports it through displaced. A dropped Set
// parks it. Called with e's shard lock held: Set never blocks, so
// ristretto's callbacks, which take shard locks, cannot wait on it.
func (s *Store) offer(sh *shard, e *entry, cost int64) {
	e.misses = 0
	e.inflight = s.cache.Set(e.key, e, cost)
	if e.inflight {
		unpark(sh, e)
		return
	}
	s.stats.setsDropped.Add(1)
	e.backoff = min(max(2*e.backoff, 1), maxBackoff)
	s.park(sh, e, cost)
}

// park links e at the tail of its shard's pending list, or refreshes its
// cost if it is there already, then forgets the oldest pending entries
// while the shard holds more than its share of MaxPendingCost. e itself is
// never forgotten here: the caller is about to use it. Called with the shard
// lock held.
func (s *Store) park(sh *shard, e *entry, cost int64) {
	if e.pending {
		sh.pendingBytes += cost - e.pendCost
		e.pendCost = cost
	} else {
		e.pending, e.pendCost = true, cost
		e.prev, e.next = sh.tail, nil
		if sh.tail != nil {
			sh.tail.next = e
		} else {
			sh.head = e
		}
		sh.tail = e
		sh.pendingLen++
		sh.pendingBytes += cost
	}
	for sh.pendingBytes > s.pendingCap && sh.head != e {
		s.forget(sh, sh.head)
	}
}

// unpark unlinks e from its shard's pending list. Called with the shard
// lock held.
func unpark(sh *shard, e *entry) {
	if !e.pending {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next, e.pending = nil, nil, false
	sh.pendingLen--
	sh.pendingBytes -= e.pendCost
	e.pendCost = 0
}

// forget removes e from the directory and marks it dead, counting a loss of
// state unless e was idle. Called with the shard lock held.
func (s *Store) forget(sh *shard, e *entry) {
	unpark(sh, e)
	e.mu.Lock()
	idle := s.idle(e)
	e.dead = true
	e.mu.Unlock()
	delete(sh.m, e.key)
	if idle {
		s.stats.expired.Add(1)
	} else {
		s.stats.dropped.Add(1)
	}
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

// settle records that a Get found e in ristretto: e leaves the pending list
// and its back-off restarts. Called without any lock, after the decision
// that saw the hit.
func (s *Store) settle(e *entry) {
	sh := s.shardOf(e.key)
	sh.mu.Lock()
	e.mu.Lock()
	resident := e.resident && !e.dead
	e.mu.Unlock()
	// resident may have been cleared meanwhile by an eviction: e then stays
	// pending.
	if resident {
		e.inflight, e.misses, e.backoff = false, 0, 0
		unpark(sh, e)
	}
	sh.mu.Unlock()
}

// recost tells ristretto (or the pending list) that e's sliding log has
// outgrown its cost estimate. Called without any lock.
func (s *Store) recost(e *entry) {
	sh := s.shardOf(e.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.mu.Lock()
	dead, resident, cost := e.dead, e.resident, e.costLocked()
	e.mu.Unlock()
	switch {
	case dead:
	case resident:
		// An update of a present key is applied at once and never refused.
		s.offer(sh, e, cost)
	case e.inflight:
		// The Set in flight carries the old cost; the first hit after it
		// lands makes the entry resident, and the next doubling reports.
	default:
		s.park(sh, e, cost)
	}
}

// displaced is ristretto's OnEvict and OnReject: the cache gave e up (or
// never took it). A live e stays in the directory, pending; an idle one is
// forgotten. Ristretto calls it from its own goroutine with none of its
// locks held, except during Close, when it is ignored.
func (s *Store) displaced(item *ristretto.Item[*entry], rejected bool) {
	e := item.Value
	if e == nil || s.closing.Load() {
		return
	}
	if rejected {
		s.stats.rejected.Add(1)
	} else {
		s.stats.evicted.Add(1)
	}
	sh := s.shardOf(e.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[e.key] != e {
		return // already forgotten
	}
	e.mu.Lock()
	if rejected && e.resident {
		// A second Set of an entry ristretto already holds is refused as a
		// duplicate; the entry stays where it is.
		e.mu.Unlock()
		e.inflight = false
		return
	}
	e.resident = false
	idle := s.idle(e)
	cost := e.costLocked()
	e.mu.Unlock()
	e.inflight = false
	if rejected {
		e.backoff = min(max(2*e.backoff, 1), maxBackoff)
	}
	if idle {
		s.forget(sh, e)
		return
	}
	s.park(sh, e, cost)
}

// sweep forgets every idle entry, one shard at a time, and returns how many
// it forgot. It takes the store's life lock per shard, so Close waits for at
// most one shard.
func (s *Store) sweep() int {
	var forgotten int
	var gone []string
	for i := range s.shards {
		select {
		case <-s.stop:
			return forgotten
		default:
		}
		s.life.RLock()
		if s.closed.Load() {
			s.life.RUnlock()
			return forgotten
		}
		sh := &s.shards[i]
		gone = gone[:0]
		sh.mu.Lock()
		var n int
		for key, e := range sh.m {
			e.mu.Lock()
			if !s.idle(e) {
				e.mu.Unlock()
				continue
			}
			e.dead = true
			if e.resident || e.inflight {
				gone = append(gone, key)
			}
			e.mu.Unlock()
			unpark(sh, e)
			delete(sh.m, key)
			n++
		}
		// Counted under the lock, so that Stats never sees an entry gone
		// and not yet counted.
		s.stats.expired.Add(uint64(n))
		sh.mu.Unlock()
		forgotten += n
		// Del may block on ristretto's buffer, so it runs without a shard
		// lock. It may remove a newer entry of the same key from the cache;
		// that entry is still in the directory and is offered again.
		for _, key := range gone {
			s.cache.Del(key)
		}
		s.life.RUnlock()
	}
	return forgotten
}

// sweeper runs sweep whenever observe wakes it, until Close.
func (s *Store) sweeper() {
	defer close(s.sweepDone)
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			s.sweep()
		}
	}
}

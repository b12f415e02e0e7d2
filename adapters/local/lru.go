package local

import (
	"math"
	"sync"
	"sync/atomic"
)

// lru is the store's list of the pending entries it may forget, in the
// order the bound costs them their state: first the entries used once,
// then those used more than once, each least recently used first.
//
// Ristretto's admission policy is what keeps the keys in use under a flood
// of keys used once, but only while it holds them: it hears a sample of
// the accesses (see access), so it may refuse or evict a key in use, which
// then waits here, among the flood's keys, until its next access offers it
// again. A flood of new keys can fill this share with keys used since that
// key's last use faster than the key comes back: ordered by recency alone,
// it lost its state before the flood's own keys. A key used once has no
// claim beyond the flood's own, so the entries used more than once leave
// only once no entry used once is left (the admission policy's own rule
// of thumb, applied where it cannot see). The price is a newcomer's: while
// keys used more than once fill the share, a new key ristretto refuses is
// the first to go, and starts afresh at its next request, until
// ristretto's sketch, which counts its uses across its entries, rates it
// high enough to admit it.
//
// An entry's rank is the instant it was last used (entry.used) when it
// joined the list, or the newest rank when an access moved it to the
// back; among equal ranks, the entry listed first leaves first. The order
// is exact: an entry ristretto gives up goes back behind every entry used
// since and ahead of every entry used before, however many there are.
// (Under a flood, the keys ristretto refuses or evicts come back with
// instants hundreds of keys old; placed a bounded walk from the back, they
// pushed the entries used before them toward the front.) So the list is a
// binary min-heap on (used more than once, rank, order of listing), in an
// array of the listed entries, each entry keeping its index: listing,
// moving to the back and taking out are O(log n), finding the first O(1).
//
// Its lock is taken inside a shard lock, never the other way round.
type lru struct {
	mu sync.Mutex
	// Guarded by mu.
	heap   []*entry
	seq    uint64 // order of listing: breaks ties in rank
	newest int64  // the newest rank given: an access moves an entry behind it
	// once and again are the bytes the listed entries count (their
	// charge), those used once and those used more than once.
	once, again int64
	// out is the store's count of the bytes held outside ristretto
	// (Store.outBytes), where the heap's array is counted: it grows with
	// the entries listed.
	out *atomic.Int64
}

// minHeapSlots is the smallest array the heap keeps once it has one; the
// fixed share covers it (fixedSlack).
const minHeapSlots = 64

// init prepares an empty list that counts its array in out.
func (l *lru) init(out *atomic.Int64) {
	l.out = out
	l.newest = math.MinInt64
}

// push lists e by its rank; again says whether decisions used it more
// than once.
func (l *lru) push(e *entry, rank int64, again bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.heap) == cap(l.heap) {
		l.resize(max(2*cap(l.heap), minHeapSlots))
	}
	e.listed, e.again = true, again
	l.count(e, e.charge)
	l.rankLocked(e, rank)
	e.hidx = int32(len(l.heap))
	l.heap = append(l.heap, e)
	l.up(int(e.hidx))
}

// remove takes a listed e out of the list.
func (l *lru) remove(e *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(e, -e.charge)
	i, last := int(e.hidx), len(l.heap)-1
	if i != last {
		l.swap(i, last)
	}
	l.heap[last] = nil
	l.heap = l.heap[:last]
	e.listed, e.hidx = false, 0
	if i != last {
		l.down(i)
		l.up(i)
	}
	if c := cap(l.heap); c > minHeapSlots && len(l.heap) < c/4 {
		l.resize(c / 2)
	}
}

// touch moves e, if listed, to the back, just used at instant used: an
// access that finds an entry is at least its second use.
func (l *lru) touch(e *entry, used int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.listed {
		if !e.again {
			l.once -= e.charge
			l.again += e.charge
		}
		e.again = true
		l.rankLocked(e, max(l.newest, used))
		l.down(int(e.hidx)) // its key only grew
	}
}

// recharge records that a listed e's charge is about to change by d.
// Called with e's shard lock held, as every change of a charge is.
func (l *lru) recharge(e *entry, d int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.listed {
		l.count(e, d)
	}
}

// weigh returns the bytes the listed entries count, those used once and
// those used more than once, and whether e is listed as used once.
func (l *lru) weigh(e *entry) (once, again int64, eOnce bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.once, l.again, e.listed && !e.again
}

// count adds d to the bytes listed of e's kind. Called with mu held.
func (l *lru) count(e *entry, d int64) {
	if e.again {
		l.again += d
	} else {
		l.once += d
	}
}

// first returns the entry to forget first, or nil.
func (l *lru) first() *entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.heap) == 0 {
		return nil
	}
	return l.heap[0]
}

// firstAgain reports whether the entry to forget first was used more
// than once: no entry used once is listed.
func (l *lru) firstAgain() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.heap) > 0 && l.heap[0].again
}

// clear empties the list, for Close (which resets the bytes counted).
func (l *lru) clear() {
	l.mu.Lock()
	l.heap = nil
	l.once, l.again = 0, 0
	l.mu.Unlock()
}

// rankLocked gives e its rank, behind every entry of that rank listed
// before. Called with mu held.
func (l *lru) rankLocked(e *entry, rank int64) {
	l.seq++
	e.rank, e.seq = rank, l.seq
	l.newest = max(l.newest, rank)
}

// resize moves the heap to an array of n slots and counts the difference.
// Called with mu held.
func (l *lru) resize(n int) {
	h := make([]*entry, len(l.heap), n)
	copy(h, l.heap)
	l.out.Add(heapBytes(n) - heapBytes(cap(l.heap)))
	l.heap = h
}

// heapBytes is what a heap array of n slots counts in the share of keys
// held outside ristretto: nothing for the first minHeapSlots, which the
// fixed share covers, so that an empty list counts nothing.
func heapBytes(n int) int64 {
	if n <= minHeapSlots {
		return 0
	}
	return sizeClass(int64(n) * 8)
}

// before reports whether a leaves the list before b.
func before(a, b *entry) bool {
	if a.again != b.again {
		return b.again
	}
	return a.rank < b.rank || a.rank == b.rank && a.seq < b.seq
}

func (l *lru) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = int32(i), int32(j)
}

func (l *lru) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !before(l.heap[i], l.heap[p]) {
			return
		}
		l.swap(i, p)
		i = p
	}
}

func (l *lru) down(i int) {
	n := len(l.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && before(l.heap[r], l.heap[c]) {
			c = r
		}
		if !before(l.heap[c], l.heap[i]) {
			return
		}
		l.swap(i, c)
		i = c
	}
}

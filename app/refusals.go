package app

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// refusalCache remembers, per instance, the key sets the primary store
// refused and until when, so that a client hammering a refused quota is
// refused again in process, with the exact remaining wait, and the store
// sees almost none of it.
//
// It never lets through what the store would refuse: it only refuses. And
// it refuses only what the store would refuse too: an entry matches a
// request with the very same keys, windows and costs, and lasts until the
// retry-after the store gave, counted from before the store call. Units
// leave a window only with time, and other traffic can only push that
// instant later, so until then the store's answer could only be the same
// refusal. A Reset clears the cache.
//
// Like the pseudonym cache it is a fixed table of slots; a newcomer
// replaces the slot's holder, and a lookup never locks.
type refusalCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[refusal]
	mask  uint64
}

// refusal is one remembered refusal: the decision as the store gave it,
// from start until until.
type refusal struct {
	sum      uint64
	n        int
	first    string
	start    time.Time
	until    time.Time
	decision domain.Decision
}

// newRefusalCache returns a cache of at least size slots (rounded up to a
// power of two), or nil (no cache) for a negative size.
func newRefusalCache(size int) *refusalCache {
	if size <= 0 {
		return nil
	}
	n := 1 << bits.Len(uint(size-1))
	return &refusalCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[refusal], n), mask: uint64(n - 1)}
}

// slot is where a key set's refusal lives: chosen by its first key and
// its size alone, so that a decision with nothing remembered (the common
// case) pays one short hash, not the fingerprint of every key.
func (c *refusalCache) slot(ev *evaluation) *atomic.Pointer[refusal] {
	return &c.slots[(maphash.String(c.seed, ev.limits[0].Key)+uint64(ev.n))&c.mask]
}

// fingerprint hashes the evaluation's limits: keys, windows and costs.
func (c *refusalCache) fingerprint(ev *evaluation) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	var b [8 * 4]byte
	for i := range ev.n {
		l := &ev.limits[i]
		h.WriteString(l.Key)
		binary.LittleEndian.PutUint64(b[0:], uint64(l.Cost))
		binary.LittleEndian.PutUint64(b[8:], uint64(l.Window.Limit))
		binary.LittleEndian.PutUint64(b[16:], uint64(l.Window.Period))
		binary.LittleEndian.PutUint64(b[24:], uint64(l.Window.Algorithm))
		h.Write(b[:])
	}
	return h.Sum64()
}

// repeat fills ev's decision from a remembered refusal of the same key set
// that still holds at ev.now, and reports whether it did.
func (c *refusalCache) repeat(ev *evaluation) bool {
	if c == nil {
		return false
	}
	r := c.slot(ev).Load()
	if r == nil || r.n != ev.n || r.first != ev.limits[0].Key || !ev.now.Before(r.until) || r.sum != c.fingerprint(ev) {
		return false
	}
	elapsed := ev.now.Sub(r.start)
	d := r.decision
	d.Source = domain.SourceRefusalCache
	d.SystemState, d.Shadow = ev.d.SystemState, ev.d.Shadow
	d.RetryAfter = r.until.Sub(ev.now)
	d.ResetAfter = max(d.ResetAfter-elapsed, 0)
	d.Windows = domain.WindowChecks{}
	for _, w := range r.decision.Windows.All() {
		w.RetryAfter = max(w.RetryAfter-elapsed, 0)
		w.ResetAfter = max(w.ResetAfter-elapsed, 0)
		d.Windows.Add(w)
	}
	ev.d = d
	return true
}

// remember keeps ev's refusal until until (the store call's start plus
// the retry-after it gave).
func (c *refusalCache) remember(ev *evaluation, until time.Time) {
	if c == nil {
		return
	}
	start := until.Add(-ev.d.RetryAfter)
	c.slot(ev).Store(&refusal{sum: c.fingerprint(ev), n: ev.n, first: ev.limits[0].Key, start: start, until: until, decision: ev.d})
}

// clear forgets every refusal.
func (c *refusalCache) clear() {
	if c == nil {
		return
	}
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
}

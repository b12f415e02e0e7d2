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
// refused, so that a client hammering a refused quota is refused again in
// process and the store sees almost none of it.
//
// It never lets through what the store would refuse: it only refuses. What
// it repeats, and for how long, is narrowed to what stays true after the
// store's answer (docs/adr/005, "The refusal cache"):
//
//   - an entry matches a request with the very same keys, windows and
//     costs, and names the current request's profile, family and plan;
//   - it lasts from the store's own instant of the refusal (the decision's
//     instant, in microseconds, as the store saw it) until the earlier of
//     that instant plus the store's retry-after and that instant plus the
//     TTL (Config.RefusalCacheTTL). Units leave a window only with time and
//     other traffic can only push the wait later, so until then the store
//     could only refuse too, unless its counts were reset: a Reset on this
//     instance makes every entry of an earlier generation void, and one on
//     another instance is honoured here within the TTL. A Limiter clock
//     that reads earlier than the refusal's instant (it stepped back) finds
//     nothing;
//   - it says only what stays true: the limiting window (which still
//     refuses) with 0 remaining, its retry-after and reset-after counted
//     down as lower bounds, and nothing of the other windows.
//
// Like the pseudonym cache it is a fixed table of slots; a newcomer
// replaces the slot's holder, and a lookup never locks.
type refusalCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[refusal]
	mask  uint64
	// ttl bounds an entry's life, in microseconds.
	ttl int64
	// gen counts Resets. A refusal is kept with the generation read before
	// its store call began and repeated only while no Reset has happened
	// since: a refusal the store gave just before a Reset cleared its keys
	// must not outlive it.
	gen atomic.Uint64
}

// refusal is one remembered refusal. Instants are microseconds since the
// epoch, the store's own unit.
type refusal struct {
	sum   uint64
	n     int
	first string
	gen   uint64
	// at is the instant the store refused at; until is the end of the
	// entry's life; retryAt and resetAt are when the store said the
	// limiting window would admit the cost again and be full again.
	at, until, retryAt, resetAt int64
	// limiting is the index of the limit that refused.
	limiting int
}

// newRefusalCache returns a cache of at least size slots (rounded up to a
// power of two) whose entries live at most ttl, or nil (no cache) for a
// negative size.
func newRefusalCache(size int, ttl time.Duration) *refusalCache {
	if size <= 0 {
		return nil
	}
	n := 1 << bits.Len(uint(size-1))
	return &refusalCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[refusal], n), mask: uint64(n - 1), ttl: ttl.Microseconds()}
}

// slot is where a key set's refusal lives: chosen by its first key and
// its size alone, so that a decision with nothing remembered (the common
// case) pays one short hash, not the fingerprint of every key.
func (c *refusalCache) slot(ev *evaluation) *atomic.Pointer[refusal] {
	return &c.slots[(maphash.String(c.seed, ev.limits[0].Key)+uint64(ev.n))&c.mask]
}

// fingerprint hashes the evaluation's limits: keys, windows and costs.
// The keys go first and every limit's figures after them in one write:
// maphash hashes a sequence of writes as their concatenation, so the keys
// may be written one by one or, when the Limiter cut them from one string
// (evaluation.keys), in one write, for the same sum; and a few long writes
// cost less than many short ones. Each key's length is hashed with its
// figures, so that no two key sets hash one byte sequence.
func fingerprint(seed maphash.Seed, ev *evaluation) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	if ev.keys != "" {
		h.WriteString(ev.keys)
	} else {
		for i := range ev.n {
			h.WriteString(ev.limits[i].Key)
		}
	}
	const per = 8 * 5
	var b [domain.MaxLimits * per]byte
	for i := range ev.n {
		l, f := &ev.limits[i], b[i*per:(i+1)*per]
		binary.LittleEndian.PutUint64(f[0:], uint64(len(l.Key)))
		binary.LittleEndian.PutUint64(f[8:], uint64(l.Cost))
		binary.LittleEndian.PutUint64(f[16:], uint64(l.Window.Limit))
		binary.LittleEndian.PutUint64(f[24:], uint64(l.Window.Period))
		binary.LittleEndian.PutUint64(f[32:], uint64(l.Window.Algorithm))
	}
	h.Write(b[:ev.n*per])
	return h.Sum64()
}

// generation returns the current generation, to read before a store call
// whose refusal may be remembered.
func (c *refusalCache) generation() uint64 {
	if c == nil {
		return 0
	}
	return c.gen.Load()
}

// repeat fills ev's decision from a remembered refusal of the same key set
// that still holds at ev.now, and reports whether it did. The decision
// keeps what begin and prepare set (profile, family, plan, state, shadow).
func (c *refusalCache) repeat(ev *evaluation) bool {
	if c == nil || ev.exactLayers {
		return false
	}
	r := c.slot(ev).Load()
	if r == nil || r.n != ev.n || r.first != ev.limits[0].Key {
		return false
	}
	now := ev.now.UnixMicro()
	if now < r.at || now >= r.until || r.gen != c.gen.Load() || r.sum != fingerprint(c.seed, ev) {
		return false
	}
	retry := micros(r.retryAt - now)
	reset := max(micros(r.resetAt-now), retry)
	lim, dim := &ev.limits[r.limiting], ev.dims[r.limiting]
	d := &ev.d
	d.State, d.Cause, d.Source = domain.Throttled, domain.CauseLimitExceeded, domain.SourceRefusalCache
	d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter = lim.Window.Limit, 0, retry, reset
	d.LimitingDimension, d.LimitingWindow, d.LimitingPeriod = dim, lim.Window.Name, lim.Window.Period
	d.Layer = dim.Layer()
	d.Windows = domain.WindowChecks{}
	d.Windows.Add(domain.WindowCheck{Dimension: dim, Window: lim.Window, Remaining: 0, RetryAfter: retry, ResetAfter: reset})
	switch d.Layer {
	case domain.LayerTenant:
		d.TenantRemaining = 0
	case domain.LayerUser:
		d.UserRemaining = 0
	}
	return true
}

// micros converts microseconds to a Duration.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// remember keeps ev's refusal, which the store gave at ev.now for a call
// that began in generation gen.
func (c *refusalCache) remember(ev *evaluation, res *domain.Result, gen uint64) {
	if c == nil || ev.exactLayers {
		return
	}
	retry := res.RetryAfter.Microseconds()
	if retry <= 0 || gen != c.gen.Load() {
		return
	}
	at := ev.now.UnixMicro()
	slot := c.slot(ev)
	if r := slot.Load(); r != nil && r.at == at && r.gen == gen && r.retryAt == at+retry && r.n == ev.n && r.first == ev.limits[0].Key {
		return // the members of one coalesced batch share one refusal
	}
	slot.Store(&refusal{
		sum: fingerprint(c.seed, ev), n: ev.n, first: ev.limits[0].Key, gen: gen,
		at: at, until: at + min(retry, c.ttl), retryAt: at + retry, resetAt: at + res.ResetAfter.Microseconds(),
		limiting: res.Limiting,
	})
}

// reset voids every refusal remembered so far; the Limiter calls it once
// a Reset has reached the store. Entries are dropped too, to free them.
func (c *refusalCache) reset() {
	if c == nil {
		return
	}
	c.gen.Add(1)
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
}

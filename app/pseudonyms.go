package app

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/domain"
)

// pseudonymCache remembers the pseudonyms of recently seen identifiers, so
// that a hot identifier is not run through HMAC-SHA256 on every request.
// It is a fixed table of slots in sets of pseudonymWays: an identifier
// lives in one set, in any of its slots; a newcomer takes an empty slot of
// its set, else a random one. Memory stays bounded and a lookup never
// locks. Sets rather than one slot per identifier (a direct-mapped cache)
// because a direct-mapped table keeps only about half of a working set of
// three quarters of its size (two identifiers hashed to one slot evict
// each other for good), while sets of eight keep about nine in ten.
// It holds normalised identifiers in process memory only; nothing of it
// reaches a key, a label or a log.
type pseudonymCache struct {
	pseudo *domain.Pseudonymiser
	seed   maphash.Seed
	slots  []pseudonymSlot
	// sets is the number of sets minus one: a mask.
	sets uint64
}

// pseudonymWays is the number of slots of a set.
const pseudonymWays = 8

// pseudonymSlot is one slot: the entry, and its identifier's hash, which
// lets a lookup pass over the other slots of its set without reading their
// entries' fields. The two are stored apart: a hash that does not match its entry
// (a reader between the two stores) only costs a comparison, since an
// entry is returned only when its own dimension and identifier match.
type pseudonymSlot struct {
	hash  atomic.Uint64
	entry atomic.Pointer[pseudonymEntry]
}

type pseudonymEntry struct {
	dim    domain.Dimension
	id     string
	pseudo string
	// byAddr marks an entry of the ip dimension keyed by the client
	// address's 16 bytes (ip) instead of its normalised form (id).
	byAddr bool
	ip     [16]byte
}

// newPseudonymCache returns a cache of at least size slots (rounded up to
// a power of two, and to one set), or a pass-through one for a negative
// size.
func newPseudonymCache(p *domain.Pseudonymiser, size int) *pseudonymCache {
	c := &pseudonymCache{pseudo: p, seed: maphash.MakeSeed()}
	if size > 0 {
		n := max(1<<bits.Len(uint(size-1)), pseudonymWays)
		c.slots, c.sets = make([]pseudonymSlot, n), uint64(n/pseudonymWays-1)
	}
	return c
}

// get returns the pseudonym of a normalised identifier of dimension d.
func (c *pseudonymCache) get(d domain.Dimension, id string) string {
	if d == domain.DimensionTenantGlobal {
		d = domain.DimensionTenant
	}
	if c.slots == nil {
		return c.pseudo.Pseudonymise(d, id)
	}
	h := maphash.String(c.seed, id) + uint64(d)
	set, free := c.set(h), -1
	for i := range set {
		e := set[i].entry.Load()
		if e == nil {
			free = i
		} else if set[i].hash.Load() == h && !e.byAddr && e.dim == d && e.id == id {
			return e.pseudo
		}
	}
	p := c.pseudo.Pseudonymise(d, id)
	// A clone, so that the cache never pins a larger buffer the identifier
	// was cut from.
	c.store(set, free, h, &pseudonymEntry{dim: d, id: strings.Clone(id), pseudo: p})
	return p
}

// ip returns the pseudonym of a client address (domain.NormaliseIP's
// form, in the ip dimension), or NormaliseIP's error. A hit costs neither
// the normalised form's string nor its formatting: entries are keyed by
// the address's 16 bytes, on which the normalised form depends alone
// (NormaliseIP unmaps IPv4-mapped addresses and drops the zone).
func (c *pseudonymCache) ip(a netip.Addr) (string, error) {
	if c.slots == nil || !a.IsValid() {
		norm, err := domain.NormaliseIP(a)
		if err != nil {
			return "", err
		}
		return c.get(domain.DimensionIP, norm), nil
	}
	b := a.As16()
	h := maphash.Bytes(c.seed, b[:]) + uint64(domain.DimensionIP)
	set, free := c.set(h), -1
	for i := range set {
		e := set[i].entry.Load()
		if e == nil {
			free = i
		} else if set[i].hash.Load() == h && e.byAddr && e.ip == b {
			return e.pseudo, nil
		}
	}
	norm, err := domain.NormaliseIP(a)
	if err != nil {
		return "", err
	}
	p := c.pseudo.Pseudonymise(domain.DimensionIP, norm)
	c.store(set, free, h, &pseudonymEntry{dim: domain.DimensionIP, pseudo: p, byAddr: true, ip: b})
	return p, nil
}

// set returns the set of slots of hash h.
func (c *pseudonymCache) set(h uint64) []pseudonymSlot {
	return c.slots[(h&c.sets)*pseudonymWays:][:pseudonymWays]
}

// store puts e, of hash h, in slot free of set, or in a random slot of it
// when free is -1.
func (c *pseudonymCache) store(set []pseudonymSlot, free int, h uint64, e *pseudonymEntry) {
	if free < 0 {
		free = rand.IntN(pseudonymWays)
	}
	set[free].entry.Store(e)
	set[free].hash.Store(h)
}

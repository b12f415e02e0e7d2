package app

import (
	"hash/maphash"
	"math/bits"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/domain"
)

// pseudonymCache remembers the pseudonyms of recently seen identifiers, so
// that a hot identifier is not run through HMAC-SHA256 on every request.
// It is a fixed table of slots (a direct-mapped cache): a newcomer replaces
// the slot's previous holder, memory stays bounded, and a lookup never
// locks. It holds normalised identifiers in process memory only; nothing
// of it reaches a key, a label or a log.
type pseudonymCache struct {
	pseudo *domain.Pseudonymiser
	seed   maphash.Seed
	slots  []atomic.Pointer[pseudonymEntry]
	mask   uint64
}

type pseudonymEntry struct {
	dim    domain.Dimension
	id     string
	pseudo string
}

// newPseudonymCache returns a cache of at least size slots (rounded up to
// a power of two), or a pass-through one for a negative size.
func newPseudonymCache(p *domain.Pseudonymiser, size int) *pseudonymCache {
	c := &pseudonymCache{pseudo: p, seed: maphash.MakeSeed()}
	if size > 0 {
		n := 1 << bits.Len(uint(size-1))
		c.slots, c.mask = make([]atomic.Pointer[pseudonymEntry], n), uint64(n-1)
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
	slot := &c.slots[(maphash.String(c.seed, id)+uint64(d))&c.mask]
	if e := slot.Load(); e != nil && e.dim == d && e.id == id {
		return e.pseudo
	}
	p := c.pseudo.Pseudonymise(d, id)
	// A clone, so that the cache never pins a larger buffer the identifier
	// was cut from.
	slot.Store(&pseudonymEntry{dim: d, id: strings.Clone(id), pseudo: p})
	return p
}

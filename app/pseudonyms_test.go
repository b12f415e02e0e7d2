package app

import (
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func testPseudonymiser(t *testing.T) *domain.Pseudonymiser {
	t.Helper()
	p, err := domain.NewPseudonymiser(make([]byte, 32))
	require.NoError(t, err)
	return p
}

// TestPseudonymCacheKeepsASetFull: identifiers as many as a set's slots
// are all kept, whatever their hashes: the second pass hands back the very
// strings of the first (a miss would compute a new one). A direct-mapped
// table of the same size loses some to collisions almost always.
func TestPseudonymCacheKeepsASetFull(t *testing.T) {
	p := testPseudonymiser(t)
	c := newPseudonymCache(p, pseudonymWays)
	first := map[string]string{}
	for i := range pseudonymWays {
		id := "user-" + strconv.Itoa(i)
		first[id] = c.get(domain.DimensionUser, id)
		assert.Equal(t, p.Pseudonymise(domain.DimensionUser, id), first[id])
	}
	for id, want := range first {
		got := c.get(domain.DimensionUser, id)
		assert.Equal(t, want, got)
		assert.Same(t, unsafe.StringData(want), unsafe.StringData(got), "%s: a hit, not a second HMAC", id)
	}
}

// TestPseudonymCacheAnswers: every answer is the Pseudonymiser's, for
// more identifiers than the cache holds, per dimension (the tenant-global
// dimension shares the tenant's), and with the cache off.
func TestPseudonymCacheAnswers(t *testing.T) {
	p := testPseudonymiser(t)
	for _, size := range []int{-1, 1, 16, 64} {
		c := newPseudonymCache(p, size)
		for pass := range 3 {
			for i := range 100 {
				id := "id-" + strconv.Itoa(i)
				for _, d := range []domain.Dimension{domain.DimensionIP, domain.DimensionUser, domain.DimensionAPIKey, domain.DimensionTenant, domain.DimensionTenantGlobal} {
					assert.Equal(t, p.Pseudonymise(d, id), c.get(d, id), "size %d pass %d %s %s", size, pass, d, id)
				}
			}
		}
	}
	assert.Equal(t, p.Pseudonymise(domain.DimensionTenant, "t"), p.Pseudonymise(domain.DimensionTenantGlobal, "t"))
	assert.NotEqual(t, p.Pseudonymise(domain.DimensionUser, "t"), p.Pseudonymise(domain.DimensionTenant, "t"))
}

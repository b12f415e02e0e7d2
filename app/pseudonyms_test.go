package app

import (
	"net/netip"
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

// TestPseudonymCacheAddresses: the pseudonym of a client address, looked
// up by its bytes, is the Pseudonymiser's of domain.NormaliseIP's form,
// for every form NormaliseIP folds together (IPv4-mapped, zones, one /64),
// and an unusable address fails as NormaliseIP does; a second lookup is a
// hit.
func TestPseudonymCacheAddresses(t *testing.T) {
	p := testPseudonymiser(t)
	addrs := []netip.Addr{
		netip.MustParseAddr("203.0.113.7"),
		netip.MustParseAddr("::ffff:203.0.113.7"),
		netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("2001:db8::2"),
		netip.MustParseAddr("fe80::1%eth0"),
		netip.MustParseAddr("fe80::1"),
		netip.MustParseAddr("2001:db8:0:1::1"),
	}
	strs := newPseudonymCache(p, 64)
	for _, size := range []int{-1, pseudonymWays, 64} {
		c := newPseudonymCache(p, size)
		first := map[netip.Addr]string{}
		for pass := range 2 {
			for _, a := range addrs {
				norm, err := domain.NormaliseIP(a)
				require.NoError(t, err)
				got, err := c.ip(a)
				require.NoError(t, err)
				assert.Equal(t, p.Pseudonymise(domain.DimensionIP, norm), got, "size %d pass %d %s", size, pass, a)
				assert.Equal(t, strs.get(domain.DimensionIP, norm), got, "the string path agrees")
				if pass == 0 {
					first[a] = got
				} else if size > 0 {
					assert.Same(t, unsafe.StringData(first[a]), unsafe.StringData(got), "size %d %s: a hit", size, a)
				}
			}
		}
		_, wantErr := domain.NormaliseIP(netip.Addr{})
		_, err := c.ip(netip.Addr{})
		require.Error(t, err)
		assert.Equal(t, wantErr, err, "size %d", size)
	}
	v4, err := newPseudonymCache(p, 64).ip(netip.MustParseAddr("203.0.113.7"))
	require.NoError(t, err)
	v6, err := newPseudonymCache(p, 64).ip(netip.MustParseAddr("::ffff:203.0.113.7"))
	require.NoError(t, err)
	assert.Equal(t, v4, v6, "an IPv4-mapped address is its IPv4 address")
}

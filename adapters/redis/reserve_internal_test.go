package redis

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// TestLeaseKeySharesTheSlot: a lease record hashes to the slot of the
// request's first key, whether that key has a hash tag or not; a key
// without a tag that holds a '}' is refused, since wrapping it in braces
// would change its slot.
func TestLeaseKeySharesTheSlot(t *testing.T) {
	id, err := newLeaseID()
	require.NoError(t, err)
	require.Len(t, id, domain.LeaseIDLen)
	require.True(t, domain.Lease{ID: id, TTL: domain.MinLeaseTTL}.Valid())
	for _, first := range []string{
		"rl:{tenant}:user:1",
		"rl:{t}",
		"{a}{b}",                   // first tag only
		"no-tag-at-all",            // wrapped whole
		"open{brace-without-close", // '{' without '}': wrapped whole
		"rl:{tenant:x}:y}",         // a tag, then a stray '}'
		"{tenant}",
	} {
		t.Run(first, func(t *testing.T) {
			k, err := leaseKey(first, id)
			require.NoError(t, err)
			assert.Equal(t, Slot(first), Slot(k), "record %q", k)
		})
	}
	for _, first := range []string{"x}y", "}", "a}{b", "{}}", "{}x"} {
		t.Run(first, func(t *testing.T) {
			_, err := leaseKey(first, id)
			var le *domain.LimitError
			require.True(t, errors.As(err, &le), "%v", err)
			assert.Equal(t, 0, le.Index)
		})
	}
}

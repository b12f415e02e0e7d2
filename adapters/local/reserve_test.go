package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func concurrencyWindow(limit int64) domain.Window {
	return domain.Window{Name: "c", Limit: limit, Period: time.Minute, Algorithm: domain.Concurrency}
}

// TestLeasesCountInTheBoundAndAreSweptOnceEnded: the slots and lease
// records of reservations count in the store's estimate (MaxMemory bounds
// them with the counting state), keep their keys alive while a lease
// runs, and leave with them once every lease ended more than IdleGrace
// ago.
func TestLeasesCountInTheBoundAndAreSweptOnceEnded(t *testing.T) {
	const leases = 200
	st := newStore(t, Config{})
	limits := []domain.Limit{lim("c", concurrencyWindow(leases), 1), lim("r", gcra(leases, time.Second), 1)}
	st.Wait()
	before := st.Stats().Bytes
	var held []domain.Lease
	for i := range leases {
		r, lease, err := st.Reserve(t.Context(), at(0), limits, time.Minute)
		require.NoError(t, err)
		require.True(t, r.Allowed, "reservation %d", i)
		held = append(held, lease)
	}
	for _, lease := range held[:leases/2] {
		got, err := st.Settle(t.Context(), at(time.Second), lease, limits, 1)
		require.NoError(t, err)
		require.Equal(t, domain.Settled, got)
	}
	// drained, not only Wait: an entry that grew past its cost in
	// ristretto is parked for the sweeper's hand-off, and until it is
	// handed off the estimate can lag by about its old cost (the cold CI
	// run once counted 43 752 bytes of the 44 800).
	st.drained()
	// "c" holds 200 slots (100 still held) and the 200 records (it is the
	// first key of every reservation).
	grown := st.Stats().Bytes - before
	assert.GreaterOrEqual(t, grown, int64(2*leases*heldEntryBytes), "slots and records not counted")
	assert.Less(t, grown, int64(8*leases*heldEntryBytes))

	// While a lease runs, its keys live through a sweep, however long the
	// rate window has been back to its full quota.
	other := []domain.Limit{lim("clock", sliding(1, time.Millisecond), 1)}
	_, err := st.Evaluate(t.Context(), at(time.Minute-time.Microsecond+DefaultIdleGrace), other)
	require.NoError(t, err)
	st.sweep()
	r, err := st.Peek(t.Context(), at(time.Minute-time.Microsecond), limits)
	require.NoError(t, err)
	assert.Equal(t, int64(leases/2), r.Status(0).Remaining, "held slots lost to a sweep")
	got, err := st.Settle(t.Context(), at(time.Minute-time.Microsecond), held[0], limits, 1)
	require.NoError(t, err)
	assert.Equal(t, domain.AlreadySettled, got, "a lease record lost to a sweep")

	// IdleGrace after the last lease ended, both keys are forgotten.
	_, err = st.Evaluate(t.Context(), at(time.Minute+DefaultIdleGrace+time.Millisecond), other)
	require.NoError(t, err)
	st.sweep()
	st.Wait()
	stats := st.Stats()
	assert.Equal(t, 1, stats.Entries, "only the key that moved the clock is left: %+v", stats)
	assert.Zero(t, stats.Dropped)
	got, err = st.Settle(t.Context(), at(time.Minute+DefaultIdleGrace+time.Millisecond), held[leases-1], limits, 1)
	require.NoError(t, err)
	assert.Equal(t, domain.Expired, got, "a forgotten lease reads as expired")
}

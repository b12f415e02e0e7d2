package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// TestSharedLogRecordsOnce is the regression test of shared logs
// (docs/adr/015): two sliding-log windows naming one key are one log, in
// which an admitted request records its units once. Before the store knew
// of shared logs it locked the key's entry once per window (a deadlock)
// and would have recorded every unit twice.
func TestSharedLogRecordsOnce(t *testing.T) {
	s := time.Second
	burst := domain.Window{Name: "burst", Limit: 5, Period: s, Algorithm: domain.SlidingLog}
	sustained := domain.Window{Name: "sustained", Limit: 8, Period: 10 * s, Algorithm: domain.SlidingLog}
	const key = "rl:{t}:user:u:sustained"
	limits := []domain.Limit{lim(key, burst, 1), lim(key, sustained, 1)}
	st := newStore(t, Config{})
	ctx := t.Context()
	for i := range 5 {
		r, err := st.Evaluate(ctx, t0, limits)
		require.NoError(t, err)
		require.True(t, r.Allowed, "request %d", i)
		require.Equal(t, domain.LimitStatus{Allowed: true, Remaining: int64(4 - i), ResetAfter: s}, r.Status(0), "request %d", i)
		require.Equal(t, domain.LimitStatus{Allowed: true, Remaining: int64(7 - i), ResetAfter: 10 * s}, r.Status(1), "request %d", i)
	}
	r, err := st.Evaluate(ctx, t0, limits)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.Equal(t, 0, r.Limiting)
	// The sustained window alone sees the five units once each.
	r, err = st.Peek(ctx, at(s), limits[1:])
	require.NoError(t, err)
	require.Equal(t, int64(3), r.Remaining)
}

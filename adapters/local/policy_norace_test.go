//go:build !race

package local

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// TestFloodKeepsKeysInUseNoRace floods a small store with keys used once
// while a few keys stay in use: ristretto's admission policy, fed with the
// store's sampled accesses, keeps the keys in use, so the bound costs the
// flood's keys their state, never theirs. (Without the reports, the keys
// in use lose their state within the first rounds.)
//
// It runs without the race detector only: under it, sync.Pool drops a
// quarter of what it is given, and with it the buffers that carry the
// accesses to ristretto's frequency sketch, so the policy sees nothing.
func TestFloodKeepsKeysInUseNoRace(t *testing.T) {
	st := newStore(t, Config{MaxMemory: 4 << 20})
	const (
		hot    = 50
		rounds = 500
		flood  = 200 // new keys per round
		limit  = 1 << 20
	)
	w := gcra(limit, 365*24*time.Hour) // refills a unit every 30s
	used := make([]int64, hot)
	for r := range rounds {
		now := at(time.Duration(r) * time.Millisecond)
		for i := range flood {
			l := []domain.Limit{lim(fmt.Sprintf("rl:{t}:ip:%d:%d", r, i), w, 1)}
			_, err := st.Evaluate(t.Context(), now, l)
			require.NoError(t, err)
		}
		for k := range hot {
			if (r+k)%3 == 0 {
				continue // not every key every round
			}
			_, err := st.Evaluate(t.Context(), now, []domain.Limit{lim(fmt.Sprintf("hot-%d", k), w, 1)})
			require.NoError(t, err)
			used[k]++
		}
	}
	stats := st.Stats()
	t.Logf("%+v", stats)
	require.Greater(t, stats.Dropped, uint64(rounds*flood/2), "the flood did not reach the bound: the test proves nothing")
	end := at(time.Duration(rounds) * time.Millisecond)
	for k := range hot {
		r, err := st.Peek(t.Context(), end, []domain.Limit{lim(fmt.Sprintf("hot-%d", k), w, 1)})
		require.NoError(t, err)
		// Nothing refilled in the test's half second: the remaining quota
		// is exactly what was not used.
		assert.Equal(t, limit-used[k], r.Remaining, "hot-%d lost its state", k)
	}
}

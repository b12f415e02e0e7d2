//go:build !race

package local

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestChurnKeepsLiveHeapWithinMaxMemory is issue 21's churn measurement:
// a store bounded by 32 MiB under a sustained flood of distinct live keys
// (rounds of 500 000, 86 and 500 bytes), the live heap measured after
// every round. Ristretto's item and cost maps cost more per key than was
// reserved for them, and the live heap passed MaxMemory (101.7 %).
func TestChurnKeepsLiveHeapWithinMaxMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("millions of keys")
	}
	const maxMemory = 32 << 20
	base := heapStats()
	st, err := New(Config{MaxMemory: maxMemory})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	peak := int64(0)
	for round, keyLen := range []int{86, 500, 86, 500, 86, 500} {
		floodFrom(t, st, round*1_000_000, 500_000, keyLen)
		st.Wait()
		live := int64(heapStats().HeapAlloc) - int64(base.HeapAlloc)
		peak = max(peak, live)
		stats := st.Stats()
		t.Logf("round %d (%d-byte keys): live heap %.1f MiB (%.1f %% of MaxMemory), estimate %.1f MiB, %d keys, %d dropped",
			round, keyLen, mib(live), 100*float64(live)/maxMemory, mib(stats.Bytes), stats.Entries, stats.Dropped)
	}
	t.Logf("peak live heap: %.1f %% of MaxMemory", 100*float64(peak)/maxMemory)
	assert.LessOrEqual(t, peak, int64(maxMemory), "the live heap passed MaxMemory")
}

//go:build !race

package local

import (
	"fmt"
	"testing"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestSlotBytesCoverRistrettosMapsUnderChurn measures what ristretto's
// item and cost maps hold per key once keys churn through them (a key
// admitted, another evicted, round after round: Go maps keep their
// growth), and checks the reservation per key (slotBytes) covers it. It
// was 192 bytes; the maps settle at about 215.
func TestSlotBytesCoverRistrettosMapsUnderChurn(t *testing.T) {
	const held = 100_000
	fresh := heapStats()
	c, err := ristretto.NewCache(&ristretto.Config[string, *entry]{
		NumCounters: 1 << 20, MaxCost: held, BufferItems: getBufferItems, IgnoreInternalCost: true,
	})
	require.NoError(t, err)
	defer c.Close()
	created := int64(heapStats().HeapAlloc) - int64(fresh.HeapAlloc)
	e := &entry{}
	perKey := 0.0
	for round := range 4 {
		for i := range held {
			for !c.Set(fmt.Sprintf("k%d-%d", round, i), e, 1) {
				c.Wait()
			}
			if i%1000 == 0 {
				c.Wait() // keep the Set buffer from dropping
			}
		}
		c.Wait()
		live := int64(heapStats().HeapAlloc) - int64(fresh.HeapAlloc) - created
		perKey = max(perKey, float64(live)/held)
		t.Logf("round %d: %.1f bytes per key held", round, float64(live)/held)
	}
	assert.LessOrEqual(t, perKey, float64(slotBytes), "ristretto's maps per key against the reservation")
}

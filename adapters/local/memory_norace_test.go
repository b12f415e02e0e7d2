//go:build !race

package local

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMaxMemoryBoundsLiveAllocs floods a store bounded by 32 MiB with a
// million distinct live keys, of 86 and of 500 bytes, and checks that the
// live heap the store accounts for (HeapAlloc after a full GC, above a
// baseline taken before New) stays within MaxMemory plus 10%, right after
// the flood (writes still on their way to ristretto) and once they landed.
// Most of the million keys lose their state: that is the documented price
// of the bound, and Stats counts it. The store must also use its bound
// rather than meet it by holding little: at least half of it is live.
//
// It runs without the race detector only, whose bookkeeping distorts the
// heap; `make test` runs it in its race-free pass (its name matches
// Allocs). TestStatsStayWithinMaxMemory checks the store's own account
// under the race detector.
func TestMaxMemoryBoundsLiveAllocs(t *testing.T) {
	const (
		maxMemory = 32 << 20
		keys      = 1_000_000
	)
	for _, keyLen := range []int{86, 500} {
		t.Run(fmt.Sprintf("%d-byte keys", keyLen), func(t *testing.T) {
			base := heapStats()
			st, err := New(Config{MaxMemory: maxMemory})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			flood(t, st, keys, keyLen)
			for _, phase := range []string{"after the flood", "after Wait"} {
				if phase == "after Wait" {
					st.Wait()
				}
				after := heapStats()
				live := int64(after.HeapAlloc) - int64(base.HeapAlloc)
				stats := st.Stats()
				t.Logf("%s: live heap %.1f MiB of %d MiB (%.0f%%), store's estimate %.1f MiB; %+v",
					phase, mib(live), maxMemory>>20, 100*float64(live)/maxMemory, mib(stats.Bytes), stats)
				assert.LessOrEqual(t, live, int64(maxMemory*11/10), phase)
				assert.GreaterOrEqual(t, live, int64(maxMemory/2), phase)
				assert.NotZero(t, stats.Dropped, "the flood did not reach the bound: the test proves nothing")
			}
			runtime.KeepAlive(st)
		})
	}
}

// TestFreshStoreAllocsWithinFixedShare checks the fixed share of the
// memory model against the heap a fresh store takes (ristretto's sketch, bloom
// filter, buffers and shards, the directory's shards).
func TestFreshStoreAllocsWithinFixedShare(t *testing.T) {
	for _, m := range []int64{MinMaxMemory, 32 << 20} {
		base := heapStats()
		st := newStore(t, Config{MaxMemory: m})
		live := int64(heapStats().HeapAlloc) - int64(base.HeapAlloc)
		t.Logf("MaxMemory %d: fresh store %d bytes, fixed share %d", m, live, st.plan.fixed)
		assert.LessOrEqual(t, live, st.plan.fixed)
		assert.Equal(t, st.plan.fixed, st.Stats().Bytes)
	}
}

func heapStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

func mib[T int64 | uint64](b T) float64 { return float64(b) / (1 << 20) }

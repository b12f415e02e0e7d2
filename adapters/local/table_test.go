package local

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestEntry(seed maphash.Seed, key string) *entry {
	return &entry{key: key, hash: maphash.String(seed, key)}
}

// TestTableAgainstAMap applies a random run of inserts and removes to a
// table and to a Go map, and checks after each step that they agree, and
// that the table stays within its load bounds (so that probes end, and its
// size follows its keys).
func TestTableAgainstAMap(t *testing.T) {
	seed := maphash.MakeSeed()
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newTable(minTableSlots)
	ref := map[string]*entry{}
	for step := range 20000 {
		key := fmt.Sprintf("k%d", rng.IntN(3000))
		if e, ok := ref[key]; ok && rng.IntN(2) == 0 {
			tab = tab.remove(e)
			delete(ref, key)
		} else if !ok {
			e := newTestEntry(seed, key)
			tab = tab.insert(e)
			ref[key] = e
		}
		require.Equal(t, len(ref), tab.live, "step %d", step)
		require.LessOrEqual(t, 2*(tab.live+tab.gone), len(tab.slots), "step %d: over half full", step)
		if len(tab.slots) > minTableSlots {
			require.GreaterOrEqual(t, 8*tab.live, len(tab.slots), "step %d: did not shrink", step)
		}
		if step%997 == 0 {
			for k, e := range ref {
				require.Same(t, e, tab.find(e.hash, k))
			}
			n := 0
			tab.each(func(e *entry) { n++; assert.Same(t, ref[e.key], e) })
			require.Equal(t, len(ref), n)
		}
	}
	assert.Nil(t, tab.find(maphash.String(seed, "absent"), "absent"))
}

// TestTableReadersDuringWrites reads a table without a lock while a writer
// inserts, removes and resizes it: a reader finds a present key or misses
// (then a store takes the shard lock), and never returns another key's
// entry. A set of keys never removed is always found.
func TestTableReadersDuringWrites(t *testing.T) {
	seed := maphash.MakeSeed()
	var cur atomic.Pointer[table]
	tab := newTable(minTableSlots)
	stable := make([]*entry, 64)
	for i := range stable {
		stable[i] = newTestEntry(seed, fmt.Sprintf("stable-%d", i))
		tab = tab.insert(stable[i])
	}
	cur.Store(tab)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for r := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				e := stable[(i+r)%len(stable)]
				if !assert.Same(t, e, cur.Load().find(e.hash, e.key)) {
					return
				}
				key := fmt.Sprintf("churn-%d", i%500)
				if got := cur.Load().find(maphash.String(seed, key), key); got != nil && !assert.Equal(t, key, got.key) {
					return
				}
				reads.Add(1)
			}
		})
	}
	churn := map[string]*entry{}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		key := fmt.Sprintf("churn-%d", rng.IntN(500))
		if e, ok := churn[key]; ok {
			cur.Store(cur.Load().remove(e))
			delete(churn, key)
		} else {
			e := newTestEntry(seed, key)
			cur.Store(cur.Load().insert(e))
			churn[key] = e
		}
	}
	close(stop)
	wg.Wait()
	assert.NotZero(t, reads.Load())
}

package local_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/domain"
)

// Embedding the local store: two windows on one key family, checked and
// consumed atomically. The README shows the same code.
func Example() {
	store, err := local.New(local.Config{}) // zero values: documented defaults
	if err != nil {
		panic(err)
	}
	defer store.Close()

	burst := domain.Window{Name: "burst", Limit: 2, Period: time.Second}
	sustained := domain.Window{Name: "sustained", Limit: 100, Period: time.Minute, Algorithm: domain.GCRA}
	limits := []domain.Limit{
		{Key: "rl:{tenant-a}:user:u1:search:burst", Window: burst, Cost: 1},
		{Key: "rl:{tenant-a}:user:u1:search:sustained", Window: sustained, Cost: 1},
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		res, err := store.Evaluate(context.Background(), now, limits)
		if err != nil {
			panic(err) // bad input (*domain.LimitError) or a store failure, never a refusal
		}
		fmt.Printf("request %d: allowed=%v remaining=%d retry-after=%s limited by %s\n",
			i+1, res.Allowed, res.Remaining, res.RetryAfter, limits[res.Limiting].Window.Name)
	}
	// Output:
	// request 1: allowed=true remaining=1 retry-after=0s limited by burst
	// request 2: allowed=true remaining=0 retry-after=0s limited by burst
	// request 3: allowed=false remaining=0 retry-after=1s limited by burst
}

// A store bounded to 16 MiB. Stats tells what it holds and what the bound
// cost: Dropped counts the keys that lost their state to it.
func ExampleStore_Stats() {
	const bound = 16 << 20
	store, err := local.New(local.Config{MaxMemory: bound})
	if err != nil {
		panic(err) // a *domain.ConfigError: a bound below local.MinMaxMemory
	}
	defer store.Close()

	w := domain.Window{Name: "burst", Limit: 5, Period: time.Second, Algorithm: domain.GCRA}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		key := fmt.Sprintf("rl:{tenant-a}:ip:10.0.0.%d:search:burst", i)
		if _, err := store.Evaluate(context.Background(), now, []domain.Limit{{Key: key, Window: w, Cost: 1}}); err != nil {
			panic(err)
		}
	}
	store.Wait() // the keys' writes to ristretto have landed: Stats is settled
	st := store.Stats()
	fmt.Printf("keys %d, in the cache %d, dropped %d, within the bound %v\n",
		st.Entries, st.Cached, st.Dropped, st.Bytes <= bound)
	// Output:
	// keys 3, in the cache 3, dropped 0, within the bound true
}

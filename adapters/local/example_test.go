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

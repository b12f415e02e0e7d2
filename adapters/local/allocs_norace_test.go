//go:build !race

package local

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// TestEvaluateAllocs pins the hot path: a decision on a key the cache
// holds allocates nothing, for one key and for nine. It runs without the
// race detector only (which allocates on its own); `make test` runs the
// allocation tests in a second pass without -race.
func TestEvaluateAllocs(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, n := range []int{1, 9} {
		limits := make([]domain.Limit, n)
		for i := range limits {
			alg := domain.SlidingLog
			if i%2 == 1 {
				alg = domain.GCRA
			}
			limits[i] = domain.Limit{
				Key:    fmt.Sprintf("rl:{allocs}:%d", i),
				Window: domain.Window{Name: "w", Limit: domain.MaxSlidingLogLimit, Period: time.Second, Algorithm: alg},
				Cost:   1,
			}
		}
		// Warm up until every key is in ristretto's cache (its Sets are
		// asynchronous) and every log at its steady size, then measure.
		for range 1000 {
			if _, err := s.Evaluate(ctx, now, limits); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Millisecond)
		}
		s.Wait()
		allocs := testing.AllocsPerRun(500, func() {
			now = now.Add(time.Microsecond)
			if _, err := s.Evaluate(ctx, now, limits); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%d-key Evaluate allocates %.0f times per call, want 0", n, allocs)
		}
	}
}

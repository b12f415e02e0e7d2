//go:build !race

package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// TestEvaluateAllocs: building a call's keys and arguments allocates
// nothing, whatever the number of keys; what remains is rueidis' reply (the
// array of the script's answer), the same for one key and for sixteen. The context carries its own deadline, as app.Limiter's
// does, so the store adds no timer. Built without the race detector only
// (which allocates on its own): make test runs it in its race-free pass.
func TestEvaluateAllocs(t *testing.T) {
	s := newStore(t, topologies[0].cfg(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	perCall := map[int]float64{}
	for _, n := range []int{1, 9, domain.MaxLimits} {
		limits := benchLimits(tag(t), shape{n: n})
		perCall[n] = testing.AllocsPerRun(200, func() {
			r, err := s.Evaluate(ctx, time.Now(), limits)
			if err != nil || !r.Allowed {
				panic(fmt.Sprint(err))
			}
		})
	}
	t.Logf("allocations per Evaluate: %v", perCall)
	require.Equal(t, perCall[1], perCall[domain.MaxLimits], "allocations grow with the number of keys")
	require.LessOrEqual(t, perCall[1], float64(maxEvaluateAllocs))
}

// maxEvaluateAllocs is what rueidis allocates per call on this path: the
// reply array.
const maxEvaluateAllocs = 1

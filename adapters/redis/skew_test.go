package redis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestClockSkewBetweenInstances is the measurement behind the clock
// decision of docs/adr/003: two instances whose clocks are two emission
// intervals apart share one key, each sending eleven requests. On the
// callers' clocks a GCRA limit of 10 admits 12 (the instance ahead finds
// the theoretical arrival time two units nearer); a sliding log admits 10
// whatever the skew; on the server's clock (the default) both admit 10.
// The window is an hour (one unit per 6 min), so the real time the test
// takes changes nothing.
func TestClockSkewBetweenInstances(t *testing.T) {
	const limit, requests = 10, 11
	period := time.Hour
	skew := 2 * period / limit // two emission intervals: 12 min
	cases := []struct {
		time  redis.TimeSource
		algo  domain.Algorithm
		admit int
	}{
		{redis.CallerTime, domain.GCRA, limit + 2},
		{redis.CallerTime, domain.SlidingLog, limit},
		{redis.ServerTime, domain.GCRA, limit},
		{redis.ServerTime, domain.SlidingLog, limit},
	}
	for _, c := range cases {
		t.Run(c.time.String()+"/"+c.algo.String(), func(t *testing.T) {
			cfg := redis.Config{URL: redistest.StandaloneURL(t), Time: c.time, Timeout: testTimeout}
			a, b := newStore(t, cfg), newStore(t, cfg)
			l := []domain.Limit{{Key: "skew:{" + tag(t) + "}", Window: domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: c.algo}, Cost: 1}}
			t.Cleanup(func() { _ = a.Reset(t.Context(), l[0].Key) })
			now := time.Now()
			admitted := 0
			for _, inst := range []struct {
				s   *redis.Store
				now time.Time
			}{{a, now}, {b, now.Add(skew)}} {
				for range requests {
					r, err := inst.s.Evaluate(t.Context(), inst.now, l)
					require.NoError(t, err)
					if r.Allowed {
						admitted++
					}
				}
			}
			assert.Equal(t, c.admit, admitted)
		})
	}
}

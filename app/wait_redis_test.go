package app_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// waiterKey carries a waiter's number in its context, down to the store.
type waiterKey struct{}

// attempt is one store decision of a waiter: the instant the store was
// given, and its answer.
type attempt struct {
	waiter  int
	now     time.Time
	allowed bool
	retry   time.Duration
}

// attemptStore records every Evaluate with the waiter that made it.
type attemptStore struct {
	ports.Store
	mu       sync.Mutex
	attempts []attempt
}

func (s *attemptStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	res, err := s.Store.Evaluate(ctx, now, limits)
	if id, ok := ctx.Value(waiterKey{}).(int); ok && err == nil {
		s.mu.Lock()
		s.attempts = append(s.attempts, attempt{waiter: id, now: now, allowed: res.Allowed, retry: res.RetryAfter})
		s.mu.Unlock()
	}
	return res, err
}

// TestWaitRedisFigures runs waiters on one quota of a real Redis on the
// wall clock and measures what Wait promises: overshoot (passes beyond
// the limit in any window, by the instants the store was given: must be
// 0) and lateness (how long after a refusal's retry instant the next
// attempt reached the store: a FIGURE, never asserted, the machine is
// shared).
func TestWaitRedisFigures(t *testing.T) {
	const waiters, perWaiter, limit, period = 8, 5, 5, 200 * time.Millisecond
	srv := redistest.NewServer(t)
	rs, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone, Time: redis.CallerTime})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	store := &attemptStore{Store: rs}
	cfg := testConfig()
	cfg.StoreTimeout = 2 * time.Second
	// Every attempt reaches the store, so that each retry is measured
	// against the refusal it follows (a refusal cache answer never
	// reaches the store).
	cfg.RefusalCacheSize = -1
	cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{
		Name: "partner", Family: domain.FamilyCostly, Routes: []string{routeQuota},
		Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "quota", Limit: limit, Period: period}}},
	})
	l, err := app.New(cfg, app.Deps{Store: store, Fallback: newLocal(t), Recorder: &recorder{}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })

	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), waiterKey{}, i)
			for range perWaiter {
				d, err := l.Wait(ctx, quotaRequest())
				assert.NoError(t, err)
				assert.Equal(t, domain.Allowed, d.State)
			}
		})
	}
	wg.Wait()

	store.mu.Lock()
	attempts := slices.Clone(store.attempts)
	store.mu.Unlock()
	var passes []time.Time
	var late []time.Duration
	last := map[int]attempt{}
	for _, a := range attempts {
		if a.allowed {
			passes = append(passes, a.now)
		}
		if prev, ok := last[a.waiter]; ok && !prev.allowed {
			late = append(late, a.now.Sub(prev.now.Add(prev.retry)))
		}
		last[a.waiter] = a
	}
	require.Len(t, passes, waiters*perWaiter)
	slices.SortFunc(passes, func(a, b time.Time) int { return a.Compare(b) })
	overshoot := 0
	for i, p := range passes {
		in := 0 // passes in (p - period, p]
		for j := i; j >= 0 && passes[j].After(p.Add(-period)); j-- {
			in++
		}
		overshoot = max(overshoot, in-limit)
	}
	assert.Zero(t, overshoot, "a window admitted more than its limit")
	require.NotEmpty(t, late)
	slices.Sort(late)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t.Logf("FIGURE wait on redis: %d waiters x %d passes, limit %d per %v: overshoot %d, lateness past the retry instant min %.2f ms p50 %.2f ms max %.2f ms (%d retries, %d attempts)",
		waiters, perWaiter, limit, period, overshoot, ms(late[0]), ms(late[len(late)/2]), ms(late[len(late)-1]), len(late), len(attempts))
}

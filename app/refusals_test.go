package app_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
)

// TestRefusalCacheSparesTheStore: once the store refuses a key set until
// T, the same request is refused in process until T, with the exact
// remaining wait, and the store is not called; at T the store decides
// again.
func TestRefusalCacheSparesTheStore(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeLogin, ClientIP: rawIP} // ip burst: 3 per second
	for range 3 {
		r.eval(t, req)
	}
	first := r.eval(t, req)
	require.Equal(t, domain.Throttled, first.State)
	require.Equal(t, domain.SourcePrimary, first.Source)
	require.Equal(t, time.Second, first.RetryAfter)
	calls := r.store.calls.Load()

	for i := 1; i <= 9; i++ {
		r.clock.Advance(100 * time.Millisecond)
		d := r.eval(t, req)
		assert.Equal(t, domain.Throttled, d.State)
		assert.Equal(t, domain.SourceRefusalCache, d.Source)
		assert.False(t, d.Degraded)
		assert.Equal(t, first.RetryAfter-time.Duration(i)*100*time.Millisecond, d.RetryAfter, "the wait counts down exactly")
		assert.Equal(t, first.Windows.Len(), d.Windows.Len())
		assert.Equal(t, domain.CauseLimitExceeded, d.Cause)
	}
	assert.Equal(t, calls, r.store.calls.Load(), "the store saw none of the repeats")
	assert.Equal(t, 4+9, r.rec.count(), "every decision is still recorded")

	r.clock.Advance(100 * time.Millisecond)
	d := r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State, "at T the store decides, and admits")
	assert.Equal(t, calls+1, r.store.calls.Load())
}

// TestRefusalCacheMatchesOnlyTheSameKeySet: another identity, another
// cost or another plan of limits asks the store.
func TestRefusalCacheMatchesOnlyTheSameKeySet(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeRead, ClientIP: rawIP, User: rawUser, Cost: 2}
	for range 2 {
		r.eval(t, req)
	}
	require.Equal(t, domain.Throttled, r.eval(t, req).State, "5 - 2 - 2 leaves 1: a cost of 2 is refused")
	calls := r.store.calls.Load()
	req.Cost = 1
	assert.Equal(t, domain.Allowed, r.eval(t, req).State, "a cost of 1 still fits: not taken for the refusal")
	other := app.Request{Route: routeRead, ClientIP: rawIP, User: "someone@else.org", Cost: 2}
	assert.Equal(t, domain.Allowed, r.eval(t, other).State)
	assert.Equal(t, calls+2, r.store.calls.Load())
}

// TestRefusalCacheNeverChangesAnAnswer replays one random timeline on two
// limiters, with and without the cache: every state is the same, and a
// remembered wait is never longer than the store's.
func TestRefusalCacheNeverChangesAnAnswer(t *testing.T) {
	mk := func(size int) *rig {
		cfg := testConfig()
		cfg.RefusalCacheSize = size
		return newRigWith(t, cfg, newFaulty(conformance.NewReferenceStore()), conformance.NewReferenceStore())
	}
	cached, plain := mk(64), mk(-1)
	rng := rand.New(rand.NewPCG(7, 11))
	users := []string{"", "u1", "u2"}
	routes := []string{routeLogin, routeRead, routeExport}
	hits := 0
	for i := range 3000 {
		step := time.Duration(rng.IntN(400)) * time.Millisecond
		cached.clock.Advance(step)
		plain.clock.Advance(step)
		req := app.Request{
			Route:    routes[rng.IntN(len(routes))],
			ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(rng.IntN(3))}),
			User:     users[rng.IntN(len(users))],
			Cost:     int64(1 + rng.IntN(2)),
		}
		a, b := cached.eval(t, req), plain.eval(t, req)
		require.Equal(t, b.State, a.State, "step %d: %+v", i, req)
		if a.Source == domain.SourceRefusalCache {
			hits++
			assert.LessOrEqual(t, a.RetryAfter, b.RetryAfter, "step %d", i)
			assert.Positive(t, a.RetryAfter)
		}
	}
	assert.Greater(t, hits, 100, "the timeline exercised the cache")
	t.Logf("%d of 3000 decisions came from the refusal cache", hits)
}

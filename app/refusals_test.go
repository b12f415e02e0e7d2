package app_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
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
		assert.Equal(t, domain.CauseLimitExceeded, d.Cause)
		// It repeats only what still holds: the limiting window, empty.
		require.Equal(t, 1, d.Windows.Len())
		w := d.Windows.All()[0]
		assert.Equal(t, first.LimitingWindow, w.Window.Name)
		assert.Equal(t, first.LimitingDimension, w.Dimension)
		assert.False(t, w.Allowed)
		assert.Zero(t, w.Remaining)
		assert.Zero(t, d.Remaining)
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
// limiters, with and without the cache: every state is the same, and what
// a repeated refusal says holds in the store's own answer (docs/adr/005):
// the same profile, family and plan, a limiting window the store says
// still refuses, with no more remaining than the store counts, and waits
// no longer than the store's. The TTL is long, so that the timeline
// exercises the cache, not the bound.
func TestRefusalCacheNeverChangesAnAnswer(t *testing.T) {
	mk := func(size int) *rig {
		cfg := testConfig()
		cfg.RefusalCacheSize = size
		cfg.RefusalCacheTTL = time.Hour
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
			assert.Equal(t, [3]string{b.Profile, b.Family.String(), b.Plan}, [3]string{a.Profile, a.Family.String(), a.Plan}, "step %d", i)
			require.Equal(t, 1, a.Windows.Len(), "step %d", i)
			w := a.Windows.All()[0]
			found := false
			for _, s := range b.Windows.All() {
				if s.Dimension == w.Dimension && s.Window == w.Window {
					found = true
					assert.False(t, s.Allowed, "step %d: the store says %s/%s still refuses", i, w.Dimension, w.Window.Name)
					assert.LessOrEqual(t, w.Remaining, s.Remaining, "step %d", i)
					assert.LessOrEqual(t, w.RetryAfter, s.RetryAfter, "step %d", i)
					assert.LessOrEqual(t, w.ResetAfter, s.ResetAfter, "step %d", i)
				}
			}
			assert.True(t, found, "step %d: the cache names a window the store checked", i)
		}
	}
	assert.Greater(t, hits, 100, "the timeline exercised the cache")
	t.Logf("%d of 3000 decisions came from the refusal cache", hits)
}

// hookStore runs after, when set, inside Evaluate once the store has
// decided and before the answer goes back: what happens between a store's
// decision and the Limiter's use of it.
type hookStore struct {
	ports.Store
	after func()
}

func (h *hookStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	res, err := h.Store.Evaluate(ctx, now, limits)
	if h.after != nil {
		h.after()
	}
	return res, err
}

// ownClockStore decides at its own clock's instant, whatever the caller
// passes: a Redis on its own clock (redis.ServerTime).
type ownClockStore struct {
	ports.Store
	clock *fakeclock.Clock
}

func (s *ownClockStore) Evaluate(ctx context.Context, _ time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.Store.Evaluate(ctx, s.clock.Now(), limits)
}

// hourlyConfig adds a profile limiting an ip to 3 logins per hour, the
// windows whose long waits the refusal cache must not stretch.
func hourlyConfig() app.Config {
	cfg := testConfig()
	cfg.ProbeInterval = time.Hour // no probe in the timelines
	cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{Name: "hourly", Family: domain.FamilyAuth, Routes: []string{routeHourly},
		Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "sustained", Limit: 3, Period: time.Hour}}}})
	return cfg
}

const routeHourly = "POST /api/v1/password-reset"

// TestRefusalCacheRaceWithReset (issue 21 item 6): the store refuses, a
// Reset of the identity completes before the Limiter has the answer, and
// the refusal must not be remembered: the next request is the store's,
// and passes. Before the generation counter it was refused from the
// cache for the rest of the hour.
func TestRefusalCacheRaceWithReset(t *testing.T) {
	hook := &hookStore{Store: conformance.NewReferenceStore()}
	r := newRigWith(t, hourlyConfig(), newFaulty(hook), conformance.NewReferenceStore())
	req := app.Request{Route: routeHourly, ClientIP: rawIP}
	for range 3 {
		require.Equal(t, domain.Allowed, r.eval(t, req).State)
	}
	hook.after = func() {
		hook.after = nil
		_, err := r.l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP, Actor: "support"})
		require.NoError(t, err)
	}
	d := r.eval(t, req)
	require.Equal(t, domain.Throttled, d.State, "the store refused before the reset")
	r.clock.Advance(time.Millisecond)
	d = r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State, "after the reset the store decides, and admits")
	assert.Equal(t, domain.SourcePrimary, d.Source)
}

// TestRefusalCacheResetOnAnotherInstance (issue 21 item 7): two Limiters
// share one store; one remembers a refusal with an hour to wait, support
// resets the identity through the other. The first asks the store again
// within the TTL (1 s by default) of the refusal's instant: the worst
// staleness of a Reset made elsewhere. Before the TTL it refused for the
// rest of the hour.
func TestRefusalCacheResetOnAnotherInstance(t *testing.T) {
	shared := conformance.NewReferenceStore()
	a := newRigWith(t, hourlyConfig(), newFaulty(shared), conformance.NewReferenceStore())
	b := newRigWith(t, hourlyConfig(), newFaulty(shared), conformance.NewReferenceStore())
	req := app.Request{Route: routeHourly, ClientIP: rawIP}
	for range 3 {
		require.Equal(t, domain.Allowed, a.eval(t, req).State)
	}
	refused := a.eval(t, req)
	require.Equal(t, domain.Throttled, refused.State)
	require.Greater(t, refused.RetryAfter, 59*time.Minute)
	require.Equal(t, domain.SourceRefusalCache, a.eval(t, req).Source, "remembered")

	_, err := b.l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP})
	require.NoError(t, err)
	const step = 50 * time.Millisecond
	var stale time.Duration
	for {
		d := a.eval(t, req)
		if d.State == domain.Allowed {
			assert.Equal(t, domain.SourcePrimary, d.Source)
			break
		}
		require.Equal(t, domain.SourceRefusalCache, d.Source, "only the cache can still refuse after the reset")
		require.LessOrEqual(t, stale, 2*app.DefaultRefusalCacheTTL, "still refused long after the reset")
		a.clock.Advance(step)
		b.clock.Advance(step)
		stale += step
	}
	assert.Equal(t, app.DefaultRefusalCacheTTL, stale, "refused until the TTL from the refusal's instant, no longer")
	t.Logf("FIGURE refusal cache staleness after a Reset on another instance: %s (TTL %s; before the bound: the refusal's retry-after, %s)",
		stale, app.DefaultRefusalCacheTTL, refused.RetryAfter)
}

// TestRefusalCacheNamesTheCurrentRoute (issue 21 item 8): two profiles
// share a key set (tenant-global windows only); a refusal remembered on
// one and repeated on the other names the other's profile and family.
func TestRefusalCacheNamesTheCurrentRoute(t *testing.T) {
	global := app.WindowsConfig{TenantGlobal: []app.WindowConfig{{Name: "shared", Limit: 2, Period: time.Minute}}}
	r := newRig(t, func(c *app.Config) {
		c.Profiles = append(c.Profiles,
			app.ProfileConfig{Name: "search", Family: domain.FamilyRead, Routes: []string{"GET /api/v1/search"}, Windows: global},
			app.ProfileConfig{Name: "bulk", Family: domain.FamilyCostly, Routes: []string{"POST /api/v1/bulk"}, Windows: global})
	})
	search := app.Request{Route: "GET /api/v1/search", ClientIP: rawIP, Tenant: rawTenant}
	bulk := app.Request{Route: "POST /api/v1/bulk", ClientIP: rawIP, Tenant: rawTenant}
	for range 2 {
		require.Equal(t, domain.Allowed, r.eval(t, search).State)
	}
	require.Equal(t, domain.Throttled, r.eval(t, search).State)
	d := r.eval(t, bulk)
	require.Equal(t, domain.SourceRefusalCache, d.Source, "the same key set: the cache answers")
	assert.Equal(t, "bulk", d.Profile)
	assert.Equal(t, domain.FamilyCostly, d.Family)
	rec := r.rec.last()
	assert.Equal(t, "bulk", rec.Decision.Profile, "the record names the route asked for")
}

// TestRefusalCacheDualLayerRemaining (issue 21 item 8): AllowDual refused
// on the user layer, then other users spend the tenant's quota: the
// tenant remaining it reports is the store's, not the one of the moment
// of the refusal.
func TestRefusalCacheDualLayerRemaining(t *testing.T) {
	r := newRig(t, nil)
	ok, tenantRem, userRem, err := r.l.AllowDual(rawTenant, 10, rawUser, 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, [2]int{9, 0}, [2]int{tenantRem, userRem})
	ok, tenantRem, _, err = r.l.AllowDual(rawTenant, 10, rawUser, 1)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 9, tenantRem)
	for range 5 {
		ok, _, _, err := r.l.AllowDual(rawTenant, 10, "someone@else.org", 10)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, tenantRem, userRem, err = r.l.AllowDual(rawTenant, 10, rawUser, 1)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, [2]int{4, 0}, [2]int{tenantRem, userRem}, "the store's tenant remaining")
}

// TestRefusalCacheEndsAtTheStoresInstant (issue 21 item 9): the decision's
// instant has a sub-microsecond part the store does not see; at the
// store's own instant plus its retry-after the store admits, and so must
// the Limiter. Before, the cache counted from the nanosecond clock read
// and refused for up to a microsecond (more when the clock moved between
// the instant and the call).
func TestRefusalCacheEndsAtTheStoresInstant(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeLogin, ClientIP: rawIP} // ip burst: 3 per second
	r.clock.Advance(700 * time.Nanosecond)
	for range 3 {
		r.eval(t, req)
	}
	refused := r.eval(t, req)
	require.Equal(t, domain.Throttled, refused.State)
	require.Equal(t, time.Second, refused.RetryAfter, "counted from t0, the store's microsecond")
	r.clock.Set(t0.Add(time.Second - time.Microsecond))
	require.Equal(t, domain.SourceRefusalCache, r.eval(t, req).Source, "a microsecond before: still the cache's refusal")
	r.clock.Set(t0.Add(time.Second))
	d := r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State, "at the store's instant plus its retry-after, the store admits")
}

// TestRefusalCacheClockStepsBack (issue 21 item 9): with the store on its
// own clock, the Limiter's clock steps back a minute after a refusal;
// the store admits once its own minute has passed, and the cache must not
// stretch the refusal by the step.
func TestRefusalCacheClockStepsBack(t *testing.T) {
	server := fakeclock.New(t0)
	cfg := hourlyConfig()
	cfg.Profiles[len(cfg.Profiles)-1].Windows.IP[0].Period = time.Minute
	cfg.RefusalCacheTTL = time.Hour // the step back, not the bound, is under test
	r := newRigWith(t, cfg, newFaulty(&ownClockStore{Store: conformance.NewReferenceStore(), clock: server}), conformance.NewReferenceStore())
	req := app.Request{Route: routeHourly, ClientIP: rawIP}
	for range 3 {
		r.eval(t, req)
	}
	refused := r.eval(t, req)
	require.Equal(t, domain.Throttled, refused.State)
	require.Equal(t, time.Minute, refused.RetryAfter)
	r.clock.Advance(-time.Minute)
	server.Advance(time.Minute)
	d := r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State, "the store's minute has passed")
	assert.Equal(t, domain.SourcePrimary, d.Source)
}

// TestRefusalCacheRacedResets (issue 21 item 6, as found): a refusal and
// a Reset of its identity race, 2 000 times; once both are done, the
// identity has at most one unit counted since the reset, so its next
// request must pass, never be refused from the cache.
func TestRefusalCacheRacedResets(t *testing.T) {
	r := newRigWith(t, hourlyConfig(), newFaulty(conformance.NewReferenceStore()), conformance.NewReferenceStore())
	stale := 0
	for i := range 2000 {
		ip := netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		req := app.Request{Route: routeHourly, ClientIP: ip}
		for range 3 {
			r.eval(t, req)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := r.l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: ip})
			assert.NoError(t, err)
		}()
		r.eval(t, req)
		<-done
		if d := r.eval(t, req); d.State != domain.Allowed {
			stale++
			assert.Equal(t, domain.SourceRefusalCache, d.Source, "only the cache can refuse here")
		}
	}
	assert.Zero(t, stale, "refusals repeated after the reset that voided them")
}

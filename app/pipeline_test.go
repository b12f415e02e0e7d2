package app_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

func TestEvaluateBuildsNineKeysUnderTheTenantTag(t *testing.T) {
	r := newRig(t, nil)
	d := r.eval(t, fullRequest(routeRead))
	require.Equal(t, domain.Allowed, d.State)

	keys := r.store.seen()
	require.Len(t, keys, 9, "4 dimensions × 2 windows + the tenant-global window")
	assertNoRawIdentifier(t, keys)
	tag := r.rec.last().TenantID
	assert.Len(t, tag, domain.PseudonymLen)
	for _, k := range keys {
		if dimOf(k) == domain.DimensionIP {
			// An ip window counts per ip (docs/adr/013).
			assert.Equal(t, idOf(k), hashTag(k), "an ip key carries the ip's tag")
			continue
		}
		assert.Equal(t, tag, hashTag(k), "every other key shares the tenant's hash tag")
	}
	assert.Equal(t, tag, r.rec.last().TenantID, "the tag is the tenant pseudonym the recorder sees")
	global := 0
	for _, k := range keys {
		if strings.Contains(k, ":"+domain.GlobalRouteKey+":") {
			global++
			assert.Contains(t, k, ":tenant_global:")
		} else {
			assert.Contains(t, k, ":users_read:", "route key is the profile name")
		}
	}
	assert.Equal(t, 1, global)
}

func TestEvaluateAnonymousKeysUseTheClientTag(t *testing.T) {
	r := newRig(t, nil)
	d := r.eval(t, app.Request{Route: routeRead, ClientIP: rawIP})
	require.Equal(t, domain.Allowed, d.State)
	keys := r.store.seen()
	require.Len(t, keys, 2, "only the ip windows apply without user, api key or tenant")
	assertNoRawIdentifier(t, keys)
	for _, k := range keys {
		assert.Contains(t, k, ":ip:")
		assert.Equal(t, hashTag(k), strings.Split(k, ":")[3], "the tag is the ip pseudonym")
	}
	assert.Equal(t, int64(-1), d.TenantRemaining)
	assert.Equal(t, int64(-1), d.UserRemaining)
	assert.Empty(t, r.rec.last().TenantID)

	// Two clients of one IPv6 /64, and an IPv4-mapped address, share their
	// counters with their canonical forms.
	r2 := newRig(t, nil)
	for _, ip := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "::ffff:203.0.113.77", "203.0.113.77"} {
		r2.eval(t, app.Request{Route: routeRead, ClientIP: netip.MustParseAddr(ip)})
	}
	keys = r2.store.seen()
	assert.Equal(t, keys[0], keys[2], "one /64, one counter")
	assert.Equal(t, keys[4], keys[6], "IPv4-mapped IPv6 counts as IPv4")
	assert.NotEqual(t, keys[0], keys[4])
	assertNoRawIdentifier(t, keys)
}

func TestEvaluateMapsTheResult(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeRead, ClientIP: rawIP, User: rawUser, Tenant: rawTenant}
	d := r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, domain.CauseNone, d.Cause)
	assert.Equal(t, "users_read", d.Profile)
	assert.Equal(t, domain.FamilyRead, d.Family)
	assert.Equal(t, domain.Healthy, d.SystemState)
	assert.Equal(t, int64(4), d.Remaining, "user burst 5 - 1")
	assert.Equal(t, int64(5), d.Limit)
	assert.Equal(t, domain.DimensionUser, d.LimitingDimension)
	assert.Equal(t, "burst", d.LimitingWindow)
	assert.Equal(t, time.Second, d.LimitingPeriod)
	assert.Equal(t, domain.LayerUser, d.Layer)
	assert.Equal(t, int64(4), d.UserRemaining)
	assert.Equal(t, int64(39), d.TenantRemaining, "tenant burst 40 - 1")
	assert.False(t, d.Shadow)

	for range 4 {
		r.eval(t, req)
	}
	d = r.eval(t, req)
	assert.Equal(t, domain.Throttled, d.State)
	assert.True(t, d.Blocks())
	assert.Equal(t, domain.CauseLimitExceeded, d.Cause)
	assert.Equal(t, domain.DimensionUser, d.LimitingDimension)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, int64(0), d.Remaining)
	assert.Equal(t, int64(35), d.TenantRemaining, "the refused request consumed nothing")

	// The other ip/user pair is untouched; the same user one second later
	// passes again.
	r.clock.Advance(time.Second)
	assert.Equal(t, domain.Allowed, r.eval(t, req).State)
	assert.Equal(t, 7, r.rec.count(), "every decision is recorded")
	assert.Equal(t, 7, r.rec.storeCalls(), "every store call's latency is observed")
}

func TestEvaluateCost(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeRead, ClientIP: rawIP, User: rawUser, Cost: 3}
	d := r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, int64(2), d.UserRemaining)
	assert.Equal(t, domain.Throttled, r.eval(t, req).State, "3 more do not fit in the 2 left")
	req.Cost = 2
	assert.Equal(t, domain.Allowed, r.eval(t, req).State)
}

func TestEvaluateInvalidContext(t *testing.T) {
	long := strings.Repeat("u", domain.MaxIdentifierLen+1)
	tests := []struct {
		name  string
		req   app.Request
		cause domain.Cause
	}{
		{"route with a space", app.Request{Route: "/api/v1/users/ x", ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"route without slash", app.Request{Route: "api/v1", ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"root route", app.Request{Route: "/", ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"empty route", app.Request{Route: "", ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"route with a quote", app.Request{Route: `/a"b`, ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"route too long", app.Request{Route: "/" + strings.Repeat("a", 256), ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"lower-case method", app.Request{Route: "get /api/v1/users/{id}", ClientIP: rawIP}, domain.CauseRouteInvalid},
		{"unknown route", app.Request{Route: "/api/v1/unknown", ClientIP: rawIP}, domain.CauseProfileMissing},
		{"route of another method", app.Request{Route: "DELETE /api/v1/users/{id}", ClientIP: rawIP}, domain.CauseProfileMissing},
		{"no client ip", app.Request{Route: routeRead}, domain.CauseIPUnresolved},
		{"overlong user", app.Request{Route: routeRead, ClientIP: rawIP, User: long}, domain.CauseDimensionInvalid},
		{"blank tenant", app.Request{Route: routeRead, ClientIP: rawIP, Tenant: "  "}, domain.CauseDimensionInvalid},
		{"control character in api key", app.Request{Route: routeRead, ClientIP: rawIP, APIKey: "k\x00"}, domain.CauseDimensionInvalid},
		{"overlong id the profile does not count", app.Request{Route: routeLogin, ClientIP: rawIP, APIKey: long}, domain.CauseDimensionInvalid},
		{"negative cost", app.Request{Route: routeRead, ClientIP: rawIP, Cost: -1}, domain.CauseInvalidLimit},
		{"cost over the smallest limit", app.Request{Route: routeRead, ClientIP: rawIP, Cost: 6}, domain.CauseInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			d := r.eval(t, tt.req)
			assert.Equal(t, domain.RejectedInvalidContext, d.State)
			assert.Equal(t, tt.cause, d.Cause)
			assert.True(t, d.Blocks())
			assert.Zero(t, r.store.calls.Load(), "an invalid context never reaches the store")
			rec := r.rec.last()
			assert.Equal(t, d, rec.Decision)
			var ce *domain.ContextError
			require.ErrorAs(t, rec.Err, &ce, "the cause's error is kept for logs and metrics")
			assert.Equal(t, tt.cause, ce.Cause)
			assert.Equal(t, domain.CodeInvalidContext, domain.CodeOf(rec.Err))
			assert.Equal(t, tt.req.Route, rec.Route)
			for _, raw := range []string{long[:40], rawIP.String()} {
				assert.NotContains(t, rec.Err.Error(), raw, "the error names no identifier")
			}
		})
	}
}

func TestEvaluateRouteForms(t *testing.T) {
	r := newRig(t, func(c *app.Config) {
		c.Profiles[0].Routes = []string{"GET /api/v1/users/{id}", "/files/{path...}", "/api/v1/home/{$}", "/pkg.v1.Users/Get", "/api/v2/users/:id"}
	})
	for _, route := range []string{
		"GET /api/v1/users/{id}", "GET /api/v1/users/:id", "GET  /api/v1/users/{id}",
		"/files/{path...}", "PUT /files/:path*", "/api/v1/home/", "/pkg.v1.Users/Get",
		"GET /api/v2/users/{id}", "GET example.org/api/v2/users/{id}",
	} {
		d := r.eval(t, app.Request{Route: route, ClientIP: rawIP})
		assert.Equal(t, domain.Allowed, d.State, route)
		assert.Equal(t, "users_read", d.Profile, route)
	}
}

func TestEvaluateWithoutApplicableDimension(t *testing.T) {
	r := newRig(t, func(c *app.Config) {
		c.Profiles[0].Windows = app.WindowsConfig{User: []app.WindowConfig{{Name: "burst", Limit: 2, Period: time.Second}}}
	})
	d := r.eval(t, app.Request{Route: routeRead, ClientIP: rawIP})
	assert.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, int64(-1), d.Remaining)
	assert.Zero(t, d.Limit)
	assert.Zero(t, r.store.calls.Load())
	assert.Equal(t, 1, r.rec.count())
	// A filed defect: this decision had the cause "", outside the closed
	// set that metric labels rely on.
	assert.Equal(t, domain.CauseNoWindow, d.Cause)
	assert.Contains(t, domain.Causes(), d.Cause)
	assert.Equal(t, domain.SourceNone, d.Source)
	assert.Zero(t, d.Windows.Len())
}

// TestDecisionListsEveryWindow: a decision carries every window it
// checked with its own status (the source of the RateLimit headers), says
// where its counts come from, and is not degraded.
func TestDecisionListsEveryWindow(t *testing.T) {
	r := newRig(t, nil)
	d := r.eval(t, fullRequest(routeRead))
	require.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, domain.SourcePrimary, d.Source)
	assert.False(t, d.Degraded)
	require.Equal(t, 9, d.Windows.Len())
	dims := map[domain.Dimension]int{}
	for _, w := range d.Windows.All() {
		dims[w.Dimension]++
		assert.True(t, w.Allowed)
		assert.Equal(t, w.Window.Limit-1, w.Remaining, "%s %s", w.Dimension, w.Window.Name)
		assert.Positive(t, w.ResetAfter)
	}
	assert.Equal(t, map[domain.Dimension]int{domain.DimensionIP: 2, domain.DimensionUser: 2, domain.DimensionAPIKey: 2, domain.DimensionTenant: 2, domain.DimensionTenantGlobal: 1}, dims)

	// Without the tenant the user's windows count under the user's own tag
	// (docs/adr/004): a fresh burst of 5.
	req := app.Request{Route: routeRead, ClientIP: rawIP, User: rawUser}
	for range 5 {
		r.eval(t, req)
	}
	d = r.eval(t, req)
	require.Equal(t, domain.Throttled, d.State)
	refused := 0
	for _, w := range d.Windows.All() {
		if !w.Allowed {
			refused++
			assert.Equal(t, "burst", w.Window.Name)
			assert.Equal(t, domain.DimensionUser, w.Dimension)
			assert.Equal(t, d.RetryAfter, w.RetryAfter)
		}
	}
	assert.Equal(t, 1, refused)
}

// TestEveryCauseIsInTheClosedSet drives a decision down every path and
// checks that each carries a cause from domain.Causes().
func TestEveryCauseIsInTheClosedSet(t *testing.T) {
	r := newRig(t, func(c *app.Config) { c.BreakerFailures = 1 })
	reqs := []app.Request{
		fullRequest(routeRead), {Route: routeLogin, ClientIP: rawIP},
		{Route: "bad route", ClientIP: rawIP}, {Route: "/unknown", ClientIP: rawIP}, {Route: routeRead},
		{Route: routeRead, ClientIP: rawIP, User: "\x00"}, {Route: routeRead, ClientIP: rawIP, Cost: 1 << 40},
	}
	for range 5 {
		reqs = append(reqs, app.Request{Route: routeLogin, ClientIP: rawIP})
	}
	for _, req := range reqs {
		r.eval(t, req)
	}
	r.store.mode.Store(unavailable)
	r.eval(t, fullRequest(routeRead))
	r.eval(t, fullRequest(routeRead))
	for _, rec := range r.rec.Decisions() {
		assert.Contains(t, domain.Causes(), rec.Decision.Cause, "%s", rec.Decision.State)
	}
}

func TestRecorderErrorIsReturned(t *testing.T) {
	r := newRig(t, nil)
	r.rec.setFail(errRecorder, nil)
	for _, req := range []app.Request{fullRequest(routeRead), {Route: "bad route"}} {
		d, err := r.l.Evaluate(context.Background(), req)
		require.ErrorIs(t, err, errRecorder, "a recorder failure is never swallowed")
		assert.NotZero(t, d.State, "the decision is still complete")
	}
	_, _, err := r.l.Allow(rawTenant, 10)
	assert.ErrorIs(t, err, errRecorder)

	// A transition the recorder fails on is returned too: in-band from
	// Evaluate, from ProbeOnce, and from Close for the loop.
	r.rec.setFail(nil, errRecorder)
	r.store.mode.Store(unavailable)
	var errs []error
	for range 5 {
		_, err := r.l.Evaluate(context.Background(), fullRequest(routeRead))
		errs = append(errs, err)
	}
	assert.NoError(t, errors.Join(errs[:4]...))
	assert.ErrorIs(t, errs[4], errRecorder, "the fifth failure opens the breaker; its transition failed to record")
	r.store.mode.Store(healthy)
	_, err = r.l.ProbeOnce(context.Background())
	assert.ErrorIs(t, err, errRecorder)
	r.store.mode.Store(unavailable)
	assert.Equal(t, domain.Degraded, r.tick(t), "RECOVERING → DEGRADED in the loop, unrecorded")
	r.rec.setFail(nil, nil)
	assert.ErrorIs(t, r.l.Close(), errRecorder, "the loop's recorder errors come back from Close")
}

func TestShadowMode(t *testing.T) {
	r := newRig(t, func(c *app.Config) { c.ShadowMode = true })
	req := app.Request{Route: routeLogin, ClientIP: rawIP}
	for range 3 {
		r.eval(t, req)
	}
	d := r.eval(t, req)
	assert.Equal(t, domain.Throttled, d.State, "the decision is computed")
	assert.True(t, d.Shadow)
	assert.False(t, d.Blocks(), "and not enforced")
	assert.True(t, r.rec.last().Decision.Shadow, "and recorded as shadow")

	d = r.eval(t, app.Request{Route: "nope"})
	assert.Equal(t, domain.RejectedInvalidContext, d.State)
	assert.True(t, d.Shadow)

	for range 10 {
		ok, _, err := r.l.Allow(rawTenant, 2)
		require.NoError(t, err)
		assert.True(t, ok, "a façade never blocks in shadow mode")
	}
}

func TestStoreTimeoutAndDefects(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		r := newRig(t, func(c *app.Config) { c.StoreTimeout = time.Millisecond })
		r.store.mode.Store(hang)
		d := r.eval(t, app.Request{Route: routeLogin, ClientIP: rawIP})
		assert.Equal(t, domain.DeniedDegraded, d.State, "auth fails closed")
		assert.Equal(t, domain.CauseStoreTimeout, d.Cause)
		assert.Equal(t, domain.DeniedRetryAfter, d.RetryAfter)
		assert.ErrorIs(t, r.rec.last().Err, domain.ErrStoreTimeout)
	})
	t.Run("the limiter's own deadline, a bare context error", func(t *testing.T) {
		// A filed defect: when the Limiter's deadline fired first, the store
		// returned ctx.Err() and the recorded error carried no code.
		r := newRig(t, func(c *app.Config) { c.StoreTimeout = time.Millisecond })
		r.store.mode.Store(hangBare)
		d := r.eval(t, app.Request{Route: routeLogin, ClientIP: rawIP})
		assert.Equal(t, domain.CauseStoreTimeout, d.Cause)
		assert.True(t, d.Degraded)
		err := r.rec.last().Err
		assert.ErrorIs(t, err, domain.ErrStoreTimeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, domain.CodeStoreTimeout, domain.CodeOf(err))
		calls := r.rec.StoreCalls()
		require.NotEmpty(t, calls)
		assert.Equal(t, domain.CodeStoreTimeout, domain.CodeOf(calls[len(calls)-1].Err), "the store call is recorded with its code")
	})
	t.Run("store refuses the request shape", func(t *testing.T) {
		r := newRig(t, nil)
		r.store.mode.Store(badLimit)
		for range 10 {
			d := r.eval(t, app.Request{Route: routeLogin, ClientIP: rawIP})
			assert.Equal(t, domain.RejectedInvalidContext, d.State)
			assert.Equal(t, domain.CauseInvalidLimit, d.Cause)
		}
		assert.False(t, r.l.BreakerOpen(), "a defect is not an outage")
	})
	t.Run("caller gone", func(t *testing.T) {
		// Refused with a cause of its own, never the degraded matrix: a
		// read route, whose matrix bypasses, is refused too (docs/adr/008).
		r := newRig(t, nil)
		r.store.mode.Store(hang)
		for _, route := range []string{routeLogin, routeRead} {
			for range 5 {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				d, err := r.l.Evaluate(ctx, app.Request{Route: route, ClientIP: rawIP, User: rawUser})
				require.NoError(t, err)
				assert.Equal(t, domain.DeniedDegraded, d.State, route)
				assert.Equal(t, domain.CauseCallerGone, d.Cause, route)
				assert.True(t, d.Degraded)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			d, err := r.l.Evaluate(ctx, app.Request{Route: route, ClientIP: rawIP, User: rawUser})
			cancel()
			require.NoError(t, err)
			assert.Equal(t, domain.DeniedDegraded, d.State, "%s: the caller's deadline, before the store's", route)
			assert.Equal(t, domain.CauseCallerGone, d.Cause, route)
		}
		assert.False(t, r.l.BreakerOpen(), "a caller that gave up does not count against the store")
	})
}

func TestMemoryCheckWarnings(t *testing.T) {
	newL := func(budget int64, check app.MemoryCheck) *app.Limiter {
		cfg := testConfig()
		cfg.RedisMemoryBudgetMB = budget
		l, err := app.New(cfg, app.Deps{Store: newFaulty(nil), Fallback: newFaulty(nil), Recorder: &recorder{}, MemoryCheck: check})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}
	var gotBudget int64
	l := newL(64, func(_ context.Context, b int64) ([]string, error) {
		gotBudget = b
		return []string{"maxmemory below budget"}, nil
	})
	assert.Equal(t, int64(64<<20), gotBudget)
	assert.Equal(t, []string{"maxmemory below budget"}, l.Warnings())
	assert.Empty(t, newL(64, func(context.Context, int64) ([]string, error) { return nil, nil }).Warnings())
	assert.Len(t, newL(64, nil).Warnings(), 1, "no check wired is a warning when a budget is set")
	assert.Len(t, newL(64, func(context.Context, int64) ([]string, error) { return nil, errors.New("closed") }).Warnings(), 1)
	assert.Empty(t, newL(0, nil).Warnings(), "no budget, no check")
}

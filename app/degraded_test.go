package app_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// TestDegradedMatrix checks every cell (read, auth, costly × bypass, deny,
// local) on every backend, for both ways into degraded mode: a failed
// store call with the breaker closed, and the open breaker.
func TestDegradedMatrix(t *testing.T) {
	families := []struct {
		family domain.RouteFamily
		route  string
		burst  int64 // BurstLimit of the profile
	}{
		{domain.FamilyRead, routeRead, 5},
		{domain.FamilyAuth, routeLogin, 3},
		{domain.FamilyCostly, routeExport, 3},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, action := range []domain.DegradedAction{domain.ActionBypass, domain.ActionDeny, domain.ActionLocal} {
			t.Run(action.String(), func(t *testing.T) {
				r, down, _ := newBackendRig(t, b, func(c *app.Config) {
					c.Degraded = app.DegradedConfig{Read: action, Auth: action, Costly: action}
					c.BreakerFailures = 1000 // keep the breaker closed for the in-band half
				})
				down(t)
				for _, via := range []string{"store failure", "breaker open"} {
					if via == "breaker open" {
						st, err := r.l.ProbeOnce(context.Background())
						require.NoError(t, err)
						require.Equal(t, domain.Degraded, st)
					}
					for i, f := range families {
						t.Run(fmt.Sprintf("%s/%s", via, f.family), func(t *testing.T) {
							// A fresh client per cell: the local counts of one
							// cell never leak into the next.
							ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(10*len(via) + i)})
							req := app.Request{Route: f.route, ClientIP: ip, User: fmt.Sprintf("%s-%s-%d", action, via, i)}
							d := r.eval(t, req)
							assert.Equal(t, f.family, d.Family)
							if via == "breaker open" {
								if action != domain.ActionLocal { // local decisions carry local_limit
									assert.Equal(t, domain.CauseBreakerOpen, d.Cause, "cause")
								}
								assert.Equal(t, domain.Degraded, d.SystemState)
							}
							rec := r.rec.last()
							assert.True(t, d.Degraded, "a decision of the degraded matrix says so")
							assert.Contains(t, domain.Causes(), d.Cause)
							switch action {
							case domain.ActionDeny:
								assert.Equal(t, domain.DeniedDegraded, d.State)
								assert.Equal(t, domain.DeniedRetryAfter, d.RetryAfter)
								assert.Equal(t, domain.SourceNone, d.Source, "nothing was counted")
								if via == "store failure" {
									assert.True(t, causeOfOutage(d.Cause), "cause %s", d.Cause)
									assert.Error(t, rec.Err, "the store's error is recorded")
								}
							case domain.ActionBypass:
								assert.Equal(t, domain.BypassDegraded, d.State)
								assert.False(t, d.Blocks(), "the handler runs")
								assert.Equal(t, domain.DegradedCapFactor*f.burst, d.Limit, "cap = 2 × burst")
								assert.Equal(t, domain.DegradedCapFactor*f.burst-1, d.Remaining)
								assert.Equal(t, domain.DegradedCapPeriod, d.LimitingPeriod)
								assert.Equal(t, domain.SourceFallback, d.Source, "the cap is counted on the fallback")
								require.Equal(t, 1, d.Windows.Len(), "the cap is the one window checked")
								assert.Equal(t, "degraded_cap", d.Windows.All()[0].Window.Name)
								if via == "store failure" {
									assert.True(t, causeOfOutage(d.Cause), "cause %s", d.Cause)
								}
							case domain.ActionLocal:
								assert.Equal(t, domain.Allowed, d.State)
								assert.Equal(t, domain.CauseLocalLimit, d.Cause)
								assert.Equal(t, f.burst-1, d.Remaining, "the profile's own limits, counted locally")
								assert.Equal(t, domain.SourceFallback, d.Source)
								assert.True(t, d.State.Passes(), "passes, but Degraded says its counts are this instance's")
								for range f.burst - 1 {
									r.eval(t, req)
								}
								d = r.eval(t, req)
								assert.Equal(t, domain.Throttled, d.State, "local enforcement refuses past the burst")
								assert.Equal(t, domain.CauseLocalLimit, d.Cause)
								assert.Positive(t, d.RetryAfter)
							}
							assert.Equal(t, d, r.rec.last().Decision, "recorded")
						})
					}
				}
			})
		}
	})
}

// TestBypassLocalCap: a bypassed family passes at most 2 × burst requests
// per client per 60 s on each instance, then is DeniedDegraded with
// local_cap_exceeded; GCRA refills one unit every 60 s / cap.
func TestBypassLocalCap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, down, _ := newBackendRig(t, b, func(c *app.Config) { c.Degraded.Auth = domain.ActionBypass })
		down(t)
		st, err := r.l.ProbeOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, domain.Degraded, st)

		req := app.Request{Route: routeLogin, ClientIP: rawIP, User: rawUser}
		const capacity = domain.DegradedCapFactor * 3
		for i := range capacity {
			d := r.eval(t, req)
			require.Equal(t, domain.BypassDegraded, d.State, "request %d", i+1)
			assert.Equal(t, int64(capacity-1-i), d.Remaining)
		}
		d := r.eval(t, req)
		assert.Equal(t, domain.DeniedDegraded, d.State)
		assert.Equal(t, domain.CauseLocalCapExceeded, d.Cause)
		assert.Equal(t, domain.DegradedCapPeriod/capacity, d.RetryAfter, "GCRA: one unit per 10 s")
		assert.Equal(t, domain.DimensionUser, d.LimitingDimension, "the cap counts per user when there is one")

		// Another user from the same address has a cap of its own; an
		// anonymous client is counted by address.
		other := req
		other.User = "bob@example.org"
		assert.Equal(t, domain.BypassDegraded, r.eval(t, other).State)
		anon := app.Request{Route: routeLogin, ClientIP: rawIP}
		d = r.eval(t, anon)
		assert.Equal(t, domain.BypassDegraded, d.State)
		assert.Equal(t, domain.DimensionIP, d.LimitingDimension)

		// Another profile has its own cap.
		assert.Equal(t, domain.DeniedDegraded, r.eval(t, app.Request{Route: routeExport, ClientIP: rawIP, User: rawUser}).State, "costly still denies")

		r.clock.Advance(domain.DegradedCapPeriod / capacity)
		assert.Equal(t, domain.BypassDegraded, r.eval(t, req).State, "one unit back after 10 s")
		assert.Equal(t, domain.DeniedDegraded, r.eval(t, req).State)

		assertNoRawIdentifier(t, r.store.seen())
	})
}

// TestFallbackFailureFailsClosed: when the fallback store fails too, a
// bypass cannot count its cap and a local action cannot count at all: the
// request is DeniedDegraded, and both errors are recorded.
func TestFallbackFailureFailsClosed(t *testing.T) {
	for _, action := range []domain.DegradedAction{domain.ActionBypass, domain.ActionLocal} {
		t.Run(action.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.Degraded.Read = action
			fallback := newFaulty(newLocal(t))
			fallback.mode.Store(unavailable)
			primary := newFaulty(newLocal(t))
			primary.mode.Store(unavailable)
			r := newRigWith(t, cfg, primary, fallback)
			d := r.eval(t, fullRequest(routeRead))
			assert.Equal(t, domain.DeniedDegraded, d.State)
			assert.Equal(t, domain.CauseStoreUnavailable, d.Cause)
			assert.Equal(t, domain.DeniedRetryAfter, d.RetryAfter)
			assert.ErrorIs(t, r.rec.last().Err, domain.ErrStoreUnavailable)
		})
	}
}

package app_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// TestPeekShowsTheQuotaWithoutConsuming: Peek answers as Evaluate would,
// by raw identity, and consumes nothing.
func TestPeekShowsTheQuotaWithoutConsuming(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, down, _ := newBackendRig(t, b, nil)
		req := app.Request{Route: routeLogin, ClientIP: rawIP, User: rawUser}
		ctx := context.Background()

		d, err := r.l.Peek(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, domain.Allowed, d.State)
		assert.Equal(t, int64(3), d.Remaining, "nothing used yet: the whole burst of 3")
		assert.Equal(t, domain.SourcePrimary, d.Source)
		require.Equal(t, 3, d.Windows.Len(), "ip burst, ip sustained, user burst")

		for range 2 {
			r.eval(t, req)
		}
		before := r.rec.count()
		for range 5 {
			d, err = r.l.Peek(ctx, req)
			require.NoError(t, err)
		}
		assert.Equal(t, int64(1), d.Remaining, "3 - 2 evaluated; the peeks took nothing")
		assert.Equal(t, before, r.rec.count(), "a peek is not a decision")
		r.eval(t, req)
		d, err = r.l.Peek(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, domain.Throttled, d.State, "the next request would be refused")
		assert.Positive(t, d.RetryAfter)

		_, err = r.l.Peek(ctx, app.Request{Route: "nope", ClientIP: rawIP})
		var ce *domain.ContextError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, domain.CauseRouteInvalid, ce.Cause)

		down(t)
		_, err = r.l.ProbeOnce(ctx)
		require.NoError(t, err)
		_, err = r.l.Peek(ctx, req)
		assert.ErrorIs(t, err, domain.ErrStoreUnavailable, "no fleet-wide quota to show while the breaker is open")
		assert.ErrorIs(t, err, app.ErrBreakerOpen)
	})
}

// TestResetUnblocksByRawIdentity: support resets a user or an ip by raw
// identity; only that identity's windows start afresh, on the primary and
// the fallback, and the act is recorded for the audit channel.
func TestResetUnblocksByRawIdentity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, _ := newBackendRig(t, b, nil)
		ctx := context.Background()
		alice := app.Request{Route: routeLogin, ClientIP: rawIP, User: rawUser}
		bob := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("198.51.100.9"), User: "bob@example.org"}
		exhaust := func(req app.Request) {
			for range 3 {
				require.Equal(t, domain.Allowed, r.eval(t, req).State)
			}
			require.Equal(t, domain.Throttled, r.eval(t, req).State)
		}
		exhaust(alice)
		exhaust(bob)

		// The user's own windows: alice's user burst is reset, but her
		// requests also count on her ip's windows (3 per second, per ip
		// whoever sends: docs/adr/013), which stay.
		n, err := r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionUser, User: " Alice.Martin@example.org", Actor: "support-42"})
		require.NoError(t, err)
		assert.Positive(t, n)
		assert.Equal(t, domain.Throttled, r.eval(t, alice).State, "her ip windows still refuse")
		carol := app.Request{Route: routeLogin, ClientIP: rawIP, User: "carol@example.org"}
		assert.Equal(t, domain.Throttled, r.eval(t, carol).State, "so does anyone's from her ip")
		// The ip's windows are the ip's: a reset naming the ip alone
		// forgets them, whoever sent (docs/adr/013).
		n, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP, Actor: "support-42"})
		require.NoError(t, err)
		assert.Positive(t, n)
		assert.Equal(t, domain.Allowed, r.eval(t, alice).State, "alice is unblocked")
		assert.Equal(t, domain.Throttled, r.eval(t, bob).State, "bob is not")

		resets := r.rec.Resets()
		require.Len(t, resets, 2)
		assert.Equal(t, domain.DimensionUser, resets[0].Dimension)
		assert.Equal(t, "support-42", resets[0].Actor)
		assert.Len(t, resets[0].SubjectID, domain.PseudonymLen, "the subject is a pseudonym")
		assert.NotContains(t, resets[0].SubjectID, "alice")
		assert.False(t, resets[0].ClientIP.IsValid())
		assert.Equal(t, rawIP, resets[1].ClientIP, "an ip reset carries the raw ip for the audit channel")
		assert.NoError(t, resets[1].Err)

		// An anonymous client is reset by ip alone.
		anon := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("192.0.2.7")}
		exhaust(anon)
		_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: anon.ClientIP})
		require.NoError(t, err)
		assert.Equal(t, domain.Allowed, r.eval(t, anon).State)
	})
}

func TestResetRefusesBadRequests(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for name, req := range map[string]app.ResetRequest{
		"no dimension":            {User: rawUser},
		"user reset without user": {Dimension: domain.DimensionUser, ClientIP: rawIP},
		"ip reset without ip":     {Dimension: domain.DimensionIP, User: rawUser},
		"unknown profile":         {Dimension: domain.DimensionUser, User: rawUser, Profiles: []string{"nope"}},
		"invalid identity":        {Dimension: domain.DimensionUser, User: "a\x00b"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.l.Reset(ctx, req)
			var ce *domain.ContextError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, domain.ErrInvalidContext)
		})
	}
	assert.Empty(t, r.rec.Resets(), "nothing was reset")
}

// TestResetOfATenantCoversTheFacade: a tenant reset forgets the tenant's
// windows, its tenant-global windows and the façade's tenant layer.
func TestResetOfATenantCoversTheFacade(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for range 2 {
		ok, _, err := r.l.Allow(rawTenant, 2)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, _, err := r.l.Allow(rawTenant, 2)
	require.NoError(t, err)
	require.False(t, ok)
	d := r.eval(t, fullRequest(routeRead))
	require.Equal(t, int64(39), d.TenantRemaining)

	_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: rawTenant})
	require.NoError(t, err)
	ok, rem, err := r.l.Allow(rawTenant, 2)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1, rem)
	d = r.eval(t, fullRequest(routeRead))
	assert.Equal(t, int64(39), d.TenantRemaining, "the tenant's windows start afresh")

	// Limited to one profile, the façade is left alone.
	_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: rawTenant, Profiles: []string{"users_read"}})
	require.NoError(t, err)
	ok, rem, err = r.l.Allow(rawTenant, 2)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 0, rem, "the façade's count was kept")
}

// TestResetClearsRememberedRefusals: a refusal the instance remembers
// does not outlive a reset of its keys.
func TestResetClearsRememberedRefusals(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeLogin, ClientIP: rawIP}
	for range 3 {
		r.eval(t, req)
	}
	require.Equal(t, domain.Throttled, r.eval(t, req).State)
	d := r.eval(t, req)
	require.Equal(t, domain.SourceRefusalCache, d.Source, "the second refusal is remembered")
	_, err := r.l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP})
	require.NoError(t, err)
	assert.Equal(t, domain.Allowed, r.eval(t, req).State)
}

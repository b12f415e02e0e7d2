package app_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// dualStep is one AllowDual call and its expected answer.
type dualStep struct {
	advance     time.Duration // moved on the fake clock before the call
	tenant      string
	tenantLimit int
	user        string
	userLimit   int
	allowed     bool
	tenantRem   int
	userRem     int
	layer       domain.Layer // for refusals: the layer that refused
}

// TestAllowDual is ADR-002's table (≥ 8 scenarios), on every backend.
func TestAllowDual(t *testing.T) {
	scenarios := []struct {
		name  string
		steps []dualStep
	}{
		{"both layers have room", []dualStep{
			{tenant: "acme", tenantLimit: 10, user: "u1", userLimit: 5, allowed: true, tenantRem: 9, userRem: 4},
			{tenant: "acme", tenantLimit: 10, user: "u1", userLimit: 5, allowed: true, tenantRem: 8, userRem: 3},
		}},
		{"user refused while tenant has room: tenant not consumed", []dualStep{
			{tenant: "acme", tenantLimit: 10, user: "u1", userLimit: 2, allowed: true, tenantRem: 9, userRem: 1},
			{tenant: "acme", tenantLimit: 10, user: "u1", userLimit: 2, allowed: true, tenantRem: 8, userRem: 0},
			{tenant: "acme", tenantLimit: 10, user: "u1", userLimit: 2, allowed: false, tenantRem: 8, userRem: 0, layer: domain.LayerUser},
			{tenant: "acme", tenantLimit: 10, user: "u2", userLimit: 2, allowed: true, tenantRem: 7, userRem: 1},
		}},
		{"tenant exhausted while user has room: user not consumed", []dualStep{
			{tenant: "acme", tenantLimit: 2, user: "u1", userLimit: 5, allowed: true, tenantRem: 1, userRem: 4},
			{tenant: "acme", tenantLimit: 2, user: "u2", userLimit: 5, allowed: true, tenantRem: 0, userRem: 4},
			{tenant: "acme", tenantLimit: 2, user: "u3", userLimit: 5, allowed: false, tenantRem: 0, userRem: 5, layer: domain.LayerTenant},
			// With room again, u3 still has all of its 5: the refusal took none.
			{tenant: "acme", tenantLimit: 3, user: "u3", userLimit: 5, allowed: true, tenantRem: 0, userRem: 4},
		}},
		{"anonymous: single layer", []dualStep{
			{tenant: "acme", tenantLimit: 2, allowed: true, tenantRem: 1, userRem: 1},
			{tenant: "acme", tenantLimit: 2, allowed: true, tenantRem: 0, userRem: 0},
			{tenant: "acme", tenantLimit: 2, allowed: false, tenantRem: 0, userRem: 0, layer: domain.LayerTenant},
		}},
		{"users share the tenant quota", []dualStep{
			{tenant: "acme", tenantLimit: 2, user: "u1", userLimit: 5, allowed: true, tenantRem: 1, userRem: 4},
			{tenant: "acme", tenantLimit: 2, user: "u2", userLimit: 5, allowed: true, tenantRem: 0, userRem: 4},
			{tenant: "acme", tenantLimit: 2, user: "u3", userLimit: 5, allowed: false, tenantRem: 0, userRem: 5, layer: domain.LayerTenant},
		}},
		{"api-key layer is apart from the user layer", []dualStep{
			{tenant: "acme", tenantLimit: 10, user: "key:k1", userLimit: 1, allowed: true, tenantRem: 9, userRem: 0},
			{tenant: "acme", tenantLimit: 10, user: "key:k1", userLimit: 1, allowed: false, tenantRem: 9, userRem: 0, layer: domain.LayerUser},
			{tenant: "acme", tenantLimit: 10, user: "k1", userLimit: 1, allowed: true, tenantRem: 8, userRem: 0},
		}},
		{"tenants are isolated", []dualStep{
			{tenant: "acme", tenantLimit: 1, user: "u1", userLimit: 5, allowed: true, tenantRem: 0, userRem: 4},
			{tenant: "acme", tenantLimit: 1, user: "u1", userLimit: 5, allowed: false, tenantRem: 0, userRem: 4, layer: domain.LayerTenant},
			{tenant: "globex", tenantLimit: 1, user: "u1", userLimit: 5, allowed: true, tenantRem: 0, userRem: 4},
		}},
		{"the window slides", []dualStep{
			{tenant: "acme", tenantLimit: 1, user: "u1", userLimit: 1, allowed: true},
			{advance: 59 * time.Second, tenant: "acme", tenantLimit: 1, user: "u1", userLimit: 1, allowed: false, layer: domain.LayerTenant},
			// The refusal consumed nothing, so the window is still the first
			// call's: one minute after it, both layers admit again.
			{advance: time.Second, tenant: "acme", tenantLimit: 1, user: "u1", userLimit: 1, allowed: true},
		}},
		{"e-mail users are case-insensitive", []dualStep{
			{tenant: "acme", tenantLimit: 10, user: "Bob@Example.org", userLimit: 1, allowed: true, tenantRem: 9, userRem: 0},
			{tenant: "ACME", tenantLimit: 10, user: "bob@example.ORG", userLimit: 1, allowed: true, tenantRem: 9, userRem: 0},
			{tenant: "acme", tenantLimit: 10, user: "BOB@EXAMPLE.ORG", userLimit: 1, allowed: false, tenantRem: 9, userRem: 0, layer: domain.LayerUser},
		}},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, _ := newBackendRig(t, b, nil)
		for i, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				prefix := fmt.Sprintf("s%d-", i) // scenarios share the store, never a key
				for j, s := range sc.steps {
					r.clock.Advance(s.advance)
					user := s.user
					if id, ok := strings.CutPrefix(user, app.APIKeyPrefix); ok {
						user = app.APIKeyPrefix + prefix + id
					} else if user != "" {
						user = prefix + user
					}
					ok, tr, ur, err := r.l.AllowDual(prefix+s.tenant, s.tenantLimit, user, s.userLimit)
					require.NoError(t, err)
					assert.Equal(t, s.allowed, ok, "step %d allowed", j)
					assert.Equal(t, s.tenantRem, tr, "step %d tenant remaining", j)
					assert.Equal(t, s.userRem, ur, "step %d user remaining", j)

					d := r.rec.last().Decision
					require.NotEqual(t, domain.CauseLocalLimit, d.Cause, "the primary store answered")
					assert.Equal(t, app.DefaultFacadeProfile, d.Profile)
					assert.Equal(t, int64(min(tr, ur)), d.Remaining, "step %d: remaining = min(tenant, user)", j)
					if s.user == "" {
						assert.Equal(t, int64(-1), d.UserRemaining, "single layer: the user layer is not checked")
					}
					if !s.allowed {
						assert.Equal(t, domain.Throttled, d.State)
						assert.Equal(t, s.layer, d.Layer, "step %d refusing layer", j)
					}
				}
			})
		}
		assertNoRawIdentifier(t, r.store.seen())
	})
}

func TestAllow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, _ := newBackendRig(t, b, nil)
		for i, want := range []int{2, 1, 0} {
			ok, rem, err := r.l.Allow(rawTenant, 3)
			require.NoError(t, err)
			assert.True(t, ok, "call %d", i+1)
			assert.Equal(t, want, rem)
		}
		ok, rem, err := r.l.AllowContext(context.Background(), rawTenant, 3)
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Equal(t, 0, rem)
		d := r.rec.last().Decision
		assert.Equal(t, domain.Throttled, d.State)
		assert.Equal(t, time.Minute, d.RetryAfter, "the façade window defaults to one minute")
		assert.Equal(t, domain.FamilyRead, d.Family)

		r.clock.Advance(time.Minute)
		ok, _, err = r.l.Allow(rawTenant, 3)
		require.NoError(t, err)
		assert.True(t, ok, "the sliding log has moved on")

		// ADR-002's key formats, with pseudonyms in place of raw ids.
		_, _, _, err = r.l.AllowDual(rawTenant, 10, rawUser, 10)
		require.NoError(t, err)
		_, _, _, err = r.l.AllowDualContext(context.Background(), rawTenant, 10, app.APIKeyPrefix+rawAPIKey, 10)
		require.NoError(t, err)
		keys := r.store.seen()
		assertNoRawIdentifier(t, keys)
		hex := `[0-9a-f]{32}`
		patterns := map[string]*regexp.Regexp{
			"tenant":  regexp.MustCompile(`^rl:\{` + hex + `\}$`),
			"user":    regexp.MustCompile(`^rl:\{` + hex + `\}:user:\{` + hex + `\}$`),
			"api key": regexp.MustCompile(`^rl:\{` + hex + `\}:key:\{` + hex + `\}$`),
		}
		for name, re := range patterns {
			found := false
			for _, k := range keys {
				found = found || re.MatchString(k)
			}
			assert.True(t, found, "no %s key of ADR-002's form among %q", name, keys)
		}
		for _, k := range keys {
			assert.Equal(t, hashTag(keys[0]), hashTag(k), "one tenant, one slot")
		}
	})
}

func TestFacadeInvalidInput(t *testing.T) {
	r := newRig(t, nil)
	tests := []struct {
		name  string
		call  func() error
		cause domain.Cause
	}{
		{"empty key", func() error { _, _, err := r.l.Allow("", 3); return err }, domain.CauseDimensionInvalid},
		{"zero limit", func() error { _, _, err := r.l.Allow(rawTenant, 0); return err }, domain.CauseInvalidLimit},
		{"negative user limit", func() error { _, _, _, err := r.l.AllowDual(rawTenant, 3, rawUser, -1); return err }, domain.CauseInvalidLimit},
		{"empty api key", func() error { _, _, _, err := r.l.AllowDual(rawTenant, 3, app.APIKeyPrefix, 3); return err }, domain.CauseDimensionInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ce *domain.ContextError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.cause, ce.Cause)
			d := r.rec.last().Decision
			assert.Equal(t, domain.RejectedInvalidContext, d.State, "recorded")
			assert.Equal(t, tt.cause, d.Cause)
		})
	}
	assert.Zero(t, r.store.calls.Load())
}

// TestFacadeDegraded: the façades take the breaker and the degraded path;
// by default they keep counting on the local store (ADR-002's
// LocalDualLimiter), or deny when configured to.
func TestFacadeDegraded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, down, _ := newBackendRig(t, b, nil)
		down(t)
		st, err := r.l.ProbeOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, domain.Degraded, st)
		for i, want := range []bool{true, true, false} {
			ok, tr, ur, err := r.l.AllowDual(rawTenant, 5, rawUser, 2)
			require.NoError(t, err)
			assert.Equal(t, want, ok, "call %d", i+1)
			if want {
				assert.Equal(t, 4-i, tr)
				assert.Equal(t, 1-i, ur)
			}
			assert.Equal(t, domain.CauseLocalLimit, r.rec.last().Decision.Cause)
		}

		rd, downD, _ := newBackendRig(t, b, func(c *app.Config) { c.Facade.Degraded = domain.ActionDeny })
		downD(t)
		_, err = rd.l.ProbeOnce(context.Background())
		require.NoError(t, err)
		ok, _, _, err := rd.l.AllowDual(rawTenant, 5, rawUser, 2)
		require.NoError(t, err, "a degraded refusal is a result, not an error")
		assert.False(t, ok)
		assert.Equal(t, domain.DeniedDegraded, rd.rec.last().Decision.State)
	})
}

// TestFacadeLayersHaveTheirOwnWindows: each façade layer has its own
// windows; the first counts on ADR-002's key, the others on that key and
// their name; a window with a fixed limit ignores the caller's.
func TestFacadeLayersHaveTheirOwnWindows(t *testing.T) {
	r := newRig(t, func(c *app.Config) {
		c.Facade.Tenant = []app.FacadeWindowConfig{{Name: "sustained", Period: time.Minute}, {Name: "burst", Period: time.Second, Limit: 2}}
		c.Facade.User = []app.FacadeWindowConfig{{Name: "sustained", Period: time.Minute}, {Name: "hourly", Period: time.Hour, Limit: 5, Algorithm: domain.GCRA}}
	})
	call := func() (bool, int, int) {
		ok, tr, ur, err := r.l.AllowDual("acme", 100, "u1", 100)
		require.NoError(t, err)
		return ok, tr, ur
	}
	ok, tr, ur := call()
	assert.True(t, ok)
	assert.Equal(t, 1, tr, "the tenant layer's least remaining: its burst of 2")
	assert.Equal(t, 4, ur, "the user layer's least remaining: its hourly 5")
	ok, _, _ = call()
	assert.True(t, ok)
	ok, _, _ = call()
	assert.False(t, ok, "the tenant burst of 2 refuses the third in a second")
	d, err := r.l.DecideDual(context.Background(), "acme", 100, "u1", 100)
	require.NoError(t, err)
	assert.Equal(t, "burst", d.LimitingWindow)
	assert.Equal(t, domain.LayerTenant, d.Layer)
	assert.Equal(t, 4, d.Windows.Len())

	for range 3 {
		r.clock.Advance(time.Second)
		ok, _, _ = call()
		assert.True(t, ok)
	}
	r.clock.Advance(time.Second)
	ok, _, ur = call()
	assert.False(t, ok, "the user's hourly 5 is spent")
	assert.Equal(t, 0, ur)

	var keys []string
	for _, k := range r.store.seen() {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 4)
	tenant := hashTag(keys[0])
	assert.ElementsMatch(t, []string{
		domain.TenantKey(tenant), domain.TenantKey(tenant) + ":burst",
		keys[2], keys[2] + ":hourly",
	}, keys)
	assert.Regexp(t, `^rl:\{[0-9a-f]{32}\}:user:\{[0-9a-f]{32}\}$`, keys[2], "the first user window keeps ADR-002's key")
}

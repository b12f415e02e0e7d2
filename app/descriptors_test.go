package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// windowsRequest is a two-window request: a tight window of 1 per minute
// and a loose one of 5, scoped by rawTenant.
func windowsRequest() app.WindowsRequest {
	return app.WindowsRequest{
		RouteKey: "envoy_edge",
		Scope:    rawTenant,
		Action:   domain.ActionDeny,
		Windows: []app.CountedWindow{
			{Subject: "user=" + rawUser, Window: domain.Window{Name: "tight", Limit: 1, Period: time.Minute}, Cost: 1},
			{Subject: "tenant=" + rawTenant, Window: domain.Window{Name: "loose", Limit: 5, Period: time.Minute}, Cost: 1},
		},
	}
}

func (r *rig) windows(t *testing.T, req app.WindowsRequest) domain.Decision {
	t.Helper()
	d, err := r.l.EvaluateWindows(context.Background(), req)
	require.NoError(t, err)
	return d
}

// TestEvaluateWindowsAllOrNothing: a request refused by one window
// consumes nothing on the other, and the decision lists every window's
// own status in request order.
func TestEvaluateWindowsAllOrNothing(t *testing.T) {
	r := newRig(t, nil)
	d := r.windows(t, windowsRequest())
	require.Equal(t, domain.Allowed, d.State)
	require.Equal(t, 2, d.Windows.Len())
	assert.Equal(t, int64(0), d.Windows.All()[0].Remaining)
	assert.Equal(t, int64(4), d.Windows.All()[1].Remaining)
	for range 3 {
		d = r.windows(t, windowsRequest())
		require.Equal(t, domain.Throttled, d.State)
		require.Equal(t, 2, d.Windows.Len(), "every window's status, never a remembered refusal's one")
		assert.False(t, d.Windows.All()[0].Allowed)
		assert.True(t, d.Windows.All()[1].Allowed)
		assert.Equal(t, int64(4), d.Windows.All()[1].Remaining, "the loose window consumed nothing")
		assert.Equal(t, domain.DimensionDescriptor, d.LimitingDimension)
		assert.Equal(t, "tight", d.LimitingWindow)
	}
	rec := r.rec.last()
	assert.Equal(t, "envoy_edge", rec.Decision.Profile)
	assert.Equal(t, domain.FamilyRead, rec.Decision.Family)
}

// TestEvaluateWindowsKeys: one hash tag per (route key, scope), no raw
// identifier in any key, and another scope counts apart.
func TestEvaluateWindowsKeys(t *testing.T) {
	r := newRig(t, nil)
	r.windows(t, windowsRequest())
	other := windowsRequest()
	other.Scope = "globex"
	r.windows(t, other)
	unscoped := windowsRequest()
	unscoped.Scope = ""
	d := r.windows(t, unscoped)
	assert.Equal(t, domain.Allowed, d.State, "another scope: another count")
	keys := r.store.seen()
	require.Len(t, keys, 6)
	assertNoRawIdentifier(t, keys)
	tags := map[string]bool{}
	for i := 0; i < 6; i += 2 {
		assert.Equal(t, hashTag(keys[i]), hashTag(keys[i+1]), "one request, one slot")
		tags[hashTag(keys[i])] = true
		assert.Regexp(t, `^rl:\{[0-9a-f]{32}\}:descriptor:[0-9a-f]{32}:envoy_edge:(tight|loose)$`, keys[i])
	}
	assert.Len(t, tags, 3, "a tag per scope, and one for no scope")
}

// TestEvaluateWindowsInvalid: a request no store could admit is
// RejectedInvalidContext with a bounded cause, before any store call.
func TestEvaluateWindowsInvalid(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*app.WindowsRequest)
		cause domain.Cause
	}{
		{"route key", func(q *app.WindowsRequest) { q.RouteKey = "Edge Proxy" }, domain.CauseRouteInvalid},
		{"no window", func(q *app.WindowsRequest) { q.Windows = nil }, domain.CauseInvalidLimit},
		{"empty subject", func(q *app.WindowsRequest) { q.Windows[0].Subject = "" }, domain.CauseDimensionInvalid},
		{"window name", func(q *app.WindowsRequest) { q.Windows[0].Window.Name = "Tight!" }, domain.CauseInvalidLimit},
		{"cost above the limit", func(q *app.WindowsRequest) { q.Windows[0].Cost = 2 }, domain.CauseInvalidLimit},
		{"zero cost", func(q *app.WindowsRequest) { q.Windows[1].Cost = 0 }, domain.CauseInvalidLimit},
		{"same key twice", func(q *app.WindowsRequest) { q.Windows[1] = q.Windows[0] }, domain.CauseInvalidLimit},
		{"scope not UTF-8", func(q *app.WindowsRequest) { q.Scope = "\xff" }, domain.CauseDimensionInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, nil)
			q := windowsRequest()
			c.edit(&q)
			d := r.windows(t, q)
			assert.Equal(t, domain.RejectedInvalidContext, d.State)
			assert.Equal(t, c.cause, d.Cause)
			assert.Empty(t, r.store.seen(), "no store call")
			assert.NotEqual(t, "Edge Proxy", r.rec.last().Decision.Profile, "an invalid route key names nothing")
		})
	}
}

// TestEvaluateWindowsDegraded: the request's action while the store is
// out (deny, bypass under the cap, local), and the zero action denies.
func TestEvaluateWindowsDegraded(t *testing.T) {
	cases := []struct {
		action domain.DegradedAction
		states []domain.State
	}{
		{0, []domain.State{domain.DeniedDegraded, domain.DeniedDegraded}},
		{domain.ActionDeny, []domain.State{domain.DeniedDegraded, domain.DeniedDegraded}},
		// The cap is 2 x the smallest limit (1) per minute.
		{domain.ActionBypass, []domain.State{domain.BypassDegraded, domain.BypassDegraded, domain.DeniedDegraded}},
		{domain.ActionLocal, []domain.State{domain.Allowed, domain.Throttled}},
	}
	for _, c := range cases {
		t.Run(c.action.String(), func(t *testing.T) {
			r := newRig(t, nil)
			r.store.mode.Store(unavailable)
			q := windowsRequest()
			q.Action = c.action
			for i, want := range c.states {
				d := r.windows(t, q)
				assert.Equal(t, want, d.State, "call %d", i)
				assert.True(t, d.Degraded)
			}
		})
	}
}

// TestEvaluateWindowsShadow: a shadow request is decided and counted but
// says it never blocks.
func TestEvaluateWindowsShadow(t *testing.T) {
	r := newRig(t, nil)
	q := windowsRequest()
	q.Shadow = true
	r.windows(t, q)
	d := r.windows(t, q)
	assert.Equal(t, domain.Throttled, d.State)
	assert.True(t, d.Shadow)
	assert.False(t, d.Blocks())
}

package app_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// TestExplainNamesTheKeysEvaluateCounts: Explain's keys are the keys the
// store receives for the same request, pseudonymised, and it records and
// consumes nothing.
func TestExplainNamesTheKeysEvaluateCounts(t *testing.T) {
	r := newRig(t, nil)
	req := fullRequest(routeRead)
	x, err := r.l.Explain(req)
	require.NoError(t, err)
	assert.Equal(t, "users_read", x.Profile)
	assert.Equal(t, domain.FamilyRead, x.Family)
	assert.Equal(t, int64(1), x.Cost)
	assert.Zero(t, r.rec.count(), "Explain records no decision")
	assert.Empty(t, r.store.seen(), "Explain calls no store")
	var keys []string
	for _, w := range x.Windows {
		keys = append(keys, w.Key)
	}
	assert.Len(t, x.Windows, 9, "nine windows")
	assertNoRawIdentifier(t, keys)

	r.eval(t, req)
	seen := r.store.seen()
	slices.Sort(seen)
	slices.Sort(keys)
	assert.Equal(t, slices.Compact(seen), slices.Compact(keys))
}

// TestExplainRefusesWhatEvaluateRefuses: an unknown route and a malformed
// identity are the ContextErrors Evaluate's decision carries.
func TestExplainRefusesWhatEvaluateRefuses(t *testing.T) {
	r := newRig(t, nil)
	_, err := r.l.Explain(app.Request{Route: "GET /nowhere", ClientIP: rawIP})
	var ce *domain.ContextError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, domain.CauseProfileMissing, ce.Cause)
	_, err = r.l.Explain(app.Request{Route: routeRead, ClientIP: rawIP, Cost: 1 << 40})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, domain.CauseInvalidLimit, ce.Cause)
}

// TestPeekAndResetWindows: PeekWindows reads what EvaluateWindows left,
// consuming nothing; ResetWindows forgets it and records the actor.
func TestPeekAndResetWindows(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	wr := app.WindowsRequest{RouteKey: "edge", Action: domain.ActionDeny, Scope: "acme", Windows: []app.CountedWindow{
		{Subject: "6:tenant4:acme", Window: domain.Window{Name: "tenant", Limit: 2, Period: time.Minute}, Cost: 1},
		{Subject: "4:path5:/api/", Window: domain.Window{Name: "api", Limit: 5, Period: time.Minute, Algorithm: domain.GCRA}, Cost: 1},
	}}
	for range 2 {
		d, err := r.l.EvaluateWindows(ctx, wr)
		require.NoError(t, err)
		require.Equal(t, domain.Allowed, d.State)
	}
	for range 2 { // twice: a peek consumes nothing
		d, err := r.l.PeekWindows(ctx, wr)
		require.NoError(t, err)
		ws := d.Windows.All()
		require.Len(t, ws, 2)
		assert.False(t, ws[0].Allowed)
		assert.Equal(t, int64(0), ws[0].Remaining)
		assert.Equal(t, int64(3), ws[1].Remaining)
		assert.Positive(t, ws[0].ResetAfter)
	}
	x, err := r.l.ExplainWindows(wr)
	require.NoError(t, err)
	require.Len(t, x.Windows, 2)
	assertNoRawIdentifier(t, []string{x.Windows[0].Key, x.Windows[1].Key})

	res, err := r.l.ResetWindows(ctx, wr, "support-7")
	require.NoError(t, err)
	assert.Equal(t, app.ResetResult{Keys: 3, Deleted: 2}, res, "two windows and the scope's degraded cap, which counted nothing")
	resets := r.rec.Resets()
	require.Len(t, resets, 2, "before and after")
	for _, rec := range resets {
		assert.Equal(t, "support-7", rec.Actor)
		assert.Equal(t, domain.DimensionDescriptor, rec.Dimension)
		assert.NotContains(t, rec.SubjectID, "acme")
	}
	assert.Equal(t, 2, resets[1].Deleted)
	d, err := r.l.PeekWindows(ctx, wr)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Windows.All()[0].Remaining, "forgotten")

	_, err = r.l.PeekWindows(ctx, app.WindowsRequest{RouteKey: "Bad Key", Windows: wr.Windows})
	var ce *domain.ContextError
	assert.ErrorAs(t, err, &ce)
	_, err = r.l.ResetWindows(ctx, app.WindowsRequest{RouteKey: "edge"}, "support-7")
	assert.ErrorAs(t, err, &ce, "no window: nothing reset")
	assert.Len(t, r.rec.Resets(), 2, "nor recorded")

	// A store that cannot answer: the peek fails, it never guesses.
	r.store.mode.Store(unavailable)
	_, err = r.l.PeekWindows(ctx, wr)
	assert.True(t, errors.Is(err, domain.ErrStoreUnavailable), "%v", err)
}

// TestFieldLine: a ConfigError's field is found on its line, profiles and
// plans by name; a field not written points at its nearest written parent.
func TestFieldLine(t *testing.T) {
	doc := []byte(`store_timeout: 50ms
profiles:
  - name: search
    family: read
    routes: ["GET /x"]
    windows:
      ip:
        - {name: burst, limit: 0, period: 1s}
plans:
  - name: pro
    profiles:
      search: {multiplier: 2}
`)
	for field, want := range map[string]int{
		"store_timeout":                        1,
		"profiles[search].family":              4,
		"profiles[search].windows.ip[0].limit": 8,
		"profiles[search].windows.ip[0].name":  8,
		"profiles[search].windows.user":        6,
		"plans[pro].profiles.search":           12,
		"hmac_secret":                          0,
		"(document)":                           0,
	} {
		assert.Equal(t, want, app.FieldLine(doc, field), field)
	}
	assert.Zero(t, app.FieldLine([]byte("a: [\n"), "a"), "not YAML")
}

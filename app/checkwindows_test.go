package app_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

func (r *rig) check(t *testing.T, req app.WindowsRequest) domain.Decision {
	t.Helper()
	d, err := r.l.CheckWindows(context.Background(), req)
	require.NoError(t, err)
	return d
}

// TestCheckWindowsConsumesNothing: a check answers what EvaluateWindows
// would, on a scripted timeline, and never consumes: checks before, between
// and after the decisions leave every count as the decisions alone do.
func TestCheckWindowsConsumesNothing(t *testing.T) {
	r := newRig(t, nil)
	steps := []struct {
		name      string
		check     bool
		want      domain.State
		remaining [2]int64
	}{
		{"check on fresh keys", true, domain.Allowed, [2]int64{1, 5}},
		{"check again", true, domain.Allowed, [2]int64{1, 5}},
		{"decide: the tight window's one unit", false, domain.Allowed, [2]int64{0, 4}},
		{"check: the tight window is spent", true, domain.Throttled, [2]int64{0, 4}},
		{"decide: refused", false, domain.Throttled, [2]int64{0, 4}},
		{"check still refused, nothing consumed", true, domain.Throttled, [2]int64{0, 4}},
	}
	for _, s := range steps {
		var d domain.Decision
		if s.check {
			d = r.check(t, windowsRequest())
		} else {
			d = r.windows(t, windowsRequest())
		}
		require.Equal(t, s.want, d.State, s.name)
		require.Equal(t, 2, d.Windows.Len(), s.name)
		for i, w := range d.Windows.All() {
			assert.Equal(t, s.remaining[i], w.Remaining, "%s: window %d", s.name, i)
		}
		assert.False(t, d.Degraded, s.name)
		assert.Equal(t, domain.SourcePrimary, d.Source, s.name)
	}
	assert.Equal(t, 6, r.rec.count(), "every check is a recorded decision")
	var peeks int
	for _, c := range r.rec.StoreCalls() {
		if c.Op == ports.OpPeek {
			peeks++
		}
	}
	assert.Equal(t, 4, peeks, "a check is the store's Peek")
}

// TestCheckWindowsDegraded: while the store cannot answer, a check follows
// the degraded matrix; the local action checks the fallback store without
// counting on it.
func TestCheckWindowsDegraded(t *testing.T) {
	cases := []struct {
		action domain.DegradedAction
		states []domain.State
	}{
		{domain.ActionDeny, []domain.State{domain.DeniedDegraded, domain.DeniedDegraded}},
		// The cap is 2 x the smallest limit (1) per minute: a check that
		// lets a request through takes its share of it.
		{domain.ActionBypass, []domain.State{domain.BypassDegraded, domain.BypassDegraded, domain.DeniedDegraded}},
		// Checks consume nothing on the fallback: they pass as often as asked.
		{domain.ActionLocal, []domain.State{domain.Allowed, domain.Allowed, domain.Allowed}},
	}
	for _, c := range cases {
		t.Run(c.action.String(), func(t *testing.T) {
			r := newRig(t, nil)
			r.store.mode.Store(unavailable)
			q := windowsRequest()
			q.Action = c.action
			for i, want := range c.states {
				d := r.check(t, q)
				assert.Equal(t, want, d.State, "check %d", i)
				assert.True(t, d.Degraded, "check %d", i)
			}
		})
	}
	t.Run("local, after a degraded decision", func(t *testing.T) {
		r := newRig(t, nil)
		r.store.mode.Store(unavailable)
		q := windowsRequest()
		q.Action = domain.ActionLocal
		require.Equal(t, domain.Allowed, r.windows(t, q).State)
		d := r.check(t, q)
		assert.Equal(t, domain.Throttled, d.State, "the fallback's count is checked")
		assert.Equal(t, domain.SourceFallback, d.Source)
		assert.Equal(t, domain.CauseLocalLimit, d.Cause)
	})
}

// TestCheckWindowsInvalid: a request EvaluateWindows refuses, a check
// refuses the same way.
func TestCheckWindowsInvalid(t *testing.T) {
	r := newRig(t, nil)
	q := windowsRequest()
	q.Windows[0].Cost = 0
	d := r.check(t, q)
	assert.Equal(t, domain.RejectedInvalidContext, d.State)
	assert.Equal(t, domain.CauseInvalidLimit, d.Cause)
	assert.Empty(t, r.store.seen(), "nothing reached the store")
}

// TestCheckWindowsAcrossPartitions: a check whose windows live under two
// hash tags, on a store that serves one tag per call, peeks each
// partition, reads each window's own count and holds nothing.
func TestCheckWindowsAcrossPartitions(t *testing.T) {
	store := newMemReserver(true)
	r := newReserveRig(t, testConfig(), store, nil)
	q := windowsRequest()
	q.Windows[0].Scope, q.Windows[1].Scope = "globex", "initech"
	ctx := context.Background()
	d, err := r.l.EvaluateWindows(ctx, q)
	require.NoError(t, err)
	require.Equal(t, domain.Allowed, d.State)
	for i := range 2 {
		d, err = r.l.CheckWindows(ctx, q)
		require.NoError(t, err)
		assert.Equal(t, domain.Throttled, d.State, "check %d: the tight window is spent", i)
		require.Equal(t, 2, d.Windows.Len())
		assert.Equal(t, int64(0), d.Windows.All()[0].Remaining)
		assert.Equal(t, int64(4), d.Windows.All()[1].Remaining, "check %d: nothing consumed", i)
	}
	assert.Equal(t, int64(4), store.calls[ports.OpPeek].Load(), "two checks, two partitions each")
	assert.Zero(t, store.calls[ports.OpSettle].Load(), "a check holds nothing to release")
}

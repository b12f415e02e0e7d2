package domain_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func TestHealthMachineTimeline(t *testing.T) {
	ok, fail := domain.ProbeOK, domain.ProbeFailed
	H, D, R := domain.Healthy, domain.Degraded, domain.Recovering
	steps := []struct {
		ev      domain.HealthEvent
		state   domain.SystemState
		changed bool
	}{
		{ok, H, false},
		{fail, D, true},
		{fail, D, false},
		{ok, R, true}, // first good probe: RECOVERING, 1 of 3
		{ok, R, false},
		{fail, D, true}, // a failure while recovering resets the count
		{ok, R, true},
		{ok, R, false},
		{ok, H, true}, // third good probe in a row
		{ok, H, false},
	}
	m := domain.NewHealthMachine(0)
	for i, st := range steps {
		from := m.State()
		next, change, changed, err := m.Apply(st.ev)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.state, next.State(), "step %d state", i)
		assert.Equal(t, st.changed, changed, "step %d changed", i)
		if changed {
			assert.Equal(t, domain.StateChange{From: from, To: st.state}, change)
			assert.NoError(t, domain.CheckTransition(change.From, change.To))
		}
		assert.Equal(t, from, m.State(), "Apply never mutates its receiver")
		m = next
	}
}

func TestHealthMachineClearingCount(t *testing.T) {
	for _, tc := range []struct{ clearing, probes int }{{0, 3}, {1, 2}, {2, 2}, {3, 3}, {5, 5}} {
		m := domain.NewHealthMachine(tc.clearing)
		m, _, _, _ = m.Apply(domain.ProbeFailed)
		n := 0
		for m.State() != domain.Healthy {
			var err error
			m, _, _, err = m.Apply(domain.ProbeOK)
			require.NoError(t, err)
			n++
			require.LessOrEqual(t, n, 10)
		}
		assert.Equal(t, tc.probes, n, "clearing=%d", tc.clearing)
	}
}

func TestCheckTransitionRefusesUnlisted(t *testing.T) {
	states := []domain.SystemState{domain.Healthy, domain.Degraded, domain.Recovering}
	listed := map[[2]domain.SystemState]bool{
		{domain.Healthy, domain.Degraded}:    true,
		{domain.Degraded, domain.Recovering}: true,
		{domain.Recovering, domain.Healthy}:  true,
		{domain.Recovering, domain.Degraded}: true,
	}
	for _, from := range states {
		for _, to := range states {
			err := domain.CheckTransition(from, to)
			if listed[[2]domain.SystemState{from, to}] {
				assert.NoError(t, err, "%s → %s", from, to)
			} else {
				assert.ErrorIs(t, err, domain.ErrInvalidTransition, "%s → %s", from, to)
			}
		}
	}
	_, _, _, err := domain.NewHealthMachine(3).Apply(domain.HealthEvent(42))
	assert.ErrorIs(t, err, domain.ErrInvalidTransition)
}

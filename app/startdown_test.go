package app_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// unreadyStore is a store that says it is not connected yet
// (ports.Readier) until ready is set.
type unreadyStore struct {
	ports.Store
	ready atomic.Bool
}

func (s *unreadyStore) Ready() error {
	if s.ready.Load() {
		return nil
	}
	return fmt.Errorf("%w: not connected yet (the test's)", domain.ErrStoreUnavailable)
}

// TestStartsInTheStateOfItsStore (38.1): a Limiter on a store that is
// not connected at New probes it once before serving; a failed probe
// starts it DEGRADED (the transition recorded, the degraded matrix
// deciding, the loop probing at the recovery interval), a good one
// HEALTHY. Once the store answers, the loop brings it back.
func TestStartsInTheStateOfItsStore(t *testing.T) {
	for _, up := range []bool{false, true} {
		t.Run(fmt.Sprintf("store answers %t", up), func(t *testing.T) {
			clock := fakeclock.New(t0)
			prober := &switchProber{}
			if !up {
				prober.set(fmt.Errorf("%w: connection refused (the test's)", domain.ErrStoreUnavailable))
			}
			rec := &recorder{}
			store := &unreadyStore{Store: newLocal(t)}
			cfg := testConfig()
			l, err := app.New(cfg, app.Deps{Store: store, Fallback: newLocal(t), Clock: clock, Prober: prober, Recorder: rec})
			require.NoError(t, err, "an outage never fails New")
			t.Cleanup(func() { _ = l.Close() })
			require.Equal(t, 1, prober.probes, "one probe before serving")
			d, err := l.Evaluate(context.Background(), app.Request{Route: routeLogin, ClientIP: rawIP})
			require.NoError(t, err)
			if up {
				assert.Equal(t, domain.Healthy, l.SystemState())
				assert.Empty(t, rec.changes())
				assert.Equal(t, domain.SourcePrimary, d.Source)
				return
			}
			assert.Equal(t, domain.Degraded, l.SystemState())
			assert.Equal(t, []domain.StateChange{{From: domain.Healthy, To: domain.Degraded}}, rec.changes())
			assert.True(t, d.Degraded, "the degraded matrix decides")
			assert.Equal(t, domain.DeniedDegraded, d.State, "auth: deny")

			prober.set(nil)
			store.ready.Store(true)
			for i := range cfg.WithDefaults().ClearingProbes {
				clock.Advance(cfg.WithDefaults().RecoveryProbeInterval)
				require.Eventually(t, func() bool { return prober.count() >= 2+i }, waitFor, tick,
					"the loop probes at the recovery interval")
			}
			require.Eventually(t, func() bool { return l.SystemState() == domain.Healthy }, waitFor, tick)
		})
	}
}

// TestAConnectedStoreIsNotProbedAtNew: a store that says it is connected
// (or cannot say) starts HEALTHY without a probe, as before.
func TestAConnectedStoreIsNotProbedAtNew(t *testing.T) {
	prober := &switchProber{}
	store := &unreadyStore{Store: newLocal(t)}
	store.ready.Store(true)
	l, err := app.New(testConfig(), app.Deps{Store: store, Fallback: newLocal(t), Clock: fakeclock.New(t0), Prober: prober, Recorder: &recorder{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	assert.Zero(t, prober.count())
	assert.Equal(t, domain.Healthy, l.SystemState())
}

// Waits on the health loop's goroutine (never a timing assertion).
const (
	waitFor = 10 * time.Second
	tick    = time.Millisecond
)

func (p *switchProber) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes
}

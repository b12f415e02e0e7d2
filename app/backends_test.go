package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// TestMain stops the redis-server processes the harness started, then
// fails the binary if any goroutine outlives the tests (the health loop,
// the local store's sweeper, a Redis client).
func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

// backend is a primary store the integration tests run on, with a way to
// take it down and bring it back.
type backend struct {
	name string
	// open returns the primary (wrapped, so tests see its keys), its
	// prober, and the outage controls.
	open func(t *testing.T) (primary *faultyStore, prober ports.Prober, down, up func(t *testing.T))
}

var backends = []backend{
	{name: "reference", open: func(t *testing.T) (*faultyStore, ports.Prober, func(*testing.T), func(*testing.T)) {
		f := newFaulty(conformance.NewReferenceStore())
		return f, f, func(*testing.T) { f.mode.Store(unavailable) }, func(*testing.T) { f.mode.Store(healthy) }
	}},
	{name: "local", open: func(t *testing.T) (*faultyStore, ports.Prober, func(*testing.T), func(*testing.T)) {
		f := newFaulty(newLocal(t))
		return f, f, func(*testing.T) { f.mode.Store(unavailable) }, func(*testing.T) { f.mode.Store(healthy) }
	}},
	{name: "redis", open: func(t *testing.T) (*faultyStore, ports.Prober, func(*testing.T), func(*testing.T)) {
		srv := redistest.NewServer(t)
		s, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone, Time: redis.CallerTime})
		if err != nil {
			t.Fatalf("redis.New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		f := newFaulty(s)
		down := func(t *testing.T) {
			t.Helper()
			if err := srv.Stop(); err != nil {
				t.Fatalf("stopping redis: %v", err)
			}
		}
		up := func(t *testing.T) {
			t.Helper()
			if err := srv.Start(); err != nil {
				t.Fatalf("starting redis: %v", err)
			}
			waitRedis(t, s.Prober())
		}
		return f, s.Prober(), down, up
	}},
}

// waitRedis polls the prober until the client has reconnected, so that the
// health tests see the restarted server on their next probe. It waits on
// the client's own dial and retry, never on a fixed sleep.
func waitRedis(t *testing.T, p ports.Prober) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := p.Probe(ctx)
		if err == nil {
			cancel()
			return
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("redis did not come back: %v", err)
		}
		<-ctx.Done() // pace the polling on the probe's own deadline
		cancel()
	}
}

func newLocal(t testing.TB) *local.Store {
	s, err := local.New(local.Config{})
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newBackendRig wires a Limiter to a backend, with the local adapter as the
// fallback.
func newBackendRig(t *testing.T, b backend, mutate func(*app.Config)) (r *rig, down, up func(*testing.T)) {
	t.Helper()
	cfg := testConfig()
	// A real server's first calls (connection, script load) may take longer
	// than the production 50 ms on a loaded CI machine under the race
	// detector; a spurious timeout would open the breaker and hide the
	// store behind the fallback. Tests about outages stop the server, which
	// fails fast, or set their own deadline.
	cfg.StoreTimeout = 2 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	primary, prober, down, up := b.open(t)
	return newRigProber(t, cfg, primary, prober, newLocal(t)), down, up
}

// forEachBackend runs f as one subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// causeOfOutage accepts either store failure cause: a stopped Redis may
// refuse the connection or let the deadline pass.
func causeOfOutage(c domain.Cause) bool {
	return c == domain.CauseStoreUnavailable || c == domain.CauseStoreTimeout
}

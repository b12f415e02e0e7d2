// Package limitertest builds, for tests, the Limiters and stores the
// entry points' end-to-end tests run on: an in-process store, a Redis
// store on a harness server, and a Limiter on either with an in-process
// fallback. Everything it builds is closed at the test's cleanup.
package limitertest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// StoreTimeout is the deadline the stores built here use, and the one
// test configurations should set as app.Config.StoreTimeout: generous, so
// that a loaded machine does not turn slow answers into degraded
// decisions in tests about something else.
const StoreTimeout = 2 * time.Second

// Local returns an in-process store with the default configuration.
func Local(t testing.TB) *local.Store {
	t.Helper()
	s, err := local.New(local.Config{})
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Redis returns a store on the standalone Redis server at url.
func Redis(t testing.TB, url string) *redis.Store {
	t.Helper()
	s, err := redis.New(redis.Config{URL: url, Mode: redis.ModeStandalone, Timeout: StoreTimeout})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Backend is a primary store an end-to-end test runs on.
type Backend struct {
	Name    string
	Primary func(t testing.TB) ports.Store
}

// Backends are the in-process store and the harness' shared Redis server.
func Backends() []Backend {
	return []Backend{
		{"local", func(t testing.TB) ports.Store { return Local(t) }},
		{"redis", func(t testing.TB) ports.Store { return Redis(t, redistest.StandaloneURL(t)) }},
	}
}

// Limiter builds a Limiter on primary with an in-process fallback; a nil
// rec records in a recordertest.Memory.
func Limiter(t testing.TB, cfg app.Config, primary ports.Store, rec ports.Recorder) *app.Limiter {
	t.Helper()
	if rec == nil {
		rec = &recordertest.Memory{}
	}
	lim, err := app.New(cfg, app.Deps{Store: primary, Fallback: Local(t), Recorder: rec})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

package drills

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain stops every redis-server the drills started, then fails the
// binary if a goroutine outlived its drill: the Limiter's health loop, the
// local store's sweeper, a Redis client's connections, a fault proxy.
// Two goroutines are meant to stay: the harness' spawner, locked to its
// thread for the life of the binary, and rueidis' closing of the
// connections a cluster failover made stale, which it does five seconds
// later in a goroutine of its own that Close does not stop.
//
// Started with SLUICE_DRILL_HOG set (by startHog, saturation_norace_test.go),
// the binary is no test run but the drills' CPU hog: it spins and exits.
func TestMain(m *testing.M) {
	if v := os.Getenv(hogEnv); v != "" {
		os.Exit(hog(v))
	}
	redistest.MainLeakFree(m)
}

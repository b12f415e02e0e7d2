package drills

import (
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
func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

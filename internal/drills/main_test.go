package drills

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain stops every redis-server the drills started, then fails the
// binary if a goroutine outlived its drill: the Limiter's health loop, the
// local store's sweeper, a Redis client's connections, a fault proxy.
// Two goroutines are meant to stay: the harness' spawner, locked to its
// thread for the life of the binary, and rueidis' closing of the
// connections a cluster failover made stale, which it does five seconds
// later in a goroutine of its own that Close does not stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(stopServersFirst{m},
		goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// stopServersFirst runs the drills and stops the harness' servers before
// goleak looks: a server's reaper goroutine ends with its process.
type stopServersFirst struct{ m *testing.M }

func (s stopServersFirst) Run() int { return redistest.Run(s.m) }

package drills

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain stops every redis-server the drills started, then fails the
// binary if a goroutine outlived its drill: the Limiter's health loop, the
// local store's sweeper, a Redis client's connections, a fault proxy.
// The harness' spawner, locked to its thread for the life of the binary,
// is the one goroutine meant to stay.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(stopServersFirst{m},
		goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1"))
}

// stopServersFirst runs the drills and stops the harness' servers before
// goleak looks: a server's reaper goroutine ends with its process.
type stopServersFirst struct{ m *testing.M }

func (s stopServersFirst) Run() int { return redistest.Run(s.m) }

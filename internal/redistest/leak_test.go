package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

// expected are the goroutines meant to outlive the tests: the one locked
// to its thread for the life of the binary that starts every server
// (spawn_linux.go), and rueidis' closing of the connections a cluster
// topology change made stale, which it does five seconds later in a
// goroutine of its own that Close does not stop (a failover test may end
// within those five seconds).
var expected = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
}

// stopServersFirst runs the tests and stops every server before goleak
// looks: a server's reaper goroutine ends with its process, so one that
// is left means a process that is left.
type stopServersFirst struct{ m *testing.M }

func (s stopServersFirst) Run() int { return Run(s.m) }

package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

// MainLeakFree is Main for a package that also checks for leaks: it runs
// the tests, stops every server the harness started, then fails the
// binary (goleak) if any goroutine is left but those listed in ignore and
// those meant to outlive the tests:
//
//   - the harness' spawner, locked to its thread for the life of the binary
//     (the parent-death signal of every server needs it);
//   - rueidis' closing of the connections a cluster topology change made
//     stale, which it does five seconds later in a goroutine of its own
//     that Close does not stop (a failover test may end within those five
//     seconds);
//   - rueidis' back-off before dialling again a node that refused a
//     connection (under a second), which Close does not interrupt either.
//
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.MainLeakFree(m) }
func MainLeakFree(m *testing.M, ignore ...goleak.Option) {
	goleak.VerifyTestMain(stopServersFirst{m}, append(Expected(), ignore...)...)
}

// Expected returns goleak options for the goroutines the harness and the
// Redis client leave on purpose (see MainLeakFree), for packages that call
// goleak themselves.
func Expected() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	}
}

// stopServersFirst runs the tests and stops every server before goleak
// looks: a server's reaper goroutine ends with its process, so one that
// is left means a process that is left.
type stopServersFirst struct{ m *testing.M }

func (s stopServersFirst) Run() int { return Run(s.m) }

package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

// spawner is the goroutine locked to its thread for the life of the
// binary that starts every server (spawn_linux.go): it is meant to stay.
var spawner = goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1")

// stopServersFirst runs the tests and stops every server before goleak
// looks: a server's reaper goroutine ends with its process, so one that
// is left means a process that is left.
type stopServersFirst struct{ m *testing.M }

func (s stopServersFirst) Run() int { return Run(s.m) }

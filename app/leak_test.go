package app_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

// harnessGoroutines are the redis-server harness' own: the goroutine,
// locked to its thread for the life of the binary, that spawns every
// server (the parent-death signal needs it).
var harnessGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1"),
}

// stopServersFirst runs the tests and stops the harness' servers before
// goleak looks: a server's reaper goroutine ends with its process.
type stopServersFirst struct{ m *testing.M }

func (s stopServersFirst) Run() int { return redistest.Run(s.m) }

package redis_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain stops the redis-server processes the harness started.
func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

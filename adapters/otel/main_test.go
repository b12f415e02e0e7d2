package otel_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the binary if a goroutine outlives the tests: the
// Limiters' health loops, the local stores' sweepers, the test servers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package local

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// store a test makes is closed, and Close must stop ristretto's goroutines
// and the sweeper.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package conformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// peekConsumes is a broken store: its Peek consumes, as Evaluate does.
type peekConsumes struct{ ports.Store }

func (s peekConsumes) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.Evaluate(ctx, now, limits)
}

// Check runs the suite without a *testing.T: the reference store passes
// it, and a store whose Peek consumes fails the cases that say why. In a
// store's own tests, Run or RunWith takes the test's *testing.T instead.
func ExampleCheck() {
	newStore := func(t testing.TB) ports.Store {
		s := conformance.NewReferenceStore()
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	failed := conformance.Check(conformance.Features{}, newStore)
	fmt.Printf("reference store: %d failures\n", len(failed))

	failed = conformance.Check(conformance.Features{}, func(t testing.TB) ports.Store {
		return peekConsumes{newStore(t)}
	})
	for _, c := range failed.Cases() {
		if c == "PeekConsumesNothing" || c == "PeekAgreesWithEvaluate" {
			fmt.Println("broken store fails", c)
		}
	}
	// Output:
	// reference store: 0 failures
	// broken store fails PeekAgreesWithEvaluate
	// broken store fails PeekConsumesNothing
}

package redis

import (
	"context"

	"github.com/sluicehq/sluice/ports"
)

// The capabilities app.Limiter finds on a Store by type assertion, so
// that the documented wiring (app.Deps{Store, Fallback, Recorder}) gets
// them without an argument of its own.
var (
	_ ports.HealthProber  = (*Store)(nil)
	_ ports.MemoryChecker = (*Store)(nil)
	_ ports.Readier       = (*Store)(nil) // Ready, connect.go
)

// HealthProber is ports.HealthProber: the per-node Prober (Store.Prober).
func (s *Store) HealthProber() ports.Prober { return s.Prober() }

// CheckMemory is ports.MemoryChecker: the warnings of CheckMaxMemory.
func (s *Store) CheckMemory(ctx context.Context, budgetBytes int64) ([]string, error) {
	r, err := s.CheckMaxMemory(ctx, budgetBytes)
	return r.Warnings, err
}

//go:build !race

package domain

import "testing"

// TestPseudonymiseAllocs runs without the race detector only, which makes
// sync.Pool drop items on purpose; `make test` runs the allocation tests in
// a second pass without -race.
func TestPseudonymiseAllocs(t *testing.T) {
	p, err := NewPseudonymiser(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	p.Pseudonymise(DimensionUser, "warm")
	allocs := testing.AllocsPerRun(100, func() { p.Pseudonymise(DimensionUser, "alice@example.org") })
	// The returned string is the one allocation.
	if allocs > 1 {
		t.Fatalf("Pseudonymise allocates %.0f times per call, want at most 1", allocs)
	}
}

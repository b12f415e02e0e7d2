package local

import (
	"testing"

	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/ports"
)

// TestConformance runs the shared store suite twice: on a default store, and
// on one whose cache fits no entry, so that every key lives outside
// ristretto and the suite's exactness is checked on the pending path too.
// The local store counts on the instant it is given, one state per store:
// the full contract, with its IdleGrace as the grace for instants out of
// order (rule S5 of docs/adr/009).
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"default", Config{}}, {"nothing cached", tinyCache}} {
		t.Run(c.name, func(t *testing.T) {
			conformance.RunWith(t, conformance.Features{Grace: DefaultIdleGrace}, func(t testing.TB) ports.Store { return newStore(t, c.cfg) })
		})
	}
}

// BenchmarkConformance runs the shared store benchmarks on a default store.
func BenchmarkConformance(b *testing.B) {
	conformance.Benchmark(b, func(t testing.TB) ports.Store { return newStore(t, Config{}) })
}

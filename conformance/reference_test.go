package conformance

import (
	"testing"

	"github.com/sluicehq/sluice/ports"
)

func newReference(t testing.TB) ports.Store {
	s := NewReferenceStore()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestReferenceStore(t *testing.T) {
	RunWith(t, Features{Grace: ReferenceGrace}, newReference)
}

func BenchmarkReferenceStore(b *testing.B) {
	Benchmark(b, newReference)
}

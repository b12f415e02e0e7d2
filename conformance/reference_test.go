package conformance

import (
	"testing"

	"github.com/sluicehq/sluice/ports"
)

func TestReferenceStore(t *testing.T) {
	Run(t, func(t *testing.T) ports.Store {
		s := NewReferenceStore()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func BenchmarkReferenceStore(b *testing.B) {
	Benchmark(b, func(b *testing.B) ports.Store {
		s := NewReferenceStore()
		b.Cleanup(func() { _ = s.Close() })
		return s
	})
}

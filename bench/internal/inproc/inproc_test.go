package inproc

import "testing"

// BenchmarkInProcess runs every in-process benchmark:
//
//	cd bench && go test -run '^$' -bench InProcess -benchmem ./internal/inproc/
func BenchmarkInProcess(b *testing.B) {
	for _, bm := range Benchmarks() {
		b.Run(bm.Name(), bm.F)
	}
}

func TestBenchmarkNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, bm := range Benchmarks() {
		if seen[bm.Name()] {
			t.Errorf("two benchmarks named %s", bm.Name())
		}
		seen[bm.Name()] = true
	}
	if len(seen) == 0 {
		t.Fatal("no benchmarks")
	}
}

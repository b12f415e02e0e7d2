package inproc

import (
	"testing"

	"github.com/sluicehq/sluice/bench/internal/suite"
	"github.com/sluicehq/sluice/domain"
)

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

// TestNineWindowRequests checks the nine-window requests: nine GCRA keys,
// and nine sliding-log windows on five shared logs (docs/adr/015) that the
// store contract accepts, each principal's burst and sustained windows on
// one key.
func TestNineWindowRequests(t *testing.T) {
	p, err := suite.NewPopulation(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		w          []domain.Window
		keys, want int
	}{
		{"GCRA", []domain.Window{gcra}, 9, 9},
		{"sliding log", []domain.Window{log, logSustained}, 5, 9},
	} {
		for i := range p.Clients {
			set := nineLimits(&p.Clients[i], 9, tc.w...)
			keys := map[string]int{}
			for _, l := range set {
				keys[l.Key]++
			}
			if err := domain.ValidateLimits(set); err != nil || len(set) != tc.want || len(keys) != tc.keys {
				t.Errorf("%s, client %d: %d windows on %d keys (%v), want %d on %d", tc.name, i, len(set), len(keys), err, tc.want, tc.keys)
			}
		}
	}
	if one := nineLimits(&p.Clients[0], 1, log); len(one) != 1 || one[0].Key != p.Clients[0].One[0] {
		t.Errorf("one key: %+v", one)
	}
}

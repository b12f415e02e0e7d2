package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

// TestRepeatedForMatchesSequentialResults: a Repeated built from the last
// admitted and the first refused result gives every request the Result
// sequential Evaluate calls would have given it, on both algorithms, with
// cost > 1.
func TestRepeatedForMatchesSequentialResults(t *testing.T) {
	limits := []domain.Limit{
		{Key: "a", Window: win(domain.SlidingLog, 10, 10*time.Second), Cost: 2},
		{Key: "b", Window: win(domain.GCRA, 20, 10*time.Second), Cost: 3},
	}
	states := make([]domain.KeyState, len(limits))
	// Some units already spent: 1 on a, 4 on b.
	states[0].Committed(t0, limits[0].Window, 1, grace, states[0].Check(t0, limits[0].Window, 1, grace))
	states[1].Committed(t0, limits[1].Window, 4, grace, states[1].Check(t0, limits[1].Window, 4, grace))
	const n = 7
	var seq []domain.Result
	for range n {
		st := make([]domain.LimitStatus, len(limits))
		for i, l := range limits {
			st[i] = states[i].Check(t0, l.Window, l.Cost, grace)
		}
		r := domain.NewResult(st)
		if r.Allowed {
			for i, l := range limits {
				st[i] = states[i].Committed(t0, l.Window, l.Cost, grace, st[i])
			}
			r = domain.NewResult(st)
		}
		seq = append(seq, r)
	}
	admitted := 0
	for _, r := range seq {
		if r.Allowed {
			admitted++
		}
	}
	// a: 9 left at cost 2 → 4; b: 16 left at cost 3 → 5.
	assert.Equal(t, 4, admitted)
	rep := domain.Repeated{N: n, Admitted: admitted, Last: seq[admitted-1], Refused: seq[admitted]}
	for i := range n {
		assert.Equal(t, seq[i], rep.For(i, limits), "request %d", i)
	}
}

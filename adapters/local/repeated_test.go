package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// TestEvaluateRepeated checks ports.Repeater on the store: as many
// requests as fit on the tightest window, at the largest n, on both
// algorithms and across keys; n out of range is a *domain.LimitError that
// consumes nothing.
func TestEvaluateRepeated(t *testing.T) {
	tests := []struct {
		name     string
		limits   []domain.Limit
		n        int
		admitted int
	}{
		{"GCRA admits MaxRepeat", []domain.Limit{lim("g", gcra(1<<20, time.Hour), 1)}, ports.MaxRepeat, ports.MaxRepeat},
		{"sliding log admits its limit", []domain.Limit{lim("s", sliding(100, time.Hour), 3)}, ports.MaxRepeat, 33},
		{"the tightest window decides", []domain.Limit{lim("a", sliding(100, time.Hour), 1), lim("b", gcra(7, time.Minute), 2)}, 10, 3},
		{"fewer than fit", []domain.Limit{lim("c", gcra(10, time.Hour), 1)}, 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStore(t, Config{})
			rep, err := st.EvaluateRepeated(t.Context(), at(0), tt.limits, tt.n)
			require.NoError(t, err)
			assert.Equal(t, tt.n, rep.N)
			assert.Equal(t, tt.admitted, rep.Admitted)
			assert.True(t, rep.Last.Allowed)
			if tt.admitted < tt.n {
				assert.False(t, rep.Refused.Allowed)
			}
			// The store holds exactly what the admitted requests consumed.
			r, err := st.Peek(t.Context(), at(0), tt.limits)
			require.NoError(t, err)
			assert.Equal(t, rep.Last.Remaining, r.Remaining)
		})
	}
	t.Run("n out of range", func(t *testing.T) {
		st := newStore(t, Config{})
		l := []domain.Limit{lim("k", sliding(3, time.Hour), 1)}
		for _, n := range []int{0, -1, ports.MaxRepeat + 1} {
			_, err := st.EvaluateRepeated(t.Context(), at(0), l, n)
			var le *domain.LimitError
			assert.ErrorAs(t, err, &le, "n = %d", n)
		}
		r, err := st.Peek(t.Context(), at(0), l)
		require.NoError(t, err)
		assert.Equal(t, int64(3), r.Remaining)
	})
}

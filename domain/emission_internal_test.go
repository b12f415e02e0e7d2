package domain

import (
	"testing"
	"time"
)

// TestEmissionShortcutsMatchTheDivision checks quo and emissionIs, the
// decision path's ways around a 64-bit division, against the plain
// division: every window at the bounds, with the right interval, its
// neighbours and intervals no window of that rate has.
func TestEmissionShortcutsMatchTheDivision(t *testing.T) {
	periods := []time.Duration{MinPeriod, time.Second, 71 * time.Minute, 72 * time.Minute, time.Hour, MaxLeaseTTL, MaxPeriod}
	limits := []int64{1, 2, 3, 7, 10, 999, 1000, 1001, 100_000, 1_000_000, 1 << 29, MaxLimit}
	for _, p := range periods {
		for _, l := range limits {
			w := Window{Limit: l, Period: p, Algorithm: GCRA}
			want := max(w.PeriodMicros()/l, 1)
			if got := w.EmissionMicros(); got != want {
				t.Fatalf("%v/%d: EmissionMicros = %d, want %d", p, l, got, want)
			}
			for _, c := range []int64{0, -1, 1, 2, want - 1, want, want + 1, 2 * want, MaxPeriodMicros, 1 << 62} {
				if got := w.emissionIs(c); got != want {
					t.Fatalf("%v/%d: emissionIs(%d) = %d, want %d", p, l, c, got, want)
				}
			}
		}
	}
	for _, tc := range [][2]int64{{0, 1}, {7, 2}, {-7, 2}, {7, -2}, {1 << 32, 3}, {(1 << 32) - 1, 3}, {-(1 << 40), 1000}, {1 << 40, 1 << 33}} {
		if got, want := quo(tc[0], tc[1]), tc[0]/tc[1]; got != want {
			t.Errorf("quo(%d, %d) = %d, want %d", tc[0], tc[1], got, want)
		}
	}
}

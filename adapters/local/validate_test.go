package local

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// TestLimitOKAcceptsOnlyValidLimits checks the decision path's shortcut
// against domain's validation, at every bound: a limit limitOK accepts is
// one validate accepts, for Evaluate and for Peek alike, and the valid
// rate limits of the common case are accepted (so the shortcut is taken).
func TestLimitOKAcceptsOnlyValidLimits(t *testing.T) {
	g, s := gcra(10, time.Second), sliding(10, time.Second)
	with := func(w domain.Window, f func(*domain.Window)) domain.Window { f(&w); return w }
	cases := []struct {
		name string
		l    domain.Limit
		ok   bool
	}{
		{"gcra", lim("k", g, 1), true},
		{"sliding log", lim("k", s, 10), true},
		{"largest key", lim(strings.Repeat("k", domain.MaxKeyLen), g, 1), true},
		{"empty key", lim("", g, 1), false},
		{"key too long", lim(strings.Repeat("k", domain.MaxKeyLen+1), g, 1), false},
		{"cost 0", lim("k", g, 0), false},
		{"cost above the limit", lim("k", g, 11), false},
		{"limit 0", lim("k", with(g, func(w *domain.Window) { w.Limit = 0 }), 1), false},
		{"largest limit", lim("k", with(g, func(w *domain.Window) { w.Limit = domain.MaxLimit }), 1), true},
		{"limit too large", lim("k", with(g, func(w *domain.Window) { w.Limit = domain.MaxLimit + 1 }), 1), false},
		{"largest sliding log", lim("k", with(s, func(w *domain.Window) { w.Limit = domain.MaxSlidingLogLimit }), 1), true},
		{"sliding log too large", lim("k", with(s, func(w *domain.Window) { w.Limit = domain.MaxSlidingLogLimit + 1 }), 1), false},
		{"shortest period", lim("k", with(g, func(w *domain.Window) { w.Period = domain.MinPeriod }), 1), true},
		{"period too short", lim("k", with(g, func(w *domain.Window) { w.Period = domain.MinPeriod - time.Microsecond }), 1), false},
		{"longest period", lim("k", with(g, func(w *domain.Window) { w.Period = domain.MaxPeriod }), 1), true},
		{"period too long", lim("k", with(g, func(w *domain.Window) { w.Period = domain.MaxPeriod + time.Microsecond }), 1), false},
		{"period of nanoseconds", lim("k", with(g, func(w *domain.Window) { w.Period = time.Second + 1 }), 1), false},
		{"concurrency", lim("k", with(g, func(w *domain.Window) { w.Algorithm = domain.Concurrency }), 1), false},
		{"unknown algorithm", lim("k", with(g, func(w *domain.Window) { w.Algorithm = 42 }), 1), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := limitOK(&tc.l)
			if got != tc.ok {
				t.Fatalf("limitOK = %t, want %t", got, tc.ok)
			}
			for _, commit := range []bool{true, false} {
				if err := validate([]domain.Limit{tc.l}, commit); got && err != nil {
					t.Errorf("limitOK accepts a limit validate (commit %t) refuses: %v", commit, err)
				}
			}
		})
	}
}

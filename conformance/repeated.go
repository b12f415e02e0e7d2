package conformance

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// repeatedRequestsAnswerAsSequentialOnes holds a store that implements
// ports.Repeater to its contract: n identical requests at one instant get,
// request by request (domain.Repeated.For), the Results n sequential
// Evaluate calls get, and leave the same state. A store without the
// capability has nothing to prove here.
func repeatedRequestsAnswerAsSequentialOnes(e *env) {
	if _, ok := e.store.(ports.Repeater); !ok {
		e.t.Logf("the store does not implement ports.Repeater: nothing to check")
		return
	}
	m := time.Minute
	rows := []struct {
		name    string
		windows []domain.Window
		costs   []int64
		spent   []int64 // units spent on each key before
		n       int
	}{
		{"SlidingLogAllFit", []domain.Window{window(domain.SlidingLog, 10, 10*m)}, []int64{1}, []int64{0}, 4},
		{"SlidingLogMoreThanFit", []domain.Window{window(domain.SlidingLog, 10, 10*m)}, []int64{3}, []int64{2}, 5},
		{"GCRAMoreThanFit", []domain.Window{window(domain.GCRA, 10, 10*m)}, []int64{2}, []int64{3}, 6},
		{"GCRATruncatedInterval", []domain.Window{window(domain.GCRA, 7, m)}, []int64{2}, []int64{0}, 9},
		{"NoneFit", []domain.Window{window(domain.GCRA, 5, 10*m)}, []int64{2}, []int64{4}, 3},
		{"MixedWindows", []domain.Window{window(domain.SlidingLog, 20, 10*m), window(domain.GCRA, 30, 10*m), window(domain.SlidingLog, 9, 5*m)},
			[]int64{2, 3, 1}, []int64{1, 4, 2}, 12},
		{"AlgorithmChanged", []domain.Window{window(domain.GCRA, 10, 10*m), window(domain.SlidingLog, 10, 10*m)},
			[]int64{1, 2}, []int64{-3, -4}, 8},
	}
	for _, rw := range rows {
		e.t.Run(rw.name, func(t tb) {
			t.Parallel()
			e := e.sub(t, rw.name+":")
			build := func(set string) []domain.Limit {
				limits := make([]domain.Limit, len(rw.windows))
				for i, w := range rw.windows {
					limits[i] = limitOf(e.key(set+strconv.Itoa(i)), w, rw.costs[i])
					// A negative count is spent under the other algorithm.
					spent, sw := rw.spent[i], w
					if spent < 0 {
						spent = -spent
						sw.Algorithm = 1 - w.Algorithm
					}
					if spent > 0 {
						if r := e.evaluate("spending", e.t0, limitOf(limits[i].Key, sw, spent)); !r.Allowed {
							e.t.Fatalf("spending %d units on a fresh key: refused", spent)
						}
					}
				}
				return limits
			}
			repeated, sequential := build("r"), build("s")
			rep, err := e.store.(ports.Repeater).EvaluateRepeated(e.ctx, e.t0, repeated, rw.n)
			if err != nil {
				e.t.Fatalf("EvaluateRepeated(n=%d): unexpected error: %v", rw.n, err)
			}
			if rep.N != rw.n {
				e.t.Errorf("Repeated.N = %d, want %d", rep.N, rw.n)
			}
			admitted := 0
			for i := range rw.n {
				want := e.evaluate("sequential", e.t0, sequential...)
				if want.Allowed {
					admitted++
				}
				got := rep.For(i, repeated)
				e.sameResult("request "+strconv.Itoa(i), got, want)
			}
			if rep.Admitted != admitted {
				e.t.Errorf("Repeated.Admitted = %d, sequential calls admitted %d", rep.Admitted, admitted)
			}
			// Both key sets hold the same units afterwards.
			e.sameResult("peek afterwards", e.peek("peek repeated", e.t0, repeated...), e.peek("peek sequential", e.t0, sequential...))
		})
	}
	e.t.Run("NOutOfRange", func(t tb) {
		t.Parallel()
		e := e.sub(t, "n:")
		l := limitOf(e.key("a"), window(domain.SlidingLog, 3, 10*m), 1)
		for _, n := range []int{0, -1, ports.MaxRepeat + 1} {
			_, err := e.store.(ports.Repeater).EvaluateRepeated(e.ctx, e.t0, []domain.Limit{l}, n)
			if _, ok := isLimitError(err); !ok {
				e.t.Errorf("EvaluateRepeated(n=%d): error %v, want a *domain.LimitError", n, err)
			}
		}
		e.checkStatus("peek after the refused calls", e.peek("peek", e.t0, l).Status(0), status{allowed: true, remaining: 3})
	})
}

// sameResult compares a Result with the one it must equal, limit by limit.
// On a store with its own clock the two were decided at different
// instants, so only the counts are compared.
func (e *env) sameResult(label string, got, want domain.Result) {
	e.t.Helper()
	if e.ownClock {
		if got.Allowed != want.Allowed || got.Limiting != want.Limiting || got.Remaining != want.Remaining {
			e.t.Errorf("%s: allowed %t limiting %d remaining %d, want %t, %d, %d", label, got.Allowed, got.Limiting, got.Remaining, want.Allowed, want.Limiting, want.Remaining)
		}
		for i, w := range want.Statuses() {
			if g := got.Status(i); g.Allowed != w.Allowed || g.Remaining != w.Remaining {
				e.t.Errorf("%s: limit %d: allowed %t remaining %d, want %t, %d", label, i, g.Allowed, g.Remaining, w.Allowed, w.Remaining)
			}
		}
		return
	}
	e.checkResult(label, got, outcome{allowed: want.Allowed, limiting: want.Limiting, remaining: want.Remaining, retryAfter: want.RetryAfter, resetAfter: want.ResetAfter})
	if len(got.Statuses()) != len(want.Statuses()) {
		e.t.Errorf("%s: %d statuses, want %d", label, len(got.Statuses()), len(want.Statuses()))
		return
	}
	for i, w := range want.Statuses() {
		e.checkStatus(label+": limit "+strconv.Itoa(i), got.Status(i), status{allowed: w.Allowed, remaining: w.Remaining, retryAfter: w.RetryAfter, resetAfter: w.ResetAfter})
	}
}

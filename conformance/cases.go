package conformance

import (
	"time"

	"github.com/sluicehq/sluice/domain"
)

// cases lists the properties every store must have, each named for what it
// proves.
func cases() []testCase {
	return []testCase{
		{"SlidingLogAdmitsExactlyLimit", slidingLogAdmitsExactlyLimit},
		{"GCRAAdmitsExactlyLimitAsBurst", gcraAdmitsExactlyLimitAsBurst},
	}
}

func slidingLogAdmitsExactlyLimit(e *env) {
	w := domain.Window{Name: "w", Limit: 5, Period: 10 * time.Second, Algorithm: domain.SlidingLog}
	full := status{allowed: false, remaining: 0, retryAfter: 10 * time.Second, resetAfter: 10 * time.Second}
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, want: status{allowed: true, remaining: 4, resetAfter: 10 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 3, resetAfter: 10 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 10 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 10 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 10 * time.Second}},
		{at: 0, cost: 1, want: full},
		{at: 0, cost: 1, want: full},
	})
}

func gcraAdmitsExactlyLimitAsBurst(e *env) {
	// T = 10s/5 = 2s: the i-th unit of a burst pushes the theoretical
	// arrival time to t0+2i s.
	w := domain.Window{Name: "w", Limit: 5, Period: 10 * time.Second, Algorithm: domain.GCRA}
	full := status{allowed: false, remaining: 0, retryAfter: 2 * time.Second, resetAfter: 10 * time.Second}
	e.replay(e.key("a"), w, []step{
		{at: 0, cost: 1, want: status{allowed: true, remaining: 4, resetAfter: 2 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 3, resetAfter: 4 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 2, resetAfter: 6 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 1, resetAfter: 8 * time.Second}},
		{at: 0, cost: 1, want: status{allowed: true, remaining: 0, resetAfter: 10 * time.Second}},
		{at: 0, cost: 1, want: full},
		{at: 0, cost: 1, want: full},
	})
}

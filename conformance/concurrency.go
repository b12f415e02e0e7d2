package conformance

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Concurrent calls on one store, and two stores of one fleet.

// workers is how many goroutines the concurrency cases release at once.
const workers = 64

// hangTimeout bounds how long the concurrency cases wait for their
// goroutines: far beyond any store's latency, it only turns a deadlock into
// a failure instead of a stuck test binary.
const hangTimeout = 30 * time.Second

// answer is one concurrent call's outcome.
type answer struct {
	r   domain.Result
	err error
}

// releaseTogether runs call in n goroutines released at once by closing a
// channel, and returns their answers; it ends the subtest if they do not
// all return within hangTimeout.
func (e *env) releaseTogether(n int, call func(i int) (domain.Result, error)) []answer {
	e.t.Helper()
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := call(i)
			answers[i] = answer{r, err}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(start)
	select {
	case <-done:
	case <-time.After(hangTimeout):
		e.t.Fatalf("%d concurrent calls did not all return within %v: a deadlock?", n, hangTimeout)
	}
	for i, a := range answers {
		if a.err != nil {
			e.t.Fatalf("concurrent call %d: unexpected error: %v", i, a.err)
		}
	}
	return answers
}

func concurrentRequestsOnOneKeyAdmitExactlyLimit(e *env) {
	e.forEachAlgorithm(func(e *env, a domain.Algorithm) {
		const limit = 50
		l := limitOf(e.key("a"), window(a, limit, 10*time.Minute), 1)
		answers := e.releaseTogether(workers, func(int) (domain.Result, error) {
			return e.store.Evaluate(e.ctx, e.t0, []domain.Limit{l})
		})
		// At one instant each admitted unit leaves one fewer: the admitted
		// calls must have seen every remaining count from 49 down to 0
		// exactly once, as if they had run one after another.
		seen := make(map[int64]int)
		admitted := 0
		for _, a := range answers {
			if a.r.Allowed {
				admitted++
				seen[a.r.Remaining]++
			} else if a.r.Remaining != 0 {
				e.t.Errorf("a refused call reported %d remaining, want 0", a.r.Remaining)
			}
		}
		if admitted != limit {
			e.t.Fatalf("%d goroutines on one key with limit %d: %d admitted, want exactly %d", workers, limit, admitted, limit)
		}
		for rem := range int64(limit) {
			if seen[rem] != 1 {
				e.t.Errorf("remaining %d reported by %d admitted calls, want exactly 1: calls were not serialised", rem, seen[rem])
			}
		}
		r := e.peek("peek after the burst", e.t0, l)
		if r.Allowed || r.Remaining != 0 {
			e.t.Errorf("peek after the burst: allowed %t remaining %d, want refused with 0 remaining", r.Allowed, r.Remaining)
		}
	})
}

func concurrentRequestsAcrossTwoKeysAreAllOrNothing(e *env) {
	// A: SlidingLog 20 per 10min. B: GCRA 40 per 10min. A third of the
	// goroutines ask for B alone; the others for A and B, half of them in
	// the opposite order (a store that locks keys in request order
	// deadlocks here).
	const limitA, limitB = 20, 40
	a := limitOf(e.key("A"), window(domain.SlidingLog, limitA, 10*time.Minute), 1)
	b := limitOf(e.key("B"), window(domain.GCRA, limitB, 10*time.Minute), 1)
	request := func(i int) []domain.Limit {
		switch i % 3 {
		case 0:
			return []domain.Limit{b}
		case 1:
			return []domain.Limit{a, b}
		}
		return []domain.Limit{b, a}
	}
	answers := e.releaseTogether(workers, func(i int) (domain.Result, error) {
		return e.store.Evaluate(e.ctx, e.t0, request(i))
	})
	var both, onlyB int64
	var bothRefused, onlyBRefused bool
	for i, ans := range answers {
		switch {
		case i%3 == 0 && ans.r.Allowed:
			onlyB++
		case i%3 == 0:
			onlyBRefused = true
		case ans.r.Allowed:
			both++
		default:
			bothRefused = true
		}
	}
	if both > limitA || both+onlyB > limitB {
		e.t.Errorf("admitted %d requests on A and B and %d on B alone: A got %d of %d, B %d of %d", both, onlyB, both, limitA, both+onlyB, limitB)
	}
	if onlyBRefused && both+onlyB != limitB {
		e.t.Errorf("a request on B alone was refused while B had admitted only %d of %d", both+onlyB, limitB)
	}
	if bothRefused && both != limitA && both+onlyB != limitB {
		e.t.Errorf("a request on A and B was refused while A had %d of %d and B %d of %d", both, limitA, both+onlyB, limitB)
	}
	// What the stores hold must match what they admitted, unit for unit.
	r := e.peek("peek A and B", e.t0, a, b)
	if got := r.Status(0).Remaining; got != limitA-both {
		e.t.Errorf("A has %d remaining after %d admitted requests, want %d", got, both, limitA-both)
	}
	if got := r.Status(1).Remaining; got != limitB-both-onlyB {
		e.t.Errorf("B has %d remaining after %d admitted requests, want %d", got, both+onlyB, limitB-both-onlyB)
	}
}

func twoStoresShareTheirCounts(e *env) {
	// A second instance on the same state: same keys, another store.
	other := e.sub(e.t, "")
	other.store = e.open()
	m := time.Minute
	sl := limitOf(e.key("sl"), window(domain.SlidingLog, 5, 10*m), 1)
	gc := limitOf(e.key("gc"), window(domain.GCRA, 5, 10*m), 1) // T = 2min
	for i := range 3 {
		if r := e.evaluate("first store", e.t0, sl, gc); !r.Allowed {
			e.t.Fatalf("first store, request %d of 3 on fresh keys: refused", i+1)
		}
	}
	r := other.peek("the other store after 3 units", e.t0, sl, gc)
	other.checkStatus("the other store, sliding log", r.Status(0), status{allowed: true, remaining: 2, resetAfter: 10 * m})
	other.checkStatus("the other store, GCRA", r.Status(1), status{allowed: true, remaining: 2, resetAfter: 6 * m})
	for i := range 2 {
		if r := other.evaluate("the other store", e.t0, sl, gc); !r.Allowed {
			e.t.Fatalf("the other store, request %d of 2 with 2 units left: refused", i+1)
		}
	}
	r = e.evaluate("first store after the other's units", e.t0, sl, gc)
	e.checkResult("first store after the other's units", r, outcome{allowed: false, limiting: 0, remaining: 0, retryAfter: 10 * m, resetAfter: 10 * m})
	e.checkStatus("first store after the other's units, GCRA", r.Status(1), status{remaining: 0, retryAfter: 2 * m, resetAfter: 10 * m})
	other.reset("the other store resets the sliding log", sl.Key)
	// Closing one instance leaves the state, and the other instance, alone.
	if err := other.store.Close(); err != nil {
		e.t.Errorf("closing the other store: %v", err)
	}
	r = e.peek("first store after the other's reset and close", e.t0, sl, gc)
	e.checkStatus("first store after the other's reset, sliding log", r.Status(0), status{allowed: true, remaining: 5})
	e.checkStatus("first store after the other's close, GCRA", r.Status(1), status{remaining: 0, retryAfter: 2 * m, resetAfter: 10 * m})
}

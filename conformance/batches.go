package conformance

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Batches (docs/adr/018): a store that implements ports.Batcher decides
// the requests of a batch, in order, exactly as the same requests sent one
// by one; each request's fault is its own. A store without the capability
// has nothing to prove here.

// batchCases are the cases of ports.Batcher.
func batchCases() []testCase {
	return []testCase{
		{name: batchDifferentialName, run: batchAnswersAsSequentialCalls},
		{name: "BatchBeyondMaxBatchDecidesNothing", run: batchBeyondMaxBatchDecidesNothing},
	}
}

const batchDifferentialName = "BatchAnswersAsSequentialCalls"

// batchRequests builds r requests on the keys of key(): sliding logs and
// GCRA, two windows sharing a log, costs of 1 to 3, a large log that
// takes 600 units a request, and now and then a request that does not
// validate (cost 0). Requests share keys, so their order matters.
func batchRequests(rng *rand.Rand, r int, key func(string) string) [][]domain.Limit {
	m := time.Minute
	reqs := make([][]domain.Limit, r)
	for i := range reqs {
		p, c := fmt.Sprint("p", rng.IntN(3)), int64(1+rng.IntN(3))
		log := limitOf(key(p+":log"), window(domain.SlidingLog, 9, 10*m), c)
		gcra := limitOf(key(p+":gcra"), window(domain.GCRA, 11, 10*m), c)
		switch rng.IntN(7) {
		case 0:
			reqs[i] = []domain.Limit{log}
		case 1:
			reqs[i] = []domain.Limit{gcra}
		case 2:
			reqs[i] = []domain.Limit{log, gcra}
		case 3:
			reqs[i] = append(burstAndSustained(key(p+":shared"), sharedBurst(5*m), sharedSustained(10*m)), gcra)
		case 4:
			reqs[i] = []domain.Limit{limitOf(key(p+":large"), window(domain.SlidingLog, 3000, 10*m), 600)}
		case 5:
			bad := gcra
			bad.Cost = 0
			reqs[i] = []domain.Limit{log, bad}
		default:
			// Another principal's log beside this one's: all or nothing
			// across both.
			reqs[i] = []domain.Limit{log, limitOf(key(fmt.Sprint("p", rng.IntN(3), ":log")), window(domain.SlidingLog, 9, 10*m), 1)}
		}
	}
	return reqs
}

// batchAnswersAsSequentialCalls: seeded batches of 2 to 60 requests, on
// twin keys, once as one EvaluateBatch and once as as many Evaluate
// calls: every Result, every error's kind and index, and what a Peek of
// every request's limits finds afterwards agree. On a store that also
// reserves, a reservation holds units of both twins' keys before the
// batch and is settled after it.
func batchAnswersAsSequentialCalls(e *env) {
	b := e.batcher()
	if b == nil {
		return
	}
	for seed := range uint64(8) {
		r := 2 + int(seed*17)%59
		e.t.Run(fmt.Sprintf("Seed%d", seed), func(t tb) {
			t.Parallel()
			e := e.sub(t, fmt.Sprint("s", seed, ":"))
			twin := func(set string) [][]domain.Limit {
				return batchRequests(rand.New(rand.NewPCG(seed, 18)), r, func(k string) string { return e.key(set + k) })
			}
			one, batch := twin("1:"), twin("b:")
			rv, reserves := e.store.(ports.Reserver)
			var leases [2]domain.Lease
			if reserves {
				for i, set := range [][]domain.Limit{one[0], batch[0]} {
					_, lease, err := rv.Reserve(e.ctx, e.t0, set, time.Minute)
					if err != nil && !isInvalid(err) {
						e.t.Fatalf("Reserve before the batch: %v", err)
					}
					leases[i] = lease
				}
			}
			res, errs := b.EvaluateBatch(e.ctx, e.t0, batch)
			if len(res) != r || len(errs) != r {
				e.t.Fatalf("EvaluateBatch of %d requests: %d results, %d errors", r, len(res), len(errs))
			}
			for i, limits := range one {
				want, werr := e.store.Evaluate(e.ctx, e.t0, limits)
				label := fmt.Sprintf("request %d", i)
				wle, wbad := isLimitError(werr)
				gle, gbad := isLimitError(errs[i])
				switch {
				case (werr == nil) != (errs[i] == nil) || wbad != gbad:
					e.t.Errorf("%s: batch error %v, one by one %v", label, errs[i], werr)
				case wbad && wle.Index != gle.Index:
					e.t.Errorf("%s: batch error on limit %d, one by one on limit %d", label, gle.Index, wle.Index)
				case werr == nil:
					e.sameResult(label, res[i], want)
				}
			}
			if reserves && leases[0].ID != "" {
				for i, set := range [][]domain.Limit{one[0], batch[0]} {
					if _, err := rv.Settle(e.ctx, e.t0, leases[i], set, 1); err != nil {
						e.t.Fatalf("Settle after the batch: %v", err)
					}
				}
			}
			for i := range one {
				if domain.ValidateLimits(one[i]) != nil {
					continue
				}
				e.sameResult(fmt.Sprintf("peek afterwards, request %d's limits", i),
					e.peek("peek batched", e.t0, batch[i]...), e.peek("peek one by one", e.t0, one[i]...))
			}
		})
	}
}

// batcher returns the store as a ports.Batcher, or nil (logged: a store
// without the capability has nothing to prove here).
func (e *env) batcher() ports.Batcher {
	b, ok := e.store.(ports.Batcher)
	if !ok {
		e.t.Logf("the store does not implement ports.Batcher: nothing to check")
	}
	return b
}

// isInvalid reports whether err is a request's own fault.
func isInvalid(err error) bool {
	_, ok := isLimitError(err)
	return ok
}

// batchBeyondMaxBatchDecidesNothing: a batch of ports.MaxBatch + 1
// requests is a *domain.LimitError for each, and consumes nothing; an
// empty batch answers nothing.
func batchBeyondMaxBatchDecidesNothing(e *env) {
	b := e.batcher()
	if b == nil {
		return
	}
	l := limitOf(e.key("a"), window(domain.SlidingLog, 3, 10*time.Minute), 1)
	reqs := make([][]domain.Limit, ports.MaxBatch+1)
	for i := range reqs {
		reqs[i] = []domain.Limit{l}
	}
	_, errs := b.EvaluateBatch(e.ctx, e.t0, reqs)
	if len(errs) != len(reqs) {
		e.t.Fatalf("EvaluateBatch of %d requests: %d errors", len(reqs), len(errs))
	}
	for i, err := range errs {
		if !isInvalid(err) {
			e.t.Fatalf("request %d of %d: error %v, want a *domain.LimitError", i, len(reqs), err)
		}
	}
	e.checkStatus("peek after the refused batch", e.peek("peek", e.t0, l).Status(0), status{allowed: true, remaining: 3})
	res, errs := b.EvaluateBatch(e.ctx, e.t0, nil)
	if len(res) != 0 || len(errs) != 0 {
		e.t.Errorf("an empty batch answered %d results, %d errors", len(res), len(errs))
	}
}

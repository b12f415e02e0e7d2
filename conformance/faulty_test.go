package conformance

import (
	"context"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The suite's own tests, in the spirit of testing/fstest's: the suite is
// only worth something if it fails broken stores. faultyStore is a second,
// independent implementation of the store contract (one timestamp per unit
// for sliding logs, its own GCRA arithmetic) into which one fault at a time
// is injected, and Check reports which named cases of the suite fail.

// fault is one way to get a store wrong.
type fault int

const (
	noFault fault = iota
	// consumeOnDeny records a refused request's cost anyway (ZADD before
	// ZCARD).
	consumeOnDeny
	// offByOne compares with <= limit+1: it admits one unit too many.
	offByOne
	// ignoreCost counts every request as one unit.
	ignoreCost
	// notAtomic commits each key as soon as its own check passes, so keys
	// before a refusing one are consumed.
	notAtomic
	// wrongRetryAfter waits for the newest unit to leave a sliding log
	// instead of the oldest ones that make room.
	wrongRetryAfter
	// peekConsumes commits on Peek as on Evaluate.
	peekConsumes
	// firstRefusalLimits reports the first refusing limit instead of the
	// one with the longest retry-after.
	firstRefusalLimits
	// fixedWindow counts sliding logs in windows aligned on the period.
	fixedWindow
	// roundedEmission rounds GCRA's Period/Limit instead of truncating it.
	roundedEmission
	// forgetsOnBackwardsClock drops a key's state when now goes backwards.
	forgetsOnBackwardsClock
	// ignoresFutureUnits counts only the units in (now-period, now], so a
	// clock that went back finds the log empty.
	ignoresFutureUnits
	// checkThenAct checks and commits under two separate lock holds.
	checkThenAct
	// ignoresContext never looks at ctx.
	ignoresContext
	// lenientValidation checks windows and that the limits fit in a
	// Result, but not keys, costs or an empty request.
	lenientValidation
	// resetForgetsEverything clears every key on Reset.
	resetForgetsEverything
	// resetByPrefix clears every key that starts with the one given, like
	// a careless SCAN MATCH key*.
	resetByPrefix
	// forgetReportsTried reports from Forget that every key it was given
	// existed, as a reset that counts the keys it tried.
	forgetReportsTried
	// openAfterClose keeps working after Close.
	openAfterClose
	// staleRemaining reports, on an allowed Evaluate, the remaining count
	// from before consumption.
	staleRemaining
	// forgetsOtherAlgorithm reads a key written under the other algorithm
	// as fresh, and drops its state when it commits (issue 20).
	forgetsOtherAlgorithm
	// gcraWithoutInterval reads a GCRA TAT with the reading window's
	// emission interval, whatever it was written with (issue 15).
	gcraWithoutInterval
	// trimsWithoutGrace forgets a sliding log's units once they left the
	// window at the latest instant the key has seen (issue 21).
	trimsWithoutGrace
	// repeatedOverAdmits admits, in EvaluateRepeated, one request more
	// than fits.
	repeatedOverAdmits
	// recordsPerWindow records a request's units in a shared log once per
	// window naming it, as a store that knows nothing of shared logs
	// (docs/adr/015).
	recordsPerWindow
	// trimsByShortest forgets a shared log's units by the shortest period
	// among its windows (plus that period as grace), not the longest.
	trimsByShortest
	// batchReversed decides the requests of a batch last first.
	batchReversed
	// batchErrorSpreads fails every request of a batch after one that
	// does not validate, with its error.
	batchErrorSpreads
)

var faultNames = map[fault]string{
	noFault:                 "NoFault",
	consumeOnDeny:           "ConsumeOnDeny",
	offByOne:                "OffByOne",
	ignoreCost:              "IgnoreCost",
	notAtomic:               "NotAtomic",
	wrongRetryAfter:         "WrongRetryAfter",
	peekConsumes:            "PeekConsumes",
	firstRefusalLimits:      "FirstRefusalLimits",
	fixedWindow:             "FixedWindow",
	roundedEmission:         "RoundedEmission",
	forgetsOnBackwardsClock: "ForgetsOnBackwardsClock",
	ignoresFutureUnits:      "IgnoresFutureUnits",
	checkThenAct:            "CheckThenAct",
	ignoresContext:          "IgnoresContext",
	lenientValidation:       "LenientValidation",
	resetForgetsEverything:  "ResetForgetsEverything",
	resetByPrefix:           "ResetByPrefix",
	forgetReportsTried:      "ForgetReportsTried",
	openAfterClose:          "OpenAfterClose",
	staleRemaining:          "StaleRemaining",
	forgetsOtherAlgorithm:   "ForgetsOtherAlgorithm",
	gcraWithoutInterval:     "GCRAWithoutInterval",
	trimsWithoutGrace:       "TrimsWithoutGrace",
	repeatedOverAdmits:      "RepeatedOverAdmits",
	recordsPerWindow:        "RecordsPerWindow",
	trimsByShortest:         "TrimsByShortest",
	batchReversed:           "BatchReversed",
	batchErrorSpreads:       "BatchErrorSpreads",
}

func (f fault) String() string { return faultNames[f] }

type faultyStore struct {
	fault fault
	// ownClock makes the store ignore the now it is given and read this
	// machine's clock under its lock, as a Redis script reads TIME.
	ownClock bool
	inFlight atomic.Int32

	mu     sync.Mutex
	closed bool
	logs   map[string][]int64 // sliding log: one timestamp per unit, ascending
	tats   map[string]int64   // GCRA: theoretical arrival time
	ivals  map[string]int64   // GCRA: the emission interval the TAT was written with
	seen   map[string]int64   // latest instant per key
}

func newFaultyStore(f fault) *faultyStore {
	return &faultyStore{fault: f, logs: map[string][]int64{}, tats: map[string]int64{}, ivals: map[string]int64{}, seen: map[string]int64{}}
}

var (
	_ ports.Store     = (*faultyStore)(nil)
	_ ports.Repeater  = (*faultyStore)(nil)
	_ ports.Batcher   = (*faultyStore)(nil)
	_ ports.Forgetter = (*faultyStore)(nil)
)

// EvaluateBatch decides the requests one after another, the obvious way,
// but for the batch faults.
func (s *faultyStore) EvaluateBatch(ctx context.Context, now time.Time, reqs [][]domain.Limit) ([]domain.Result, []error) {
	switch s.fault {
	case batchReversed:
		res, errs := make([]domain.Result, len(reqs)), make([]error, len(reqs))
		if len(reqs) > ports.MaxBatch {
			return ports.EvaluateEach(ctx, s, now, reqs)
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			res[i], errs[i] = s.Evaluate(ctx, now, reqs[i])
		}
		return res, errs
	case batchErrorSpreads:
		res, errs := ports.EvaluateEach(ctx, s, now, reqs)
		for i := 1; i < len(errs); i++ {
			if errs[i-1] != nil {
				res[i], errs[i] = domain.Result{}, errs[i-1]
			}
		}
		return res, errs
	}
	return ports.EvaluateEach(ctx, s, now, reqs)
}

// EvaluateRepeated decides the n requests one after another, the obvious
// way; with repeatedOverAdmits the first refused one is committed anyway.
func (s *faultyStore) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	if n < 1 || n > ports.MaxRepeat {
		return domain.Repeated{}, &domain.LimitError{Index: -1, Field: "n", Reason: "out of range"}
	}
	rep := domain.Repeated{N: n}
	for i := range n {
		r, err := s.decide(ctx, now, limits, true)
		if err != nil {
			return domain.Repeated{}, err
		}
		if !r.Allowed && s.fault == repeatedOverAdmits && i == rep.Admitted {
			s.mu.Lock()
			at := now.UnixMicro()
			st := make([]domain.LimitStatus, len(limits))
			for j, l := range limits {
				st[j] = s.commit(at, l)
			}
			s.mu.Unlock()
			r = domain.NewResult(st)
		}
		if !r.Allowed {
			rep.Refused = r
			break
		}
		rep.Admitted, rep.Last = rep.Admitted+1, r
	}
	return rep, nil
}

// isGCRA reports whether key's state was last written as GCRA.
func (s *faultyStore) isGCRA(key string) bool {
	_, ok := s.ivals[key]
	return ok
}

// tatAt returns the TAT key reads as under a GCRA window of emission
// interval t at `at`: a sliding log's units after at−p (rule S2), or its
// own TAT converted from the interval it was written with (S1).
func (s *faultyStore) tatAt(at int64, l domain.Limit, t int64) int64 {
	k, p := l.Key, l.Window.Period.Microseconds()
	if !s.isGCRA(k) {
		if s.fault == forgetsOtherAlgorithm {
			return at
		}
		n := int64(0)
		for _, ts := range s.logs[k] {
			if ts > at-p {
				n++
			}
		}
		return at + n*t
	}
	tat, ival := s.tats[k], s.ivals[k]
	if tat <= at || ival == t || s.fault == gcraWithoutInterval {
		return tat
	}
	u := (tat - at + ival - 1) / ival
	return at + min(u*t, domain.MaxPeriod.Microseconds())
}

// outstanding returns the units a GCRA key holds at `at` for a sliding
// log (rule S3).
func (s *faultyStore) outstanding(at int64, key string) int64 {
	tat, ival := s.tats[key], s.ivals[key]
	if tat <= at || s.fault == forgetsOtherAlgorithm {
		return 0
	}
	return (tat - at + ival - 1) / ival
}

func (s *faultyStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.decide(ctx, now, limits, true)
}

func (s *faultyStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.decide(ctx, now, limits, s.fault == peekConsumes)
}

func (s *faultyStore) validate(limits []domain.Limit) error {
	if s.fault != lenientValidation {
		return domain.ValidateLimits(limits)
	}
	if len(limits) > domain.MaxLimits {
		return &domain.LimitError{Index: -1, Field: "limits", Reason: "too many"}
	}
	for _, l := range limits {
		if err := l.Window.Validate(); err != nil {
			return err
		}
	}
	return nil
}

func (s *faultyStore) decide(ctx context.Context, now time.Time, limits []domain.Limit, consume bool) (domain.Result, error) {
	if err := ctx.Err(); err != nil && s.fault != ignoresContext {
		return domain.Result{}, err
	}
	if err := s.validate(limits); err != nil {
		return domain.Result{}, err
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.mu.Lock()
	if s.closed && s.fault != openAfterClose {
		s.mu.Unlock()
		return domain.Result{}, domain.ErrStoreClosed
	}
	if s.ownClock {
		now = time.Now()
	}
	at := now.UnixMicro()
	st := make([]domain.LimitStatus, len(limits))
	for i, l := range limits {
		if s.fault == forgetsOnBackwardsClock && at < s.seen[l.Key] {
			delete(s.logs, l.Key)
			delete(s.tats, l.Key)
			delete(s.ivals, l.Key)
		}
		s.seen[l.Key] = max(s.seen[l.Key], at)
		if s.fault == trimsWithoutGrace {
			p := l.Window.Period.Microseconds()
			s.logs[l.Key] = slices.DeleteFunc(s.logs[l.Key], func(ts int64) bool { return ts <= s.seen[l.Key]-p })
		}
		st[i] = s.check(at, l)
		if s.fault == notAtomic && consume && st[i].Allowed {
			st[i] = s.commit(at, l)
		}
	}
	r := s.finish(st)
	if s.fault == checkThenAct {
		// Another call may check the same state before this one commits.
		s.mu.Unlock()
		if s.inFlight.Load() > 1 {
			time.Sleep(10 * time.Millisecond)
		}
		runtime.Gosched()
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if !consume || s.fault == notAtomic {
		return r, nil
	}
	switch {
	case r.Allowed:
		for i, l := range limits {
			var committed domain.LimitStatus
			if _, shared := domain.SharesLog(limits, i); shared && s.fault != recordsPerWindow {
				// The first limit naming the key recorded the units
				// (docs/adr/015): this window reads its status.
				committed = s.check(at, domain.Limit{Key: l.Key, Window: l.Window, Cost: 1})
				committed.Allowed, committed.RetryAfter = true, 0
			} else {
				committed = s.commit(at, l)
			}
			if s.fault == trimsByShortest {
				s.trimShortest(at, limits, i)
			}
			if s.fault != staleRemaining {
				st[i] = committed
			}
		}
		r = s.finish(st)
	case s.fault == consumeOnDeny:
		for _, l := range limits {
			s.commit(at, l)
		}
	}
	return r, nil
}

// trimShortest forgets the units of limits[i]'s key that left the
// shortest of its windows' periods, plus that period, before at: the
// trimsByShortest fault.
func (s *faultyStore) trimShortest(at int64, limits []domain.Limit, i int) {
	p := limits[i].Window.Period.Microseconds()
	for _, l := range limits {
		if l.Key == limits[i].Key {
			p = min(p, l.Window.Period.Microseconds())
		}
	}
	s.logs[limits[i].Key] = slices.DeleteFunc(s.logs[limits[i].Key], func(ts int64) bool { return ts <= at-2*p })
}

func (s *faultyStore) finish(st []domain.LimitStatus) domain.Result {
	r := domain.NewResult(st)
	if s.fault != firstRefusalLimits || r.Allowed {
		return r
	}
	for i, st := range r.Statuses() {
		if !st.Allowed {
			r.Limiting, r.RetryAfter, r.ResetAfter = i, st.RetryAfter, st.ResetAfter
			return r
		}
	}
	return r
}

func (s *faultyStore) cost(l domain.Limit) int64 {
	if s.fault == ignoreCost {
		return 1
	}
	return l.Cost
}

// emission is GCRA's T in microseconds.
func (s *faultyStore) emission(w domain.Window) int64 {
	p := w.Period.Microseconds()
	t := p / w.Limit
	if s.fault == roundedEmission {
		t = (p + w.Limit/2) / w.Limit
	}
	return max(t, 1)
}

// counted returns the timestamps of the units that count at `at`, in
// ascending order, and the instant the window ends for fixedWindow.
func (s *faultyStore) counted(at int64, l domain.Limit) []int64 {
	p := l.Window.Period.Microseconds()
	// Sized once: the large shared-log timelines call this for thousands
	// of units per window, which grew the slice again and again.
	in := make([]int64, 0, len(s.logs[l.Key]))
	if s.isGCRA(l.Key) {
		for range s.outstanding(at, l.Key) {
			in = append(in, at)
		}
		return in
	}
	for _, ts := range s.logs[l.Key] {
		switch {
		case s.fault == fixedWindow:
			start := at - at%p
			if ts >= start && ts < start+p {
				in = append(in, ts)
			}
		case s.fault == ignoresFutureUnits:
			if ts > at-p && ts <= at {
				in = append(in, ts)
			}
		case ts > at-p:
			in = append(in, ts)
		}
	}
	return in
}

func (s *faultyStore) check(at int64, l domain.Limit) domain.LimitStatus {
	w, cost := l.Window, s.cost(l)
	slack := int64(0)
	if s.fault == offByOne {
		slack = 1
	}
	if w.Algorithm == domain.GCRA {
		t := s.emission(w)
		capacity := t * w.Limit
		base := max(s.tatAt(at, l, t), at)
		next := base + cost*t
		st := domain.LimitStatus{
			Allowed:    next-at <= capacity+slack*t,
			Remaining:  max((capacity-(base-at))/t, 0),
			ResetAfter: domain.Micros(base - at),
		}
		if !st.Allowed {
			st.RetryAfter = domain.Micros(next - capacity - at)
		}
		return st
	}
	p := w.Period.Microseconds()
	in := s.counted(at, l)
	used := int64(len(in))
	st := domain.LimitStatus{
		Allowed:   used+cost <= w.Limit+slack,
		Remaining: max(w.Limit-used, 0),
	}
	if len(in) > 0 {
		st.ResetAfter = domain.Micros(in[len(in)-1] + p - at)
	}
	if !st.Allowed {
		// The request passes once the oldest used+cost-limit units leave.
		oldest := at
		if i := used + cost - w.Limit - 1; i >= 0 && i < used {
			oldest = in[i]
		}
		switch s.fault {
		case wrongRetryAfter:
			oldest = in[len(in)-1]
		case fixedWindow:
			oldest = at - at%p
		}
		st.RetryAfter = domain.Micros(oldest + p - at)
	}
	if s.fault == fixedWindow && len(in) > 0 {
		st.ResetAfter = domain.Micros(at - at%p + p - at)
	}
	return st
}

// commit records the cost of l at `at` and returns the status after it.
func (s *faultyStore) commit(at int64, l domain.Limit) domain.LimitStatus {
	cost := s.cost(l)
	if l.Window.Algorithm == domain.GCRA {
		t := s.emission(l.Window)
		s.tats[l.Key] = max(s.tatAt(at, l, t), at) + cost*t
		s.ivals[l.Key] = t
		delete(s.logs, l.Key)
	} else {
		if s.isGCRA(l.Key) {
			var log []int64
			for range s.outstanding(at, l.Key) {
				log = append(log, at)
			}
			s.logs[l.Key] = log
			delete(s.tats, l.Key)
			delete(s.ivals, l.Key)
		}
		log := s.logs[l.Key]
		for range cost {
			log = append(log, at)
		}
		sort.Slice(log, func(i, j int) bool { return log[i] < log[j] })
		s.logs[l.Key] = log
	}
	st := s.check(at, domain.Limit{Key: l.Key, Window: l.Window, Cost: 1})
	st.Allowed, st.RetryAfter = true, 0
	return st
}

func (s *faultyStore) Reset(ctx context.Context, key string) error {
	_, err := s.Forget(ctx, key)
	return err
}

func (s *faultyStore) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil && s.fault != ignoresContext {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && s.fault != openAfterClose {
		return false, domain.ErrStoreClosed
	}
	_, gcra := s.tats[key]
	existed := len(s.logs[key]) > 0 || gcra || s.fault == forgetReportsTried
	for k := range s.seen {
		if k == key || s.fault == resetForgetsEverything || s.fault == resetByPrefix && strings.HasPrefix(k, key) {
			delete(s.logs, k)
			delete(s.tats, k)
			delete(s.ivals, k)
		}
	}
	return existed, nil
}

func (s *faultyStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// checkFaulty runs the suite, as Check, on faulty stores with fault f and
// returns the failures and how many stores the suite opened.
func checkFaulty(features Features, f fault) (Failures, int64) {
	var opened atomic.Int64
	failed := Check(features, func(t testing.TB) ports.Store {
		opened.Add(1)
		s := newFaultyStore(f)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
	return failed, opened.Load()
}

func TestSuiteHasNamedSubtests(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range cases() {
		if seen[c.name] {
			t.Errorf("two subtests are named %s", c.name)
		}
		seen[c.name] = true
	}
	if len(seen) < 25 {
		t.Errorf("the suite has %d subtests, want at least 25", len(seen))
	}
}

func TestCorrectStoresPassEverySubtest(t *testing.T) {
	// Shared is not declared: every case but the Shared ones runs, each
	// on a store of its own.
	want := int64(len(cases()))
	for _, c := range cases() {
		if c.shared {
			want--
		}
	}
	t.Run("ReferenceStore", func(t *testing.T) {
		t.Parallel()
		var opened atomic.Int64
		failed := Check(Features{}, func(t testing.TB) ports.Store {
			opened.Add(1)
			s := NewReferenceStore()
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
		if len(failed) > 0 || opened.Load() != want {
			t.Errorf("%d cases opened a store, want %d; failures:\n%s", opened.Load(), want, failed)
		}
	})
	t.Run("FaultyStoreClean", func(t *testing.T) {
		t.Parallel()
		failed, opened := checkFaulty(Features{}, noFault)
		if len(failed) > 0 || opened != want {
			t.Errorf("%d cases opened a store, want %d; failures:\n%s", opened, want, failed)
		}
	})
}

// TestSuiteFailsFaultyStores is the point of the suite's own tests: each
// fault must make the named subtests fail (others may fail too).
func TestSuiteFailsFaultyStores(t *testing.T) {
	mustFail := map[fault][]string{
		consumeOnDeny:           {"GCRAAdmitsExactlyLimitAsBurst", "SlidingLogUnitsLeaveExactlyOnePeriodLater", "AllOrNothingAcrossNineKeys"},
		offByOne:                {"SlidingLogAdmitsExactlyLimit", "GCRAAdmitsExactlyLimitAsBurst", "ConcurrentRequestsOnOneKeyAdmitExactlyLimit"},
		ignoreCost:              {"CostConsumesThatManyUnits", "CostThatDoesNotFitIsRefusedWhileSmallerCostPasses"},
		notAtomic:               {"AllOrNothingAcrossNineKeys", "RefusalReportsLongestRetryAfter", "SlidingLogAndGCRAInOneRequest"},
		wrongRetryAfter:         {"SlidingLogRetryAfterWaitsForEnoughOldestUnits", "SlidingLogUnitsLeaveExactlyOnePeriodLater"},
		peekConsumes:            {"PeekConsumesNothing", "PeekAgreesWithEvaluate"},
		firstRefusalLimits:      {"RefusalReportsLongestRetryAfter"},
		fixedWindow:             {"SlidingLogUnitsLeaveExactlyOnePeriodLater", "SlidingLogRetryAfterWaitsForEnoughOldestUnits"},
		roundedEmission:         {"GCRARetryAfterUsesTruncatedEmissionInterval", "GCRABurstCapacityUsesTruncatedEmissionInterval"},
		forgetsOnBackwardsClock: {"ClockBackwardsNeverAdmitsMoreThanLimit", "ClockJitterNeverAdmitsMoreThanLimit"},
		ignoresFutureUnits:      {"ClockBackwardsNeverAdmitsMoreThanLimit", "ClockJitterNeverAdmitsMoreThanLimit"},
		checkThenAct:            {"ConcurrentRequestsOnOneKeyAdmitExactlyLimit"},
		ignoresContext:          {"CancelledContextIsAnErrorAndConsumesNothing", "ExpiredDeadlineIsAnError"},
		lenientValidation:       {"InvalidRequestIsRejectedAndConsumesNothing"},
		resetForgetsEverything:  {"ResetForgetsOnlyThatKey"},
		resetByPrefix:           {"ResetForgetsOnlyThatKey"},
		forgetReportsTried:      {"ForgetReportsWhatTheKeyHeld"},
		openAfterClose:          {"ClosedStoreReturnsErrStoreClosed"},
		staleRemaining:          {"SlidingLogAdmitsExactlyLimit", "GCRAAdmitsExactlyLimitAsBurst", "ConcurrentRequestsOnOneKeyAdmitExactlyLimit"},
		forgetsOtherAlgorithm:   {"AlgorithmChangeKeepsConsumedUnits", "WindowChangeAtOneInstantAdmitsExactlyWhatIsLeft", "AlgorithmChangeMidWindowKeepsOutstandingUnits"},
		gcraWithoutInterval:     {"GCRALimitChangeKeepsConsumedUnits", "WindowChangeAtOneInstantAdmitsExactlyWhatIsLeft", "LimitChangeMidWindowKeepsOutstandingUnits"},
		trimsWithoutGrace:       {"OutOfOrderInstantsWithinGraceNeverOverAdmit"},
		repeatedOverAdmits:      {"RepeatedRequestsAnswerAsSequentialOnes"},
		recordsPerWindow:        {"SharedLogRecordsEachRequestOnce", "SharedLogKeepsUnitsForTheLongestPeriod", "SharedLogResetForgetsEveryWindow", sharedLogDifferentialName},
		trimsByShortest:         {"SharedLogKeepsUnitsForTheLongestPeriod", sharedLogDifferentialName},
		batchReversed:           {batchDifferentialName},
		batchErrorSpreads:       {batchDifferentialName},
	}
	for f := noFault + 1; int(f) < len(faultNames); f++ {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			want, ok := mustFail[f]
			if !ok {
				t.Fatalf("fault %s has no expected failures", f)
			}
			// The faulty store never forgets a unit unless told to: it
			// declares the reference store's grace.
			failed, _ := checkFaulty(Features{Grace: ReferenceGrace, compactOnly: !slices.Contains(want, sharedLogDifferentialName)}, f)
			got := failed.Cases()
			t.Logf("failed: %s", strings.Join(got, ", "))
			for _, name := range want {
				if !slices.Contains(got, name) {
					t.Errorf("subtest %s passed on a store with fault %s, want it to fail", name, f)
				}
			}
		})
	}
}

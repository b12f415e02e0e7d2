package conformance

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// ownClock makes a store read this machine's clock and ignore the now it
// is given, as the Redis store does on server time. Like the Redis script,
// it reads the clock as part of the decision, under one lock, so a later
// decision never sees an earlier instant.
type ownClock struct {
	ports.Store
	mu *sync.Mutex
}

func newOwnClock(s ports.Store) ownClock { return ownClock{s, new(sync.Mutex)} }

func (s ownClock) Evaluate(ctx context.Context, _ time.Time, limits []domain.Limit) (domain.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.Evaluate(ctx, time.Now(), limits)
}

func (s ownClock) Peek(ctx context.Context, _ time.Time, limits []domain.Limit) (domain.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.Peek(ctx, time.Now(), limits)
}

func (s ownClock) Forget(ctx context.Context, key string) (bool, error) {
	return s.Store.(ports.Forgetter).Forget(ctx, key)
}

func (s ownClock) Reserve(ctx context.Context, _ time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.(ports.Reserver).Reserve(ctx, time.Now(), limits, ttl)
}

func (s ownClock) Settle(ctx context.Context, _ time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.(ports.Reserver).Settle(ctx, time.Now(), lease, limits, actual)
}

func (s ownClock) Renew(ctx context.Context, _ time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.(ports.Reserver).Renew(ctx, time.Now(), lease, limits, ttl)
}

// instance is one store of a fleet on a shared state, as two Redis stores
// on one server are: Close ends the instance, not the state (unless
// closesState, a bug).
type instance struct {
	state       ports.Store
	closesState bool
	closed      atomic.Bool
}

func (s *instance) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.closed.Load() {
		return domain.Result{}, domain.ErrStoreClosed
	}
	return s.state.Evaluate(ctx, now, limits)
}

func (s *instance) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.closed.Load() {
		return domain.Result{}, domain.ErrStoreClosed
	}
	return s.state.Peek(ctx, now, limits)
}

func (s *instance) Reset(ctx context.Context, key string) error {
	if s.closed.Load() {
		return domain.ErrStoreClosed
	}
	return s.state.Reset(ctx, key)
}

func (s *instance) Forget(ctx context.Context, key string) (bool, error) {
	if s.closed.Load() {
		return false, domain.ErrStoreClosed
	}
	return s.state.(ports.Forgetter).Forget(ctx, key)
}

func (s *instance) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if s.closed.Load() {
		return domain.Result{}, domain.Lease{}, domain.ErrStoreClosed
	}
	return s.state.(ports.Reserver).Reserve(ctx, now, limits, ttl)
}

func (s *instance) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	if s.closed.Load() {
		return 0, domain.ErrStoreClosed
	}
	return s.state.(ports.Reserver).Settle(ctx, now, lease, limits, actual)
}

func (s *instance) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	if s.closed.Load() {
		return domain.Lease{}, domain.ErrStoreClosed
	}
	return s.state.(ports.Reserver).Renew(ctx, now, lease, limits, ttl)
}

func (s *instance) Close() error {
	s.closed.Store(true)
	if s.closesState {
		return s.state.Close()
	}
	return nil
}

// applicable returns the names of the cases that apply to f, sorted.
func applicable(f Features) []string {
	var names []string
	for _, c := range cases() {
		if c.notApplicable(f) == "" {
			names = append(names, c.name)
		}
	}
	slices.Sort(names)
	return names
}

// counting wraps newStore to count the stores the suite opens.
func counting(newStore func(t testing.TB) ports.Store) (func(t testing.TB) ports.Store, *atomic.Int64) {
	var n atomic.Int64
	return func(t testing.TB) ports.Store {
		n.Add(1)
		return newStore(t)
	}, &n
}

// TestServerTimeStoreRunsEveryCaseThatApplies: a store on its own clock
// passes every case that does not script time, each on a store of its own,
// and the scripted ones would fail it, which is why they are left out.
func TestServerTimeStoreRunsEveryCaseThatApplies(t *testing.T) {
	newStore := func(t testing.TB) ports.Store { return newOwnClock(newReference(t)) }
	features := Features{ServerTime: true}
	t.Run("DeclaredServerTime", func(t *testing.T) {
		t.Parallel()
		newStore, opened := counting(newStore)
		failed := Check(features, newStore)
		assert.Empty(t, failed, "failures:\n%s", failed)
		assert.EqualValues(t, len(applicable(features)), opened.Load(), "stores opened")
		assert.GreaterOrEqual(t, len(applicable(features)), 20, "cases that apply to a ServerTime store")
	})
	t.Run("FaultyStoreCleanDeclaredServerTime", func(t *testing.T) {
		t.Parallel()
		failed := Check(features, func(t testing.TB) ports.Store {
			s := newFaultyStore(noFault)
			s.ownClock = true
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
		assert.Empty(t, failed, "failures:\n%s", failed)
	})
	t.Run("NotDeclared", func(t *testing.T) {
		t.Parallel()
		got := Check(Features{}, newStore).Cases()
		for _, name := range []string{
			"SlidingLogUnitsLeaveExactlyOnePeriodLater", "GCRARefillsOneUnitPerEmissionInterval",
			"SlidingLogAndGCRAInOneRequest", "ClockBackwardsNeverAdmitsMoreThanLimit",
		} {
			assert.Contains(t, got, name, "a scripted case passed on a store that ignores the scripted clock")
		}
	})
}

// TestSuiteFailsFaultyStoresOnTheirOwnClock: run as a ServerTime store,
// the suite still catches every fault that shows at one instant.
func TestSuiteFailsFaultyStoresOnTheirOwnClock(t *testing.T) {
	mustFail := map[fault][]string{
		consumeOnDeny:          {"GCRAAdmitsExactlyLimitAsBurst", "AllOrNothingAcrossNineKeys"},
		offByOne:               {"SlidingLogAdmitsExactlyLimit", "GCRAAdmitsExactlyLimitAsBurst", "ConcurrentRequestsOnOneKeyAdmitExactlyLimit"},
		ignoreCost:             {"CostConsumesThatManyUnits", "CostThatDoesNotFitIsRefusedWhileSmallerCostPasses"},
		notAtomic:              {"AllOrNothingAcrossNineKeys", "RefusalReportsLongestRetryAfter"},
		peekConsumes:           {"PeekConsumesNothing"},
		firstRefusalLimits:     {"RefusalReportsLongestRetryAfter"},
		roundedEmission:        {"GCRABurstCapacityUsesTruncatedEmissionInterval"},
		checkThenAct:           {"ConcurrentRequestsOnOneKeyAdmitExactlyLimit"},
		ignoresContext:         {"CancelledContextIsAnErrorAndConsumesNothing", "ExpiredDeadlineIsAnError"},
		lenientValidation:      {"InvalidRequestIsRejectedAndConsumesNothing"},
		resetForgetsEverything: {"ResetForgetsOnlyThatKey"},
		resetByPrefix:          {"ResetForgetsOnlyThatKey"},
		openAfterClose:         {"ClosedStoreReturnsErrStoreClosed"},
		staleRemaining:         {"SlidingLogAdmitsExactlyLimit", "GCRAAdmitsExactlyLimitAsBurst", "ConcurrentRequestsOnOneKeyAdmitExactlyLimit"},
	}
	for f, want := range mustFail {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			failed := Check(Features{ServerTime: true}, func(t testing.TB) ports.Store {
				s := newFaultyStore(f)
				s.ownClock = true
				t.Cleanup(func() { _ = s.Close() })
				return s
			})
			got := failed.Cases()
			t.Logf("failed: %s", strings.Join(got, ", "))
			for _, name := range want {
				assert.Contains(t, got, name, "passed on a ServerTime store with fault %s", f)
			}
		})
	}
}

func TestSharedStoresShareTheirCounts(t *testing.T) {
	fleet := func(closesState bool) func(t testing.TB) ports.Store {
		state := NewReferenceStore()
		t.Cleanup(func() { _ = state.Close() })
		return func(t testing.TB) ports.Store {
			s := &instance{state: state, closesState: closesState}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	t.Run("OneState", func(t *testing.T) {
		t.Parallel()
		newStore, opened := counting(fleet(false))
		failed := Check(Features{Shared: true}, newStore)
		assert.Empty(t, failed, "failures:\n%s", failed)
		// One store per case, and a second one for each Shared case.
		assert.EqualValues(t, len(cases())+2, opened.Load(), "stores opened")
	})
	t.Run("OneStateOnItsOwnClock", func(t *testing.T) {
		t.Parallel()
		newStore := fleet(false)
		failed := Check(Features{Shared: true, ServerTime: true}, func(t testing.TB) ports.Store { return newOwnClock(newStore(t)) })
		assert.Empty(t, failed, "failures:\n%s", failed)
	})
	t.Run("StateOfItsOwn", func(t *testing.T) {
		t.Parallel()
		failed := Check(Features{Shared: true}, newReference)
		require.Equal(t, []string{"TwoStoresShareTheirCounts", "TwoStoresShareTheirLeases"}, failed.Cases(), "failures:\n%s", failed)
	})
	t.Run("CloseEndsTheState", func(t *testing.T) {
		t.Parallel()
		failed := Check(Features{Shared: true}, fleet(true))
		assert.Contains(t, failed.Cases(), "TwoStoresShareTheirCounts", "failures:\n%s", failed)
	})
}

// commitsOnNextCall is a write-behind store: an admitted Evaluate is
// answered from Peek and committed at the start of the next call, from the
// limits slice it kept.
type commitsOnNextCall struct {
	ports.Store
	mu      sync.Mutex
	pending []domain.Limit
	at      time.Time
}

func (s *commitsOnNextCall) flush(ctx context.Context) {
	if s.pending != nil {
		_, _ = s.Store.Evaluate(ctx, s.at, s.pending)
		s.pending = nil
	}
}

func (s *commitsOnNextCall) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flush(ctx)
	r, err := s.Store.Peek(ctx, now, limits)
	if err == nil && r.Allowed {
		s.pending, s.at = limits, now
	}
	return r, err
}

func (s *commitsOnNextCall) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flush(ctx)
	return s.Store.Peek(ctx, now, limits)
}

func TestSuiteFailsAStoreThatKeepsTheLimitsSlice(t *testing.T) {
	failed := Check(Features{}, func(t testing.TB) ports.Store {
		return &commitsOnNextCall{Store: newReference(t)}
	})
	assert.Contains(t, failed.Cases(), "LimitsSliceIsNotKeptAfterTheCall", "failures:\n%s", failed)
}

package conformance

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The allotment cases are only worth something if they fail stores that
// get ReserveAhead wrong: faultyAllotter wraps the reference store and
// gets one thing wrong at a time.

// allotFault is one way to get ports.Allotter wrong.
type allotFault int

const (
	// aheadIgnored reserves at the caller's instant, not ahead of it.
	aheadIgnored allotFault = iota + 1
	// aheadIsAClock takes the units reserved ahead for a sign that the
	// callers of the moment lag: it counts a caller's window as if the
	// caller's instant were the stamp less a grace of 250 ms (what the
	// Redis script did, forgetting from its newest unit, before rule S5 of
	// docs/adr/009 counted from the caller's instant).
	aheadIsAClock
)

var allotFaultNames = map[allotFault]string{
	aheadIgnored:  "AheadIgnored",
	aheadIsAClock: "AheadIsAClock",
}

func (f allotFault) String() string { return allotFaultNames[f] }

type faultyAllotter struct {
	ports.Store
	rs    ports.Allotter
	fault allotFault
	mu    sync.Mutex
	stamp map[string]time.Time // aheadIsAClock: each key's latest stamp ahead
}

func (s *faultyAllotter) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	return s.rs.Reserve(ctx, now, limits, ttl)
}

func (s *faultyAllotter) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	return s.rs.Settle(ctx, now, lease, limits, actual)
}

func (s *faultyAllotter) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	return s.rs.Renew(ctx, now, lease, limits, ttl)
}

func (s *faultyAllotter) ReserveAhead(ctx context.Context, now time.Time, ahead time.Duration, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if s.fault == aheadIgnored {
		r, lease, err := s.rs.Reserve(ctx, now, limits, ttl)
		if r.Allowed {
			lease.At = now.Add(ahead)
		}
		return r, lease, err
	}
	r, lease, err := s.rs.ReserveAhead(ctx, now, ahead, limits, ttl)
	if err == nil && r.Allowed {
		s.mu.Lock()
		for _, l := range limits {
			if s.stamp[l.Key].Before(now.Add(ahead)) {
				s.stamp[l.Key] = now.Add(ahead)
			}
		}
		s.mu.Unlock()
	}
	return r, lease, err
}

// clock is now, or for aheadIsAClock the latest stamp ahead on limits'
// keys less the grace when that is later.
func (s *faultyAllotter) clock(now time.Time, limits []domain.Limit) time.Time {
	if s.fault != aheadIsAClock {
		return now
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range limits {
		if c := s.stamp[l.Key].Add(-250 * time.Millisecond); c.After(now) {
			now = c
		}
	}
	return now
}

func (s *faultyAllotter) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.Store.Evaluate(ctx, s.clock(now, limits), limits)
}

func (s *faultyAllotter) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.Store.Peek(ctx, s.clock(now, limits), limits)
}

// TestSuiteFailsFaultyAllotters: each fault makes the named allotment
// cases fail (others may fail too).
func TestSuiteFailsFaultyAllotters(t *testing.T) {
	mustFail := map[allotFault][]string{
		aheadIgnored:  {"UnitsReservedAheadCountForEveryCaller", "AllotmentsNeverAdmitPastALimit"},
		aheadIsAClock: {"UnitsReservedAheadCountForEveryCaller"},
	}
	var names []string
	for _, c := range allotmentCases() {
		names = append(names, c.name)
	}
	for f := range allotFaultNames {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			failed := Check(Features{Grace: ReferenceGrace}, func(t testing.TB) ports.Store {
				ref := newReference(t)
				return &faultyAllotter{Store: ref, rs: ref.(ports.Allotter), fault: f, stamp: map[string]time.Time{}}
			})
			got := failed.Cases()
			t.Logf("failed: %s", strings.Join(got, ", "))
			for _, name := range mustFail[f] {
				if !slices.Contains(got, name) {
					t.Errorf("subtest %s passed on a store with fault %s, want it to fail", name, f)
				}
			}
			for _, name := range got {
				if !slices.Contains(names, name) {
					t.Errorf("subtest %s, not an allotment case, failed with fault %s", name, f)
				}
			}
		})
	}
}

package conformance

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The reservation cases are only worth something if they fail stores that
// get reservations wrong: faultyReserver wraps the reference store and
// gets one thing wrong at a time.

// reserveFault is one way to get ports.Reserver wrong.
type reserveFault int

const (
	// settleKeepsTheCost settles every rate window at its reserved cost:
	// no refund, no charge.
	settleKeepsTheCost reserveFault = iota + 1
	// settleNotIdempotent answers Settled to a second Settle.
	settleNotIdempotent
	// settleAfterExpiry answers Settled to a lease that expired.
	settleAfterExpiry
	// slotsNeverExpire holds every lease for MaxLeaseTTL, whatever its TTL.
	slotsNeverExpire
	// renewIgnored answers Renew without moving the expiry.
	renewIgnored
	// reserveConsumesOnRefusal consumes the rate windows of a refused
	// reservation (check-then-charge).
	reserveConsumesOnRefusal
	// concurrencyUnbounded never refuses a concurrency window.
	concurrencyUnbounded
	// settlesPerWindow refunds or charges a shared log once per window
	// naming it (docs/adr/015), not once.
	settlesPerWindow
)

var reserveFaultNames = map[reserveFault]string{
	settleKeepsTheCost:       "SettleKeepsTheCost",
	settleNotIdempotent:      "SettleNotIdempotent",
	settleAfterExpiry:        "SettleAfterExpiry",
	slotsNeverExpire:         "SlotsNeverExpire",
	renewIgnored:             "RenewIgnored",
	reserveConsumesOnRefusal: "ReserveConsumesOnRefusal",
	concurrencyUnbounded:     "ConcurrencyUnbounded",
	settlesPerWindow:         "SettlesPerWindow",
}

func (f reserveFault) String() string { return reserveFaultNames[f] }

type faultyReserver struct {
	ports.Store
	rs    ports.Reserver
	fault reserveFault
}

func (s *faultyReserver) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	inner := ttl
	if s.fault == slotsNeverExpire {
		inner = domain.MaxLeaseTTL
	}
	asked := limits
	if s.fault == concurrencyUnbounded {
		asked = slices.Clone(limits)
		for i := range asked {
			if asked[i].Window.Algorithm == domain.Concurrency {
				asked[i].Window.Limit = domain.MaxConcurrencyLimit
			}
		}
	}
	r, lease, err := s.rs.Reserve(ctx, now, asked, inner)
	if err == nil && !r.Allowed && s.fault == reserveConsumesOnRefusal {
		var rate []domain.Limit
		for _, l := range limits {
			if l.Window.Algorithm != domain.Concurrency {
				rate = append(rate, l)
			}
		}
		if len(rate) > 0 {
			_, _ = s.Evaluate(ctx, now, rate)
		}
	}
	if r.Allowed {
		lease.TTL = ttl
	}
	return r, lease, err
}

func (s *faultyReserver) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	if s.fault == settleKeepsTheCost {
		for _, l := range limits {
			if l.Window.Algorithm != domain.Concurrency {
				actual = l.Cost
			}
		}
	}
	got, err := s.rs.Settle(ctx, now, lease, limits, actual)
	if err == nil && got == domain.Settled && s.fault == settlesPerWindow {
		// Settle once more each later window of a shared log, on the
		// reference store's own state.
		ref := s.Store.(*referenceStore)
		ref.mu.Lock()
		at, reserved := now.UnixMicro(), lease.At.UnixMicro()
		for i, l := range limits {
			if _, shared := domain.SharesLog(limits, i); !shared {
				continue
			}
			switch d := l.Cost - actual; {
			case d > 0:
				ref.keys[l.Key].Refund(at, reserved, l.Window, d)
			case d < 0:
				ref.rateKey(l.Key).Charge(at, l.Window, -d, grace)
			}
		}
		ref.mu.Unlock()
	}
	switch {
	case s.fault == settleNotIdempotent && got == domain.AlreadySettled,
		s.fault == settleAfterExpiry && got == domain.Expired:
		got = domain.Settled
	}
	return got, err
}

func (s *faultyReserver) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	if s.fault == renewIgnored {
		if !lease.Valid() {
			return domain.Lease{}, &domain.LimitError{Index: -1, Field: "lease", Reason: "invalid"}
		}
		lease.TTL = ttl
		return lease, nil
	}
	return s.rs.Renew(ctx, now, lease, limits, ttl)
}

// TestSuiteFailsFaultyReservers: each fault makes the named reservation
// cases fail (others may fail too).
func TestSuiteFailsFaultyReservers(t *testing.T) {
	mustFail := map[reserveFault][]string{
		settleKeepsTheCost:       {"SettleRefundsTheDifference", "SettleChargesPastTheLimit", "SettleChargesAreStampedAtTheSettleInstant"},
		settleNotIdempotent:      {"SettleRefundsTheDifference", "ConcurrencyWindowHoldsAtMostLimit"},
		settleAfterExpiry:        {"ExpiredLeaseCountsItsReservedCost", "RenewKeepsTheSlotPastItsExpiry", "CrashedHoldersSlotsComeBackWithinTheTTL"},
		slotsNeverExpire:         {"ConcurrencySlotsComeBackAtLeaseExpiry", "ExpiredLeaseCountsItsReservedCost", "CrashedHoldersSlotsComeBackWithinTheTTL"},
		renewIgnored:             {"RenewKeepsTheSlotPastItsExpiry"},
		reserveConsumesOnRefusal: {"ReservationIsAllOrNothingAcrossRateAndConcurrencyWindows"},
		concurrencyUnbounded:     {"ConcurrencyWindowHoldsAtMostLimit", "CrashedHoldersSlotsComeBackWithinTheTTL"},
		settlesPerWindow:         {sharedLogSettlesOnceName, sharedLogDifferentialName},
	}
	for f := range reserveFaultNames {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			want, ok := mustFail[f]
			if !ok {
				t.Fatalf("fault %s has no expected failures", f)
			}
			failed := Check(Features{Grace: ReferenceGrace}, func(t testing.TB) ports.Store {
				ref := newReference(t)
				return &faultyReserver{Store: ref, rs: ref.(ports.Reserver), fault: f}
			})
			got := failed.Cases()
			t.Logf("failed: %s", strings.Join(got, ", "))
			for _, name := range want {
				if !slices.Contains(got, name) {
					t.Errorf("subtest %s passed on a store with fault %s, want it to fail", name, f)
				}
			}
			for _, name := range got {
				if !slices.Contains(reservationCaseNames(), name) {
					t.Errorf("subtest %s, not a reservation case, failed with fault %s", name, f)
				}
			}
		})
	}
}

// reservationCaseNames lists the names of the reservation cases, and of
// the shared-log cases that reserve and settle.
func reservationCaseNames() []string {
	names := []string{sharedLogSettlesOnceName, sharedLogDifferentialName}
	for _, c := range reservationCases() {
		names = append(names, c.name)
	}
	return names
}

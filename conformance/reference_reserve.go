package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// The reference store's reservations (ports.Reserver, docs/adr/012): a
// lease record per reservation, and per concurrency key the slots each
// unexpired lease holds there. Nothing is swept: a slot or a lease past
// its expiry is simply not counted, which is what a sweep may not change.

// heldSlots is what one lease holds on one concurrency key.
type heldSlots struct {
	units  int64
	expiry int64 // µs: the lease's expiry, moved by Renew
}

// referenceLease is the record of one reservation.
type referenceLease struct {
	expiry  int64 // µs
	settled bool
	// slotKeys are the concurrency keys the lease holds slots on.
	slotKeys []string
}

// slotsCheck is a concurrency window's check at at: the slots held by
// unexpired leases plus l.Cost must stay within the limit. Refused, it
// waits for the earliest held slot's expiry; ResetAfter is the latest.
func (s *referenceStore) slotsCheck(at int64, l domain.Limit) domain.LimitStatus {
	var held int64
	first, last := int64(0), int64(0)
	for _, h := range s.slots[l.Key] {
		if h.expiry <= at {
			continue
		}
		held += h.units
		if first == 0 || h.expiry < first {
			first = h.expiry
		}
		last = max(last, h.expiry)
	}
	st := domain.LimitStatus{Allowed: held+l.Cost <= l.Window.Limit, Remaining: max(l.Window.Limit-held, 0)}
	if held > 0 {
		st.ResetAfter = domain.Micros(last - at)
		if !st.Allowed {
			st.RetryAfter = domain.Micros(first - at)
		}
	}
	return st
}

// Reserve implements ports.Reserver.
// ReserveAhead is Reserve at now + ahead (ports.Allotter).
func (s *referenceStore) ReserveAhead(ctx context.Context, now time.Time, ahead time.Duration, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if ahead < 0 || ahead > domain.MaxAllotmentHold {
		return domain.Result{}, domain.Lease{}, &domain.LimitError{Index: -1, Field: "ahead", Reason: "out of range"}
	}
	return s.Reserve(ctx, now.Add(ahead), limits, ttl)
}

func (s *referenceStore) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	defer s.mu.Unlock()
	if err := domain.ValidateHeld(limits); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	at := now.UnixMicro()
	r := s.checkLocked(at, limits)
	if !r.Allowed {
		return r, domain.Lease{}, nil
	}
	id, err := newLeaseID()
	if err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	rec := &referenceLease{expiry: at + int64(ttl/time.Microsecond)}
	var st [domain.MaxLimits]domain.LimitStatus
	for i, l := range limits {
		if l.Window.Algorithm != domain.Concurrency {
			st[i] = s.commitRate(at, limits, i, l.Cost, r.Status(i))
			continue
		}
		if s.slots[l.Key] == nil {
			s.slots[l.Key] = make(map[string]heldSlots)
		}
		s.slots[l.Key][id] = heldSlots{units: l.Cost, expiry: rec.expiry}
		rec.slotKeys = append(rec.slotKeys, l.Key)
		// The status after taking the slots: as a check of no cost.
		st[i] = s.slotsCheck(at, domain.Limit{Key: l.Key, Window: l.Window})
		st[i].Allowed, st[i].RetryAfter = true, 0
	}
	s.leases[id] = rec
	return domain.NewResult(st[:len(limits)]), domain.Lease{ID: id, At: time.UnixMicro(at), TTL: ttl}, nil
}

// Settle implements ports.Reserver.
func (s *referenceStore) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := validateLeaseCall(lease, limits); err != nil {
		return 0, err
	}
	if err := domain.ValidateActual(actual); err != nil {
		return 0, err
	}
	at := now.UnixMicro()
	rec := s.leases[lease.ID]
	switch {
	case rec == nil || rec.expiry <= at && !rec.settled:
		// Unknown: it expired and was forgotten, or was never made. Either
		// way nothing is held any more.
		return domain.Expired, nil
	case rec.settled:
		return domain.AlreadySettled, nil
	}
	rec.settled = true
	for _, k := range rec.slotKeys {
		delete(s.slots[k], lease.ID)
	}
	reserved := lease.At.UnixMicro()
	for i, l := range limits {
		if _, shared := domain.SharesLog(limits, i); shared {
			// A shared log is refunded or charged once, by the first
			// limit naming it, under the log's window (docs/adr/015).
			continue
		}
		w, _ := logWindow(limits, i)
		switch d := l.Cost - actual; {
		case l.Window.Algorithm == domain.Concurrency:
		case d > 0:
			if k := s.keys[l.Key]; k != nil {
				k.Refund(at, reserved, w, d)
			}
		case d < 0:
			s.rateKey(l.Key).Charge(at, w, -d, grace)
		}
	}
	return domain.Settled, nil
}

// Renew implements ports.Reserver.
func (s *referenceStore) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return domain.Lease{}, err
	}
	defer s.mu.Unlock()
	if err := validateLeaseCall(lease, limits); err != nil {
		return domain.Lease{}, err
	}
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Lease{}, err
	}
	at := now.UnixMicro()
	rec := s.leases[lease.ID]
	if rec == nil || rec.settled || rec.expiry <= at {
		return domain.Lease{}, fmt.Errorf("conformance: reference store: renew lease %s: %w", lease.ID, domain.ErrLeaseEnded)
	}
	rec.expiry = at + int64(ttl/time.Microsecond)
	for _, k := range rec.slotKeys {
		h := s.slots[k][lease.ID]
		h.expiry = rec.expiry
		s.slots[k][lease.ID] = h
	}
	lease.TTL = ttl
	return lease, nil
}

// enter checks ctx and that the store is open, and locks it: the caller
// unlocks when enter returns nil.
func (s *referenceStore) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conformance: reference store: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return domain.ErrStoreClosed
	}
	return nil
}

// validateLeaseCall checks the lease and limits of a Settle or Renew.
func validateLeaseCall(lease domain.Lease, limits []domain.Limit) error {
	if !lease.Valid() {
		return &domain.LimitError{Index: -1, Field: "lease", Reason: "not a lease a store returned"}
	}
	return domain.ValidateHeld(limits)
}

// newLeaseID returns domain.LeaseIDLen random lowercase hex characters.
func newLeaseID() (string, error) {
	var b [domain.LeaseIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("conformance: reference store: lease id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

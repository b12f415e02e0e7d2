package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Reservations and concurrency windows (ports.Reserver, docs/adr/012).
//
// A reservation locks its keys' entries as a decision does (in creation
// order, all or nothing) and keeps its state in them: the slots a lease
// holds on a concurrency key in that key's entry, the lease's record in
// the entry of the request's first key (the key every Settle and Renew of
// the lease names first, since they carry the same limits). Both live
// under the entries' memory accounting and leave with them: an entry is
// idle, and swept, only once every slot and record in it has ended, and
// the records and slots that ended more than IdleGrace ago are dropped
// whenever the entry is reserved, settled, renewed or swept.

var (
	_ ports.Reserver = (*Store)(nil)
	_ ports.Allotter = (*Store)(nil)
)

// held is what one key holds for reservations.
type held struct {
	// slots maps a lease ID to the slots it holds on the key's
	// concurrency window.
	slots map[string]heldSlot
	// leases maps a lease ID to its record, for the leases whose first key
	// this is.
	leases map[string]leaseRecord
	// cover is how many slots and records the entry's size estimate
	// covers: twice their number when they last outgrew it.
	cover int32
}

// heldSlot is what one lease holds on one concurrency key.
type heldSlot struct {
	units  int64
	expiry int64 // µs, moved by Renew
}

// leaseRecord is one lease's record: its expiry, and whether it was
// settled (so that a second Settle changes nothing).
type leaseRecord struct {
	expiry  int64 // µs, moved by Renew
	settled bool
}

// Estimated heap bytes of held: its struct and two small maps, then per
// slot or record a map entry (a 32-byte ID in its own allocation, the
// key's string header, the value and Go maps' growth headroom).
const (
	heldBytes      = 48 + 2*48
	heldEntryBytes = 112
	baseHeldCover  = 4
)

// size returns the bytes h adds to its entry's estimate.
func (h *held) size() int64 {
	return sizeClass(heldBytes) + int64(h.cover)*heldEntryBytes
}

// grown reports whether h holds more slots and records than its entry's
// estimate covers, and if so covers twice as many.
func (h *held) grown() bool {
	n := int32(len(h.slots) + len(h.leases))
	if n <= h.cover {
		return false
	}
	h.cover = max(2*n, baseHeldCover)
	return true
}

// prune forgets the slots and records that ended at or before cut.
func (h *held) prune(cut int64) {
	for id, s := range h.slots {
		if s.expiry <= cut {
			delete(h.slots, id)
		}
	}
	for id, r := range h.leases {
		if r.expiry <= cut {
			delete(h.leases, id)
		}
	}
}

// idle reports whether every slot and record ended at or before now,
// forgetting them.
func (h *held) idle(now int64) bool {
	h.prune(now)
	return len(h.slots) == 0 && len(h.leases) == 0
}

// heldOf returns e's held, made when it has none. Called with e.mu held.
func heldOf(e *entry) *held {
	if e.held == nil {
		e.held = &held{}
	}
	return e.held
}

// slotsCheck is a concurrency window's check at now: the slots held by
// leases unexpired at now, plus l.Cost, must stay within the limit.
// Refused, it waits for the earliest held slot's expiry; ResetAfter is
// the latest one's. Slots that ended more than grace before now are
// forgotten on the way: no caller lagging now by less than grace counts
// them. Called with e.mu held, when e is not nil.
func slotsCheck(e *entry, l *domain.Limit, now, grace int64) domain.LimitStatus {
	var used, first, last int64
	if e != nil && e.held != nil {
		for id, s := range e.held.slots {
			switch {
			case s.expiry <= now-grace:
				delete(e.held.slots, id)
			case s.expiry > now:
				used += s.units
				if first == 0 || s.expiry < first {
					first = s.expiry
				}
				last = max(last, s.expiry)
			}
		}
	}
	st := domain.LimitStatus{Allowed: used+l.Cost <= l.Window.Limit, Remaining: max(l.Window.Limit-used, 0)}
	if used > 0 {
		st.ResetAfter = domain.Micros(last - now)
		if !st.Allowed {
			st.RetryAfter = domain.Micros(first - now)
		}
	}
	return st
}

// Reserve decides limits at now as Evaluate would, concurrency windows
// included, and when every window admits holds them under a new lease
// that expires at now + ttl (see ports.Reserver).
func (s *Store) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	b, t, err := s.enterHeld(ctx, now, limits)
	if err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if err := s.lockAll(b, limits, t, true); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	var st [domain.MaxLimits]domain.LimitStatus
	allowed := true
	for i := range limits {
		st[i] = check(b.ents[i], &limits[i], t, s.grace)
		allowed = allowed && st[i].Allowed
	}
	var lease domain.Lease
	if allowed {
		lease = domain.Lease{ID: newLeaseID(), At: time.UnixMicro(t), TTL: ttl}
		s.hold(b, limits, t, lease, st[:len(limits)])
	}
	s.unlockAll(b, len(limits))
	return domain.NewResult(st[:len(limits)]), lease, nil
}

// ReserveAhead is Reserve at now + ahead; see ports.Allotter and
// docs/adr/019-allotments.md.
func (s *Store) ReserveAhead(ctx context.Context, now time.Time, ahead time.Duration, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if ahead < 0 || ahead > domain.MaxAllotmentHold {
		return domain.Result{}, domain.Lease{}, &domain.LimitError{Index: -1, Field: "ahead", Reason: fmt.Sprintf("must be between 0 and %s", domain.MaxAllotmentHold)}
	}
	return s.Reserve(ctx, now.Add(ahead), limits, ttl)
}

// hold takes every limit of an admitted reservation under lease, its
// entries locked, and writes each one's status after consumption to st.
func (s *Store) hold(b *batch, limits []domain.Limit, t int64, lease domain.Lease, st []domain.LimitStatus) {
	expiry := t + int64(lease.TTL/time.Microsecond)
	for i := range limits {
		e, l := b.ents[i], &limits[i]
		if l.Window.Algorithm != domain.Concurrency {
			st[i] = s.commitRate(b, limits, i, l.Cost, t, st[i])
			continue
		}
		h := heldOf(e)
		if h.slots == nil {
			h.slots = make(map[string]heldSlot)
		}
		h.slots[lease.ID] = heldSlot{units: l.Cost, expiry: expiry}
		// The status after taking the slots: a check of no cost.
		st[i] = slotsCheck(e, &domain.Limit{Key: l.Key, Window: l.Window}, t, s.grace)
		if h.grown() {
			b.after[i] |= afterRecost
		}
	}
	h := heldOf(b.ents[0])
	if h.leases == nil {
		h.leases = make(map[string]leaseRecord)
	}
	if int32(len(h.slots)+len(h.leases)) >= h.cover {
		// Before the estimate grows, forget what ended: a sweep at each
		// doubling keeps a reservation O(1), amortised.
		h.prune(t - s.grace)
	}
	h.leases[lease.ID] = leaseRecord{expiry: expiry}
	if h.grown() {
		b.after[0] |= afterRecost
	}
}

// Settle ends lease: each rate window counts actual units instead of its
// reserved cost, its concurrency slots come back (see ports.Reserver).
func (s *Store) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	if err := validateLease(lease); err != nil {
		return 0, err
	}
	if err := domain.ValidateActual(actual); err != nil {
		return 0, err
	}
	b, t, err := s.enterHeld(ctx, now, limits)
	if err != nil {
		return 0, err
	}
	if err := s.lockAll(b, limits, t, true); err != nil {
		return 0, err
	}
	got := s.settleLocked(b, limits, t, lease, actual)
	s.unlockAll(b, len(limits))
	return got, nil
}

// settleLocked is Settle once the entries are locked.
func (s *Store) settleLocked(b *batch, limits []domain.Limit, t int64, lease domain.Lease, actual int64) domain.Settlement {
	h := b.ents[0].held
	if h == nil {
		return domain.Expired
	}
	rec, ok := h.leases[lease.ID]
	switch {
	case !ok || !rec.settled && rec.expiry <= t:
		// Expired, or unknown: forgotten after its expiry, or never made
		// here. Nothing is held any more either way.
		return domain.Expired
	case rec.settled:
		return domain.AlreadySettled
	}
	rec.settled = true
	h.leases[lease.ID] = rec
	reserved := lease.At.UnixMicro()
	for i := range limits {
		if b.of[i] != 0 {
			// A shared log is refunded or charged once, through the
			// first limit naming its key, under the log's window
			// (docs/adr/015).
			continue
		}
		e, l := b.ents[i], &limits[i]
		w, _ := b.logWindow(limits, i)
		switch d := l.Cost - actual; {
		case l.Window.Algorithm == domain.Concurrency:
			if e.held != nil {
				delete(e.held.slots, lease.ID)
			}
		case d > 0:
			e.st.Refund(t, reserved, w, d)
		case d < 0:
			e.st.Charge(t, w, -d, s.grace)
			if e.grownLocked() {
				b.after[i] |= afterRecost
			}
		}
	}
	return domain.Settled
}

// Renew moves lease's expiry to now + ttl, for its record and its slots
// (see ports.Reserver).
func (s *Store) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	if err := validateLease(lease); err != nil {
		return domain.Lease{}, err
	}
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Lease{}, err
	}
	b, t, err := s.enterHeld(ctx, now, limits)
	if err != nil {
		return domain.Lease{}, err
	}
	if err := s.lockAll(b, limits, t, false); err != nil {
		return domain.Lease{}, err
	}
	ok := s.renewLocked(b, limits, t, lease.ID, t+int64(ttl/time.Microsecond))
	s.unlockAll(b, len(limits))
	if !ok {
		return domain.Lease{}, fmt.Errorf("local: renew lease %s: %w", lease.ID, domain.ErrLeaseEnded)
	}
	lease.TTL = ttl
	return lease, nil
}

// renewLocked is Renew once the entries are locked; it reports whether
// the lease was still held.
func (s *Store) renewLocked(b *batch, limits []domain.Limit, t int64, id string, expiry int64) bool {
	first := b.ents[0]
	if first == nil || first.held == nil {
		return false
	}
	rec, ok := first.held.leases[id]
	if !ok || rec.settled || rec.expiry <= t {
		return false
	}
	rec.expiry = expiry
	first.held.leases[id] = rec
	for i := range limits {
		e := b.ents[i]
		if limits[i].Window.Algorithm != domain.Concurrency || e == nil || e.held == nil {
			continue
		}
		if sl, ok := e.held.slots[id]; ok {
			sl.expiry = expiry
			e.held.slots[id] = sl
		}
	}
	return true
}

// enterHeld starts a call of the Reserver: the context, limits valid for a
// reservation (domain.ValidateHeld), the store open. It returns the
// request's batch with its hashes, and now in µs, recorded as seen.
func (s *Store) enterHeld(ctx context.Context, now time.Time, limits []domain.Limit) (*batch, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("local: %w", err)
	}
	if err := domain.ValidateHeld(limits); err != nil {
		return nil, 0, err
	}
	if s.closed.Load() {
		return nil, 0, errClosed
	}
	b := new(batch)
	for i := range limits {
		b.hash[i] = s.hash(limits[i].Key)
	}
	b.link(limits)
	t := now.UnixMicro()
	s.observe(t)
	return b, t, nil
}

// validateLease refuses a lease no store could have returned.
func validateLease(lease domain.Lease) error {
	if !lease.Valid() {
		return &domain.LimitError{Index: -1, Field: "lease", Reason: fmt.Sprintf("must have an ID of %d lowercase hex characters and a TTL between %s and %s", domain.LeaseIDLen, domain.MinLeaseTTL, domain.MaxLeaseTTL)}
	}
	return nil
}

// newLeaseID returns domain.LeaseIDLen random lowercase hex characters.
// crypto/rand never fails on the platforms Go supports (it panics
// instead, since Go 1.24).
func newLeaseID() string {
	var b [domain.LeaseIDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

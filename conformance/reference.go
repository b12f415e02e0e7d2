package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// ReferenceGrace is the reference store's grace (rule S5 of
// docs/adr/009): how far a caller's instant may lag the latest one a key
// has seen with a sliding log still counting every unit of its window. It
// declares it with Features.Grace.
const ReferenceGrace = time.Minute

// NewReferenceStore returns a store that is correct by construction: one
// mutex around a map of the domain's counting states (domain.KeyState,
// which applies the state rules of docs/adr/009), so every request is
// checked and committed as one step. It implements ports.Repeater,
// ports.Reserver (reservations and concurrency windows, docs/adr/012),
// ports.Batcher and ports.Forgetter. It
// is what fstest.MapFS is to
// fstest.TestFS: the suite's proof that its expectations can be met, and a
// yardstick for other stores' answers and benchmarks.
//
// It is not meant for production: one lock serialises every call and the
// map never forgets a key until Reset, so memory grows with the keys seen.
func NewReferenceStore() ports.Store {
	return &referenceStore{
		keys:   make(map[string]*referenceKey),
		slots:  make(map[string]map[string]heldSlots),
		leases: make(map[string]*referenceLease),
	}
}

// referenceKey is one key's state, whichever algorithm wrote it.
type referenceKey = domain.KeyState

// grace is ReferenceGrace in microseconds.
const grace = int64(ReferenceGrace / time.Microsecond)

type referenceStore struct {
	mu     sync.Mutex
	closed bool
	keys   map[string]*referenceKey
	// slots holds, per concurrency key, the slots each lease holds there;
	// leases every lease a Reserve made (reservation.go).
	slots  map[string]map[string]heldSlots
	leases map[string]*referenceLease
}

var (
	_ ports.Store     = (*referenceStore)(nil)
	_ ports.Repeater  = (*referenceStore)(nil)
	_ ports.Reserver  = (*referenceStore)(nil)
	_ ports.Allotter  = (*referenceStore)(nil)
	_ ports.Batcher   = (*referenceStore)(nil)
	_ ports.Forgetter = (*referenceStore)(nil)
)

// EvaluateBatch implements ports.Batcher: one Evaluate after another.
func (s *referenceStore) EvaluateBatch(ctx context.Context, now time.Time, reqs [][]domain.Limit) ([]domain.Result, []error) {
	return ports.EvaluateEach(ctx, s, now, reqs)
}

// Evaluate implements ports.Store.
func (s *referenceStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.evaluate(ctx, now, limits)
}

// Peek implements ports.Store. It accepts concurrency windows
// (domain.ValidateHeld) and counts their held slots.
func (s *referenceStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if err := ctx.Err(); err != nil {
		return domain.Result{}, fmt.Errorf("conformance: reference store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return domain.Result{}, domain.ErrStoreClosed
	}
	if err := domain.ValidateHeld(limits); err != nil {
		return domain.Result{}, err
	}
	return s.checkLocked(now.UnixMicro(), limits), nil
}

// checkLocked checks every limit at at, consuming nothing. Called with
// s.mu held.
func (s *referenceStore) checkLocked(at int64, limits []domain.Limit) domain.Result {
	var st [domain.MaxLimits]domain.LimitStatus
	for i, l := range limits {
		if l.Window.Algorithm == domain.Concurrency {
			st[i] = s.slotsCheck(at, l)
			continue
		}
		k := s.keys[l.Key]
		if k == nil {
			// A key never seen has the zero state; a check must not
			// create it.
			k = &referenceKey{}
		}
		st[i] = k.Check(at, l.Window, l.Cost, grace)
	}
	return domain.NewResult(st[:len(limits)])
}

func (s *referenceStore) evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if err := ctx.Err(); err != nil {
		return domain.Result{}, fmt.Errorf("conformance: reference store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return domain.Result{}, domain.ErrStoreClosed
	}
	if err := domain.ValidateLimits(limits); err != nil {
		return domain.Result{}, err
	}
	at := now.UnixMicro()
	r := s.checkLocked(at, limits)
	if !r.Allowed {
		return r, nil
	}
	// Every limit admitted its cost, and the lock is still held: commit
	// them all.
	var st [domain.MaxLimits]domain.LimitStatus
	for i := range limits {
		st[i] = s.commitRate(at, limits, i, limits[i].Cost, r.Status(i))
	}
	return domain.NewResult(st[:len(limits)]), nil
}

// commitRate records cost units for the rate limit limits[i] at at, and
// returns its status after consumption, checked being its status before.
// A key several sliding-log windows share is one log (docs/adr/015): the
// first limit naming it records the units once, under the log's window
// (logWindow), and every window of it reads its status from the log. The
// limits are committed in request order. Called with s.mu held.
func (s *referenceStore) commitRate(at int64, limits []domain.Limit, i int, cost int64, checked domain.LimitStatus) domain.LimitStatus {
	l := &limits[i]
	k := s.rateKey(l.Key)
	if _, shared := domain.SharesLog(limits, i); shared {
		return k.SharedCommitted(at, l.Window, checked)
	}
	w, group := logWindow(limits, i)
	st := k.Committed(at, w, cost, grace, checked)
	if group {
		st = k.SharedCommitted(at, l.Window, checked)
	}
	return st
}

// logWindow returns the window a store writes the key of limits[i] under,
// limits[i] being the first limit naming it, and whether later limits of
// the request share the key. A key of its own is written under its
// window; a shared log (docs/adr/015) under a sliding-log window of the
// longest period among the windows naming it, so that it keeps every unit
// each of them counts (rule S5 of docs/adr/009 with that period), and of
// their largest limit, so that a charge records as many units as the
// largest window counts.
func logWindow(limits []domain.Limit, i int) (domain.Window, bool) {
	w, group := limits[i].Window, false
	for j := i + 1; j < len(limits); j++ {
		if limits[j].Key != limits[i].Key {
			continue
		}
		group = true
		w.Period = max(w.Period, limits[j].Window.Period)
		w.Limit = max(w.Limit, limits[j].Window.Limit)
	}
	return w, group
}

// rateKey returns key's counting state, created when it is new.
func (s *referenceStore) rateKey(key string) *referenceKey {
	k := s.keys[key]
	if k == nil {
		k = &referenceKey{}
		s.keys[key] = k
	}
	return k
}

// EvaluateRepeated implements ports.Repeater: how many of the n requests
// fit is the fewest any limit fits (domain.KeyState.Fit), so a call costs
// O(keys), not O(n).
func (s *referenceStore) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	if err := ctx.Err(); err != nil {
		return domain.Repeated{}, fmt.Errorf("conformance: reference store: %w", err)
	}
	if n < 1 || n > ports.MaxRepeat {
		return domain.Repeated{}, &domain.LimitError{Index: -1, Field: "n", Reason: fmt.Sprintf("must be between 1 and %d, got %d", ports.MaxRepeat, n)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return domain.Repeated{}, domain.ErrStoreClosed
	}
	if err := domain.ValidateLimits(limits); err != nil {
		return domain.Repeated{}, err
	}
	at := now.UnixMicro()
	keys := make([]*referenceKey, len(limits))
	var st [domain.MaxLimits]domain.LimitStatus
	k := int64(n)
	for i, l := range limits {
		if keys[i] = s.keys[l.Key]; keys[i] == nil {
			keys[i] = &referenceKey{}
			s.keys[l.Key] = keys[i]
		}
		st[i] = keys[i].Check(at, l.Window, l.Cost, grace)
		k = min(k, keys[i].Fit(at, l.Window, l.Cost, grace))
	}
	rep := domain.Repeated{N: n, Admitted: int(k)}
	if k > 0 {
		for i := range limits {
			st[i] = s.commitRate(at, limits, i, k*limits[i].Cost, domain.LimitStatus{Allowed: true})
		}
		rep.Last = domain.NewResult(st[:len(limits)])
		if k == int64(n) {
			return rep, nil
		}
		for i, l := range limits {
			st[i] = keys[i].Check(at, l.Window, l.Cost, grace)
		}
	}
	rep.Refused = domain.NewResult(st[:len(limits)])
	return rep, nil
}

// Reset implements ports.Store.
func (s *referenceStore) Reset(ctx context.Context, key string) error {
	_, err := s.Forget(ctx, key)
	return err
}

// Forget implements ports.Forgetter: a key holds state from its first
// write to its reset.
func (s *referenceStore) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("conformance: reference store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, domain.ErrStoreClosed
	}
	_, counted := s.keys[key]
	held := len(s.slots[key]) > 0
	delete(s.keys, key)
	delete(s.slots, key)
	return counted || held, nil
}

// Close implements ports.Store. It is idempotent.
func (s *referenceStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.keys, s.slots, s.leases = nil, nil, nil
	return nil
}

package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// NewReferenceStore returns a store that is correct by construction: one
// mutex around a map of the domain's counting states, so every request is
// checked and committed as one step. It is what fstest.MapFS is to
// fstest.TestFS: the suite's proof that its expectations can be met, and a
// yardstick for other stores' answers and benchmarks.
//
// It is not meant for production: one lock serialises every call and the
// map never forgets a key until Reset, so memory grows with the keys seen.
func NewReferenceStore() ports.Store {
	return &referenceStore{keys: make(map[string]*referenceKey)}
}

// referenceKey holds both states a key may have; a key is counted by the
// algorithm of the window it is used with.
type referenceKey struct {
	log  domain.LogState
	gcra domain.GCRAState
}

type referenceStore struct {
	mu     sync.Mutex
	closed bool
	keys   map[string]*referenceKey
}

var _ ports.Store = (*referenceStore)(nil)

// Evaluate implements ports.Store.
func (s *referenceStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.decide(ctx, now, limits, true)
}

// Peek implements ports.Store.
func (s *referenceStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.decide(ctx, now, limits, false)
}

func (s *referenceStore) decide(ctx context.Context, now time.Time, limits []domain.Limit, consume bool) (domain.Result, error) {
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
	var st [domain.MaxLimits]domain.LimitStatus
	for i, l := range limits {
		k := s.keys[l.Key]
		if k == nil {
			// A key never seen has the zero state; Peek must not create it.
			k = &referenceKey{}
		}
		if l.Window.Algorithm == domain.GCRA {
			st[i] = k.gcra.Check(at, l.Window, l.Cost)
		} else {
			st[i] = k.log.Check(at, l.Window, l.Cost)
		}
	}
	r := domain.NewResult(st[:len(limits)])
	if !consume || !r.Allowed {
		return r, nil
	}
	// Every limit admitted its cost, and the lock is still held: commit
	// them all.
	for i, l := range limits {
		k := s.keys[l.Key]
		if k == nil {
			k = &referenceKey{}
			s.keys[l.Key] = k
		}
		if l.Window.Algorithm == domain.GCRA {
			st[i] = k.gcra.Committed(at, l.Window, l.Cost, st[i])
		} else {
			st[i] = k.log.Committed(at, l.Window, l.Cost, st[i])
		}
	}
	return domain.NewResult(st[:len(limits)]), nil
}

// Reset implements ports.Store.
func (s *referenceStore) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conformance: reference store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return domain.ErrStoreClosed
	}
	delete(s.keys, key)
	return nil
}

// Close implements ports.Store. It is idempotent.
func (s *referenceStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.keys = nil
	return nil
}

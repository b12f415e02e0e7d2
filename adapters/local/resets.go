package local

import (
	"context"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Reset notices (ports.ResetNotifier, docs/adr/019-allotments.md): the
// instances that share one in-process store (Limiters of one process)
// hear every reset made through any of them, at once.

var _ ports.ResetNotifier = (*Store)(nil)

// resetListeners are the functions OnReset registered.
type resetListeners struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(keys []string)
}

// NotifyReset hands keys to every listener, before it returns.
func (s *Store) NotifyReset(_ context.Context, keys []string) error {
	if s.closed.Load() {
		return domain.ErrStoreClosed
	}
	s.resets.mu.Lock()
	fns := make([]func([]string), 0, len(s.resets.fns))
	for _, fn := range s.resets.fns {
		fns = append(fns, fn)
	}
	s.resets.mu.Unlock()
	for _, fn := range fns {
		fn(slices.Clone(keys))
	}
	return nil
}

// OnReset calls fn with the keys of every reset notice until stop.
func (s *Store) OnReset(fn func(keys []string)) (stop func()) {
	r := &s.resets
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fns == nil {
		r.fns = map[int]func([]string){}
	}
	id := r.next
	r.next++
	r.fns[id] = fn
	return func() {
		r.mu.Lock()
		delete(r.fns, id)
		r.mu.Unlock()
	}
}

package redis

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Reset notices (ports.ResetNotifier, docs/adr/019-allotments.md): a reset
// publishes the keys it forgot on resetChannel; every store subscribed
// hands them to its listeners, which drop their allotments on them. On a
// cluster, PUBLISH reaches every node's subscribers. A user whose ACL
// grants no channel gets no notice: the allotments it holds then end with
// their hold (docs/runbook.md, "Allotments").
const resetChannel = "rl:resets"

// resetRetry is how long the subscription waits before it subscribes
// again after its connection failed (or while the store is not live).
const resetRetry = time.Second

var _ ports.ResetNotifier = (*Store)(nil)

// resetSubs are the listeners of reset notices and the goroutine that
// subscribes for them.
type resetSubs struct {
	mu     sync.Mutex
	next   int
	fns    map[int]func(keys []string)
	cancel context.CancelFunc
	done   chan struct{}
}

// NotifyReset publishes keys on the reset channel.
func (s *Store) NotifyReset(ctx context.Context, keys []string) error {
	switch {
	case s.closed.Load():
		return domain.ErrStoreClosed
	case !s.live.Load():
		return s.notLive()
	}
	if len(keys) == 0 {
		return nil
	}
	cctx, cancel, whose := s.deadline(ctx)
	defer cancel()
	err := s.client.Do(cctx, s.client.B().Publish().Channel(resetChannel).Message(strings.Join(keys, "\n")).Build()).Error()
	if err != nil {
		return s.mapErr(ctx, cctx, err, whose)
	}
	return nil
}

// OnReset calls fn with the keys of every reset notice until stop, from
// the store's subscription (one per store, started with its first
// listener and ended with its last, or with Close).
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
	if r.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel, r.done = cancel, make(chan struct{})
		go s.subscribe(ctx, r.done)
	}
	return func() {
		r.mu.Lock()
		delete(r.fns, id)
		var cancel context.CancelFunc
		var done chan struct{}
		if len(r.fns) == 0 && r.cancel != nil {
			cancel, done = r.cancel, r.done
			r.cancel, r.done = nil, nil
		}
		r.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

// subscribe receives the reset notices until ctx ends or the store is
// closed, subscribing again after a failure.
func (s *Store) subscribe(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil && !s.closed.Load() {
		if s.live.Load() {
			_ = s.client.Receive(ctx, s.client.B().Subscribe().Channel(resetChannel).Build(), func(m rueidis.PubSubMessage) {
				keys := strings.Split(m.Message, "\n")
				s.resets.mu.Lock()
				fns := make([]func([]string), 0, len(s.resets.fns))
				for _, fn := range s.resets.fns {
					fns = append(fns, fn)
				}
				s.resets.mu.Unlock()
				for _, fn := range fns {
					fn(keys)
				}
			})
		}
		t := time.NewTimer(resetRetry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

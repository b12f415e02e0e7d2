package app

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// coalescer joins the decisions on one key set (the same keys, windows and
// costs) that arrive while a store call for that key set is in flight into
// ONE next call, made through ports.Repeater (docs/adr/007):
//
//   - a decision that finds no call in flight for its key set calls the
//     store at once, alone: nobody waits for company;
//   - the decisions that arrive meanwhile queue, in arrival order, for the
//     next call; when the call in flight returns, the first of them (the
//     leader) makes one EvaluateRepeated call for all of them, and the
//     decisions that arrive during that one queue for the next, and so on;
//   - each member gets its own Result (domain.Repeated.For): the store
//     admits them in arrival order, all or nothing each, exactly as that
//     many sequential calls would;
//   - no member waits past its own store deadline: one that is still
//     queued when its deadline passes, or whose caller gives up, leaves
//     with its own timeout or cancellation and is not counted; the group
//     call runs under the leader's store deadline (the earliest, since the
//     leader arrived first) and is not cancelled by any one caller; its
//     error reaches every member, and only the leader counts it against
//     the store.
//
// Key sets are found by a 64-bit fingerprint under a per-process random
// seed, confirmed by the first key and the number of keys.
type coalescer struct {
	l      *Limiter
	rep    ports.Repeater
	seed   maphash.Seed
	shards [coalesceShards]coalesceShard
}

// coalesceShards spreads the key sets over locks: decisions on different
// key sets rarely meet on one.
const coalesceShards = 64

type coalesceShard struct {
	mu sync.Mutex
	// sets holds the key sets with a call in flight. Values, not pointers:
	// a lone decision inserts and deletes one without allocating.
	sets map[uint64]flight
}

// flight is a key set with a store call in flight.
type flight struct {
	first string
	n     int
	// next is the batch of decisions waiting for the next call; nil when
	// none arrived.
	next *batch
}

// batch is the decisions that join one store call. Its fields up to
// launched are guarded by the shard's lock; start closes when the batch
// is launched, done when its call has returned.
type batch struct {
	members []*evaluation // in arrival order; nil where one left
	present int
	// Set at launch, under the lock.
	launched bool
	leader   *evaluation
	n        int
	now      time.Time
	start    chan struct{}
	// Set by the leader before done closes.
	done chan struct{}
	rep  domain.Repeated
	err  error
}

// newCoalescer returns a coalescer for store, or nil when store cannot
// decide repeated requests (ports.Repeater): its decisions then each make
// their own call.
func newCoalescer(l *Limiter, store ports.Store) *coalescer {
	rep, ok := store.(ports.Repeater)
	if !ok {
		return nil
	}
	c := &coalescer{l: l, rep: rep, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].sets = map[uint64]flight{}
	}
	return c
}

// evaluate decides ev on the primary store, joining the next call of its
// key set when one is in flight.
func (c *coalescer) evaluate(ctx context.Context, ev *evaluation) (domain.Result, error) {
	fp := fingerprint(c.seed, ev)
	sh := &c.shards[fp%coalesceShards]
	first := ev.limits[0].Key
	sh.mu.Lock()
	f, busy := sh.sets[fp]
	if !busy {
		sh.sets[fp] = flight{first: first, n: ev.n}
		sh.mu.Unlock()
		res, _, err := c.l.callStore(ctx, ev, ports.OpEvaluate)
		c.handOff(sh, fp)
		return res, err
	}
	if f.first != first || f.n != ev.n || (f.next != nil && len(f.next.members) >= ports.MaxRepeat) {
		// Another key set under the same fingerprint, or a full batch: this
		// decision makes its own call.
		sh.mu.Unlock()
		res, _, err := c.l.callStore(ctx, ev, ports.OpEvaluate)
		return res, err
	}
	b := f.next
	if b == nil {
		b = &batch{start: make(chan struct{}), done: make(chan struct{})}
		f.next = b
		sh.sets[fp] = f
	}
	ev.coIndex = len(b.members)
	b.members = append(b.members, ev)
	b.present++
	sh.mu.Unlock()
	return c.wait(ctx, ev, sh, fp, b)
}

// wait is a queued member's part: leave at its own deadline if the batch
// has not started, make the call if it leads, else wait for the call.
func (c *coalescer) wait(ctx context.Context, ev *evaluation, sh *coalesceShard, fp uint64, b *batch) (domain.Result, error) {
	l := c.l
	start := l.clock.Now()
	sctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	defer cancel()
	select {
	case <-b.start:
	case <-sctx.Done():
	}
	sh.mu.Lock()
	if !b.launched {
		b.members[ev.coIndex] = nil
		b.present--
		sh.mu.Unlock()
		ev.latency = l.clock.Now().Sub(start)
		return domain.Result{}, leftQueue(sctx.Err())
	}
	leader, idx := b.leader == ev, ev.coIndex
	sh.mu.Unlock()
	ev.now = b.now
	if leader {
		c.call(ctx, ev, sh, fp, b, sctx)
	} else {
		select {
		case <-b.done:
		case <-sctx.Done():
			ev.latency = l.clock.Now().Sub(start)
			return domain.Result{}, leftQueue(sctx.Err())
		}
	}
	ev.latency = l.clock.Now().Sub(start)
	if b.err != nil {
		return domain.Result{}, b.err
	}
	return b.rep.For(idx, ev.limits[:ev.n]), nil
}

// leftQueue is the error of a member that left before its batch's call
// answered: its own deadline (a store timeout) or its caller's
// cancellation. It made no call, so it counts nothing against the store.
func leftQueue(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: queued behind the key set's call in flight: %w", domain.ErrStoreTimeout, err)
	}
	return fmt.Errorf("queued behind the key set's call in flight: %w", err)
}

// call makes the batch's store call, publishes its answer to every member
// and hands the key set on to the next batch. The call keeps the leader's
// context values (a trace) but not its cancellation, which is the leader's
// own business; its deadline is the leader's store deadline (sctx's), the
// earliest of the batch.
func (c *coalescer) call(ctx context.Context, ev *evaluation, sh *coalesceShard, fp uint64, b *batch, sctx context.Context) {
	l := c.l
	deadline, _ := sctx.Deadline()
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	limits := ev.limits[:ev.n]
	start := l.clock.Now()
	var err error
	if b.n == 1 {
		var res domain.Result
		res, err = l.store.Evaluate(cctx, ev.now, limits)
		b.rep = domain.Repeated{N: 1}
		if res.Allowed {
			b.rep.Admitted, b.rep.Last = 1, res
		} else {
			b.rep.Refused = res
		}
	} else {
		b.rep, err = c.rep.EvaluateRepeated(cctx, ev.now, limits, b.n)
	}
	latency := l.clock.Now().Sub(start)
	cancel()
	b.err = classify(err)
	ev.madeCall = true
	close(b.done)
	c.handOff(sh, fp)
	l.rec.RecordStoreCall(ctx, ports.StoreCall{Op: ports.OpEvaluate, Start: start, Latency: latency, Keys: ev.n, Err: b.err})
}

// handOff is called when a key set's call has returned: it launches the
// batch that queued meanwhile (its members in arrival order, the first
// present one leading, all decided at one instant: the latest of their
// own instants and the clock's), or forgets the key set when none did.
func (c *coalescer) handOff(sh *coalesceShard, fp uint64) {
	sh.mu.Lock()
	f := sh.sets[fp]
	b := f.next
	if b == nil || b.present == 0 {
		delete(sh.sets, fp)
		sh.mu.Unlock()
		return
	}
	f.next = nil
	sh.sets[fp] = f
	b.launched = true
	b.now = c.l.clock.Now()
	for _, m := range b.members {
		if m == nil {
			continue
		}
		if b.n == 0 {
			b.leader = m
		}
		m.coIndex = b.n
		b.n++
		if m.now.After(b.now) {
			b.now = m.now
		}
	}
	b.members = nil
	sh.mu.Unlock()
	close(b.start)
}

package app

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
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
//     next call; when the call in flight returns, one EvaluateRepeated call
//     decides all of them, and the decisions that arrive during that one
//     queue for the next, and so on;
//   - each member gets its own Result (domain.Repeated.For): the store
//     admits them in arrival order, all or nothing each, exactly as that
//     many sequential calls would;
//   - the queue is not the store: the store deadline of a batch starts
//     when its call does (docs/adr/008), and no member waits in all past
//     Config.ShedAfter or its caller's context: one that does leaves,
//     shed (ErrOverloaded) or with its caller's error, refused without
//     the degraded matrix. Before its batch is sent it is not counted;
//     after, its units are counted as a lone call's are when it gives up
//     after reaching the store. The group call is made by a goroutine of
//     its own, shed at the latest member's bound, so that a member that
//     arrived early (and waited longest behind the call in flight) takes
//     no time from those that arrived later, and no caller's cancellation
//     cancels the others' call. Its error reaches every member still
//     waiting, and is counted against the store once.
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
// start are guarded by the shard's lock and fixed at launch; start closes
// at launch, done once the call has returned and rep and err are set.
type batch struct {
	members []*evaluation // in arrival order; nil where one left
	present int
	// ctx carries the first member's context values (a trace), without
	// its cancellation.
	ctx context.Context
	// Set at launch.
	launched bool
	n        int
	now      time.Time
	deadline time.Time
	limits   [domain.MaxLimits]domain.Limit
	nlimits  int
	start    chan struct{}
	// Set by the call before done closes.
	done chan struct{}
	rep  domain.Repeated
	err  error
	// callStart is when the call began, on the Limiter's clock.
	callStart time.Time
	// counted is taken by the one member that counts the call's outcome.
	counted atomic.Bool
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
		b = &batch{ctx: context.WithoutCancel(ctx), start: make(chan struct{}), done: make(chan struct{})}
		f.next = b
		sh.sets[fp] = f
	}
	// The member's own bound, on the clock contexts use: the queue is
	// not the store, so the store deadline starts when its batch's call
	// does; the member waits in all at most Config.ShedAfter (and no
	// longer than its caller).
	ev.coDeadline = time.Now().Add(c.l.cfg.ShedAfter)
	ev.coIndex = len(b.members)
	b.members = append(b.members, ev)
	b.present++
	sh.mu.Unlock()
	return c.wait(ctx, ev, sh, b)
}

// wait is a queued member's part: leave at its own deadline, or take its
// own Result from the batch's answer.
func (c *coalescer) wait(ctx context.Context, ev *evaluation, sh *coalesceShard, b *batch) (domain.Result, error) {
	l := c.l
	start := l.clock.Now()
	sctx, cancel := context.WithDeadline(ctx, ev.coDeadline)
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
		return domain.Result{}, leftQueue(ctx)
	}
	idx := ev.coIndex
	sh.mu.Unlock()
	ev.now = b.now
	select {
	case <-b.done:
	case <-sctx.Done():
		select {
		case <-b.done:
			// The answer came as the member's bound passed: what is
			// known is the answer.
		default:
			ev.latency = l.clock.Now().Sub(start)
			return domain.Result{}, leftQueue(ctx)
		}
	}
	ev.latency = l.clock.Now().Sub(start)
	ev.madeCall = b.counted.CompareAndSwap(false, true)
	ev.callStart = b.callStart
	if b.err != nil {
		return domain.Result{}, b.err
	}
	return b.rep.For(idx, ev.limits[:ev.n]), nil
}

// leftQueue is the error of a member that left before its batch's call
// answered: its caller gave up (ctx's error), or it waited past
// Config.ShedAfter (ErrOverloaded). Neither is the store's failure: they
// count nothing against the breaker, and the decision is refused without
// the degraded matrix (docs/adr/008).
func leftQueue(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queued behind the key set's call in flight: %w", err)
	}
	return fmt.Errorf("%w: queued behind the key set's call in flight", ErrOverloaded)
}

// call makes the batch's store call under the latest member's deadline,
// records it, publishes its answer and hands the key set on to the next
// batch.
func (c *coalescer) call(sh *coalesceShard, fp uint64, b *batch) {
	l := c.l
	start := l.clock.Now()
	// The store deadline starts now, at the call: the members' time in
	// the queue was not the store's.
	cctx := newStoreTime(b.ctx, l.lag, l.wall(start), l.cfg.StoreTimeout, b.deadline, l.dispatching)
	limits := b.limits[:b.nlimits]
	var err error
	if b.n == 1 {
		var res domain.Result
		res, err = l.store.Evaluate(cctx, b.now, limits)
		b.rep = domain.Repeated{N: 1}
		if res.Allowed {
			b.rep.Admitted, b.rep.Last = 1, res
		} else {
			b.rep.Refused = res
		}
	} else {
		b.rep, err = c.rep.EvaluateRepeated(cctx, b.now, limits, b.n)
	}
	latency := l.clock.Now().Sub(start)
	why := cctx.stop()
	b.err, b.callStart = classifyEnd(err, why), start
	// Recorded before its decisions are: a decision's store call is never
	// missing from the record once the decision is out.
	l.rec.RecordStoreCall(b.ctx, ports.StoreCall{Op: ports.OpEvaluate, Start: start, Latency: latency, Keys: b.nlimits, Err: b.err})
	close(b.done)
	c.handOff(sh, fp)
}

// handOff is called when a key set's call has returned: it launches the
// batch that queued meanwhile (its members in arrival order, all decided
// at one instant: the latest of their own instants and the clock's), or
// forgets the key set when none did.
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
			// The limits are copied: a member that leaves returns its
			// evaluation to the pool while the call may still run.
			b.nlimits = copy(b.limits[:], m.limits[:m.n])
		}
		m.coIndex = b.n
		b.n++
		if m.now.After(b.now) {
			b.now = m.now
		}
		if m.coDeadline.After(b.deadline) {
			b.deadline = m.coDeadline
		}
	}
	b.members = nil
	sh.mu.Unlock()
	close(b.start)
	go c.call(sh, fp, b)
}

package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Decisions that span partitions (docs/adr/013). A Redis Cluster serves
// one atomic call from one hash slot; an ip window tagged by its ip
// (docs/adr/013) lives in another slot than the request's other windows.
// Such a request is decided all or nothing through reservations: its
// limits are grouped by partition, each group is reserved at once, in
// parallel, and when one refuses (or fails), every group that admitted is
// settled at 0, which takes back exactly the units its reservation
// stamped: a refusal consumes nothing anywhere once released. When every
// group admits, Evaluate leaves its short leases (Config.SplitLeaseTTL)
// to expire, which counts them at the cost reserved, and Reserve keeps
// them all in its Reservation. One round trip when the request passes,
// two when it is refused. Not coalesced; a refusal is remembered by the
// refusal cache as a one-call refusal is (docs/adr/013 says why that
// stays exact).

// partitionSet groups an evaluation's limits by the store partition their
// keys fall in.
type partitionSet struct {
	// n is the number of groups, 1 when every key is in one partition.
	n int
	// of is the group of each limit.
	of [domain.MaxLimits]uint8
}

// partitions groups ev's limits. Every limit is in group 0 unless the
// store is partitioned, can reserve, and the keys span partitions.
func (l *Limiter) partitions(ev *evaluation) partitionSet {
	ps := partitionSet{n: 1}
	if l.partitioned == nil || l.reserver == nil || ev.n < 2 {
		return ps
	}
	var ids [domain.MaxLimits]int
	first, ok := l.partitioned.Partition(ev.limits[0].Key)
	if !ok {
		return ps // every key shares one partition
	}
	ids[0] = first
	for i := 1; i < ev.n; i++ {
		p, _ := l.partitioned.Partition(ev.limits[i].Key)
		g := 0
		for g < ps.n && ids[g] != p {
			g++
		}
		if g == ps.n {
			ids[g] = p
			ps.n++
		}
		ps.of[i] = uint8(g)
	}
	return ps
}

// side is the part of a split decision that goes to one partition.
type side struct {
	idx    []int // the request's limits on this side, in request order
	limits []domain.Limit
	node   string
	res    domain.Result
	lease  domain.Lease
	err    error
}

// sides splits ev's limits by ps.
func (l *Limiter) sides(ev *evaluation, ps *partitionSet) []*side {
	sides := make([]*side, ps.n)
	for g := range sides {
		sides[g] = &side{}
	}
	for i := range ev.n {
		s := sides[ps.of[i]]
		s.idx = append(s.idx, i)
		s.limits = append(s.limits, ev.limits[i])
	}
	for _, s := range sides {
		if l.nodeProber != nil {
			s.node = l.nodeProber.NodeOf(s.limits[0].Key)
		}
	}
	return sides
}

// onSides calls fn for every side at once, each under the store deadline,
// recorded as op and accounted to its node's breaker. It returns how long
// they took together and the Recorder failures met on the way.
func (l *Limiter) onSides(ctx context.Context, sides []*side, op ports.StoreOp, fn func(ctx context.Context, s *side) error) (time.Duration, error) {
	start := l.clock.Now()
	trans := make([]error, len(sides))
	call := func(i int) {
		s := sides[i]
		s.err, trans[i] = l.timedCall(ctx, op, s.node, len(s.limits), func(ctx context.Context) error { return fn(ctx, s) })
	}
	var wg sync.WaitGroup
	for i := 1; i < len(sides); i++ {
		wg.Go(func() { call(i) })
	}
	call(0) // the caller's goroutine makes one of the calls
	wg.Wait()
	return l.clock.Now().Sub(start), errors.Join(trans...)
}

// runSplit decides ev, whose keys span partitions, all or nothing across
// them (see above).
func (l *Limiter) runSplit(ctx context.Context, ev *evaluation, ps *partitionSet) {
	sides := l.sides(ev, ps)
	for _, s := range sides {
		if !l.allowed(s.node) {
			l.degraded(ctx, ev, domain.CauseBreakerOpen, nil)
			return
		}
	}
	ttl := l.cfg.SplitLeaseTTL
	if ev.mode == modeReserve {
		ttl = ev.ttl // the leases are the reservation's
	}
	gen := l.refusals.generation()
	took, terr := l.onSides(ctx, sides, ports.OpReserve, func(ctx context.Context, s *side) (err error) {
		s.res, s.lease, err = l.reserver.Reserve(ctx, ev.now, s.limits, ttl)
		return err
	})
	ev.latency, ev.transErr = took, terr
	var err error
	allowed := true
	for _, s := range sides {
		if s.err != nil {
			err = cmpErr(err, s.err)
		} else if !s.res.Allowed {
			allowed = false
		}
	}
	if err != nil || !allowed {
		took, terr := l.release(ctx, ev, sides)
		ev.latency += took
		ev.transErr = errors.Join(ev.transErr, terr)
	}
	if err != nil {
		l.failed(ctx, ev, err)
		return
	}
	res := joinSides(ev, sides)
	l.fromResult(ev, &res, domain.SourcePrimary)
	if !allowed && !heldRefused(ev, &res) {
		// As exact as a one-call refusal (docs/adr/013): the limiting
		// window refused at ev.now on its own side, and the others hold
		// nothing once released.
		l.refusals.remember(ev, &res, gen)
	}
	if allowed && ev.mode == modeReserve {
		parts := make([]heldPart, len(sides))
		for i, s := range sides {
			parts[i] = ev.part(s.lease, s.node, s.idx)
		}
		ev.held = l.newReservation(ev, l.reserver, true, parts)
	}
}

// cmpErr keeps the first error met.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// release settles at 0 every side that admitted, best effort (a side that
// fails to release counts until its lease expires), under the store
// deadline and whatever the caller's cancellation: what it took is given
// back. Each released side's statuses then read as before the
// reservation, as a refusal's do.
func (l *Limiter) release(ctx context.Context, ev *evaluation, sides []*side) (time.Duration, error) {
	var held []*side
	for _, s := range sides {
		if s.err == nil && s.res.Allowed {
			held = append(held, s)
		}
	}
	if len(held) == 0 {
		return 0, nil
	}
	now := l.clock.Now()
	took, terr := l.onSides(context.WithoutCancel(ctx), held, ports.OpSettle, func(ctx context.Context, s *side) error {
		_, err := l.reserver.Settle(ctx, now, s.lease, s.limits, 0)
		return err
	})
	for _, s := range held {
		st := s.res.Statuses()
		for j := range st {
			lim := &s.limits[j]
			st[j].Remaining = min(st[j].Remaining+lim.Cost, lim.Window.Limit)
		}
	}
	return took, terr
}

// joinSides assembles the sides' statuses in the request's window order
// into one Result.
func joinSides(ev *evaluation, sides []*side) domain.Result {
	var st [domain.MaxLimits]domain.LimitStatus
	for _, s := range sides {
		for j, i := range s.idx {
			st[i] = s.res.Status(j)
		}
	}
	return domain.NewResult(st[:ev.n])
}

// peekSplit peeks ev, whose keys span partitions, on every partition at
// once.
func (l *Limiter) peekSplit(ctx context.Context, ev *evaluation, ps *partitionSet) (domain.Result, error) {
	sides := l.sides(ev, ps)
	for _, s := range sides {
		if !l.allowed(s.node) {
			return domain.Result{}, errBreakerOpen
		}
	}
	took, terr := l.onSides(ctx, sides, ports.OpPeek, func(ctx context.Context, s *side) (err error) {
		s.res, err = l.store.Peek(ctx, ev.now, s.limits)
		return err
	})
	ev.latency = took
	for _, s := range sides {
		if s.err != nil {
			return domain.Result{}, errors.Join(s.err, terr)
		}
	}
	return joinSides(ev, sides), terr
}

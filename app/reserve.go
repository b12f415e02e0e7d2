package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// errNoFallbackReserver fails the degraded local action of a reservation
// when the fallback store cannot reserve: the decision is then denied.
var errNoFallbackReserver = errors.New("sluice: the fallback store cannot reserve (ports.Reserver)")

// Reserving reports whether route's profile decides through
// reservations: it holds a concurrency window, or it has settle rules
// (ProfileConfig.Settle). The HTTP middleware and the gRPC interceptors
// call Reserve for such a route and Evaluate for the others. A route no
// profile limits is not reserving.
func (l *Limiter) Reserving(route string) bool {
	p, err := l.profiles.resolve(route)
	return err == nil && p.reserving
}

// CanReserve reports whether the primary store takes reservations
// (ports.Reserver): only then can a Reservation refund, charge or hold a
// concurrency slot. The doors refuse a cost function on a Limiter that
// cannot.
func (l *Limiter) CanReserve() bool { return l.reserver != nil }

// Reserve decides req as Evaluate does and, when the decision passes,
// returns the Reservation that holds what it took: the cost on every rate
// window and a slot of every concurrency window, under a lease
// (docs/adr/012). The caller settles it once the request is served
// (Finish or Settle); a caller that dies leaves the lease to expire,
// which counts the reserved cost and gives its slots back.
//
// It is Evaluate's pipeline (validation, profile and plan, pseudonyms,
// breaker, store deadline, refusal cache, degraded matrix, Recorder) with
// one ports.Reserver.Reserve call on the primary store in place of
// Evaluate's call, never coalesced. The lease's TTL is the smallest
// period of the request's concurrency windows, else
// Config.ReservationTTL. A request whose keys span partitions reserves
// once per partition, all or nothing (docs/adr/013), and its Reservation
// settles every lease. While the store cannot answer, the degraded
// matrix decides: local reserves on the fallback store (the Reservation
// settles there), bypass passes with a Reservation that holds nothing.
//
// The Reservation is nil exactly when the decision does not pass (it
// blocks the request). A decision that passes without holding anything
// on the primary store (degraded, shadow mode over a refusal, a request
// no window counts) returns a Reservation whose Settle returns
// domain.Settled and whose Renew does nothing. The error is as for
// Evaluate: only a recording failure.
//
// On a primary store that cannot reserve (CanReserve is false; New
// refuses profiles that need reservations there), Reserve decides as
// Evaluate does and its Reservation holds nothing: the cost stays
// counted whatever Settle says.
func (l *Limiter) Reserve(ctx context.Context, req Request) (domain.Decision, *Reservation, error) {
	ctx = l.startDecision(ctx)
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	if l.reserver != nil {
		ev.mode = modeReserve
	}
	if err := l.prepare(ev, req); err != nil {
		ev.reject(err)
	} else {
		l.run(ctx, ev)
	}
	err := l.record(ctx, ev, &req)
	if ev.d.Blocks() {
		return ev.d, nil, err
	}
	r := ev.held
	if r == nil || !ev.d.State.Passes() {
		// Passes without holding: nothing to settle. A shadow decision
		// over a refusal holds nothing either (the store consumed
		// nothing), and one over a split reservation was released.
		r = l.newReservation(ev, nil, false, nil)
	}
	return ev.d, r, err
}

// Reservation is a passing decision's hold on its windows until it is
// settled. Its methods are safe for simultaneous use; settling twice
// settles once.
type Reservation struct {
	l *Limiter
	// store holds the leases; nil when the reservation holds nothing.
	// primary is set when it is the primary store: its calls are then
	// recorded and count for the breaker of their node.
	store   ports.Reserver
	primary bool
	cost    int64
	ttl     time.Duration
	settle  SettleConfig

	mu    sync.Mutex
	parts []heldPart // guarded by mu: Renew moves the leases
	done  bool
	// result is what the Settle that ended it returned.
	result domain.Settlement
}

// heldPart is one lease of a reservation: one per partition its keys
// fall in (docs/adr/013), with the limits it was reserved for.
type heldPart struct {
	lease  domain.Lease
	limits []domain.Limit
	node   string
}

// part copies the limits of ev at idx (every limit when idx is nil) into a
// heldPart: ev goes back to its pool, the Reservation outlives it.
func (ev *evaluation) part(lease domain.Lease, node string, idx []int) heldPart {
	p := heldPart{lease: lease, node: node}
	if idx == nil {
		p.limits = append([]domain.Limit(nil), ev.limits[:ev.n]...)
		return p
	}
	p.limits = make([]domain.Limit, len(idx))
	for j, i := range idx {
		p.limits[j] = ev.limits[i]
	}
	return p
}

// newReservation returns the Reservation of ev's decision, holding parts
// on store (none when store is nil).
func (l *Limiter) newReservation(ev *evaluation, store ports.Reserver, primary bool, parts []heldPart) *Reservation {
	r := &Reservation{l: l, store: store, primary: primary, cost: ev.cost, ttl: ev.ttl, parts: parts}
	if ev.prof != nil {
		r.settle = ev.prof.settle
	}
	if store == nil {
		r.parts = nil
	}
	return r
}

// Outcome is what an entry point learned of the request it served.
type Outcome struct {
	// Failed: the request failed on the server's side (an HTTP 5xx, a
	// gRPC code that is the server's fault).
	Failed bool
	// Cost is the cost the handler reported (in the CostHeader response
	// header or trailer, or through the entry point's cost function),
	// when Reported.
	Cost     int64
	Reported bool
	// Status is the HTTP response's final status, 0 outside HTTP; Code
	// the gRPC status code's name ("NotFound"), "" outside gRPC. The
	// profile's refund_statuses and refund_codes read them.
	Status int
	Code   string
}

// Finish settles the reservation by its profile's settle rules: the
// reported cost when there is one; nothing (a full refund) when the
// request failed and the profile refunds failures, or when its status or
// gRPC code is one the profile refunds; else the cost reserved (which
// keeps the cost and gives the concurrency slots back).
// A reported cost that Settle cannot take (below 0, above
// domain.MaxLimit) settles at the cost reserved, and the error says so.
func (r *Reservation) Finish(ctx context.Context, o Outcome) (domain.Settlement, error) {
	switch {
	case o.Reported:
		if err := domain.ValidateActual(o.Cost); err != nil {
			s, serr := r.Settle(ctx, r.cost)
			return s, errors.Join(fmt.Errorf("sluice: reported cost refused, settled at the cost reserved: %w", err), serr)
		}
		return r.Settle(ctx, o.Cost)
	case r.settle.refunds(o):
		return r.Settle(ctx, 0)
	}
	return r.Settle(ctx, r.cost)
}

// Settle settles the reservation at actual units (ports.Reserver.Settle
// on every lease it holds, under the store deadline): each rate window
// counts actual instead of the cost reserved, and the concurrency slots
// come back. A second Settle changes nothing and returns
// domain.AlreadySettled; a lease that had expired returns domain.Expired.
// A Settle that failed (the store did not answer) may be retried; the
// lease otherwise expires and counts at the cost reserved.
//
// Settle runs under the store deadline whatever ctx's cancellation (ctx's
// values are kept, for tracing): an entry point settles once the response
// is out, often with the request's context, which ends when the client
// goes away, and a request whose client left must still give its slots
// back.
func (r *Reservation) Settle(ctx context.Context, actual int64) (domain.Settlement, error) {
	if err := domain.ValidateActual(actual); err != nil {
		return 0, err
	}
	ctx = context.WithoutCancel(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done && r.result == domain.Settled:
		return domain.AlreadySettled, nil
	case r.done:
		return r.result, nil
	case r.store == nil:
		r.done, r.result = true, domain.Settled
		return domain.Settled, nil
	}
	now := r.l.clock.Now()
	results := make([]domain.Settlement, len(r.parts))
	errs := r.l.eachPart(ctx, r, ports.OpSettle, func(ctx context.Context, i int, p *heldPart) error {
		s, err := r.store.Settle(ctx, now, p.lease, p.limits, actual)
		results[i] = s
		return err
	})
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	r.done, r.result = true, combineSettlements(results)
	return r.result, nil
}

// combineSettlements is the Settlement of a reservation from its leases':
// Settled when one settled, else Expired when one expired.
func combineSettlements(results []domain.Settlement) domain.Settlement {
	out := domain.AlreadySettled
	for _, s := range results {
		switch {
		case s == domain.Settled:
			return domain.Settled
		case s == domain.Expired:
			out = domain.Expired
		}
	}
	return out
}

// Renew extends the lease by its TTL, for a request that outlives it:
// every lease of the reservation expires at now plus the TTL. A
// reservation already settled, or whose lease expired, is not renewed:
// the error wraps domain.ErrLeaseEnded. One that holds nothing renews
// nothing.
func (r *Reservation) Renew(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done:
		return fmt.Errorf("sluice: renew: %w", domain.ErrLeaseEnded)
	case r.store == nil:
		return nil
	}
	now := r.l.clock.Now()
	errs := r.l.eachPart(ctx, r, ports.OpRenew, func(ctx context.Context, _ int, p *heldPart) error {
		lease, err := r.store.Renew(ctx, now, p.lease, p.limits, r.ttl)
		if err == nil {
			p.lease = lease
		}
		return err
	})
	return errors.Join(errs...)
}

// KeepAlive renews the lease every RenewEvery on clock (the Limiter's,
// or a door's that is the same) until the returned stop is called, for an
// entry point whose handler runs: stop returns once no renewal runs. The
// renewals run on a context detached from ctx (a client gone does not end
// a handler that goes on), each bounded by timeout, and end early once
// the lease has ended (domain.ErrLeaseEnded). A renewal that fails is
// tried again at the next tick. With nothing to renew it does nothing.
func (r *Reservation) KeepAlive(ctx context.Context, clock ports.Clock, timeout time.Duration) (stop func()) {
	every := r.RenewEvery()
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			t := clock.NewTimer(every)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			rctx, rcancel := context.WithTimeout(ctx, timeout)
			err := r.Renew(rctx)
			rcancel()
			if errors.Is(err, domain.ErrLeaseEnded) {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// RenewEvery is how often an entry point renews the lease while the
// request runs (a third of its TTL); zero when nothing needs renewing.
func (r *Reservation) RenewEvery() time.Duration {
	if r.store == nil {
		return 0
	}
	return r.ttl / 3
}

// CostHeader is the response header, trailer or gRPC trailer metadata
// key (lower-cased there) in which the handler reports the request's
// cost; "" when the profile reads none.
func (r *Reservation) CostHeader() string { return r.settle.CostHeader }

// Cost is the cost reserved.
func (r *Reservation) Cost() int64 { return r.cost }

// eachPart calls fn on every lease of r, at once when there are several,
// each under the store deadline; calls to the primary store are recorded
// and accounted to their node's breaker (docs/adr/008), and a node whose
// breaker is open is not called. It returns the calls' errors,
// classified.
func (l *Limiter) eachPart(ctx context.Context, r *Reservation, op ports.StoreOp, fn func(ctx context.Context, i int, p *heldPart) error) []error {
	errs := make([]error, len(r.parts))
	call := func(i int) {
		p := &r.parts[i]
		if !r.primary {
			errs[i] = fn(ctx, i, p)
			return
		}
		if !l.allowed(p.node) {
			errs[i] = fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, ErrBreakerOpen)
			return
		}
		err, terr := l.timedCall(ctx, op, p.node, len(p.limits), func(ctx context.Context) error { return fn(ctx, i, p) })
		errs[i] = errors.Join(err, terr)
	}
	if len(r.parts) == 1 {
		call(0)
		return errs
	}
	var wg sync.WaitGroup
	for i := range r.parts {
		wg.Go(func() { call(i) })
	}
	wg.Wait()
	return errs
}

// timedCall makes one call of the primary store (timed) and accounts its
// outcome to node's breaker. It returns the call's error, classified, and
// a Recorder failure met on the way (a health transition the outcome
// caused).
func (l *Limiter) timedCall(ctx context.Context, op ports.StoreOp, node string, keys int, fn func(ctx context.Context) error) (err, transErr error) {
	start, _, err := l.timed(ctx, op, keys, fn)
	return err, l.storeOutcome(ctx, node, start, err)
}

package app

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// CheckWindows decides whether req's windows would admit their costs
// right now, consuming nothing: what the Envoy door answers for a
// descriptor whose hits_addend is 0, a check without hits (docs/adr/011).
// Unlike Peek it is a decision Envoy acts on, so it takes the decision
// path of EvaluateWindows but for what would consume: the store's Peek on
// the node's breaker (its faults count toward it), the degraded matrix
// while the store cannot answer (bypass lets it through under the
// per-instance cap, deny refuses, local checks the fallback store, again
// consuming nothing), and the Recorder; a check whose windows span
// partitions peeks each at once (docs/adr/013). A check that would not be
// admitted is Throttled; Decision.Windows gives each window's remaining before any
// cost. The refusal cache and coalescing are left out: both serve calls
// that consume. The error is as for EvaluateWindows: only a recording
// failure.
func (l *Limiter) CheckWindows(ctx context.Context, req WindowsRequest) (domain.Decision, error) {
	ctx = l.startDecision(ctx)
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	ev.mode = modePeek
	ev.d.Shadow = ev.d.Shadow || req.Shadow
	ev.exactLayers = true
	if err := l.prepareWindows(ev, &req); err != nil {
		ev.reject(err)
	} else {
		l.check(ctx, ev)
	}
	return ev.d, l.record(ctx, ev, &Request{Route: req.RouteKey, ClientIP: req.ClientIP})
}

// check decides a check on the primary store, or through the degraded
// matrix when the breaker of the keys' node is open or the call fails. A
// check whose keys span partitions peeks each at once (docs/adr/013).
func (l *Limiter) check(ctx context.Context, ev *evaluation) {
	if parts := l.partitions(ev); parts.n > 1 {
		l.checkSplit(ctx, ev, &parts)
		return
	}
	node := l.nodeOf(ev)
	if !l.allowed(node) {
		l.degradedCheck(ctx, ev, domain.CauseBreakerOpen, nil)
		return
	}
	res, _, err := l.callStore(ctx, ev, ports.OpPeek)
	ev.transErr = l.storeOutcome(ctx, node, ev.callStart, err)
	if err != nil {
		l.checkFailed(ctx, ev, err)
		return
	}
	l.fromResult(ev, &res, domain.SourcePrimary)
}

// checkSplit peeks every partition of ev at once, each call on its node's
// breaker.
func (l *Limiter) checkSplit(ctx context.Context, ev *evaluation, ps *partitionSet) {
	sides := l.sides(ev, ps)
	for _, s := range sides {
		if !l.allowed(s.node) {
			l.degradedCheck(ctx, ev, domain.CauseBreakerOpen, nil)
			return
		}
	}
	ev.latency, ev.transErr = l.onSides(ctx, sides, ports.OpPeek, func(ctx context.Context, s *side) (err error) {
		s.res, err = l.store.Peek(ctx, ev.now, s.limits)
		return err
	})
	for _, s := range sides {
		if s.err != nil {
			l.checkFailed(ctx, ev, s.err)
			return
		}
	}
	res := joinSides(ev, sides)
	l.fromResult(ev, &res, domain.SourcePrimary)
}

// checkFailed decides a check whose store call failed with err: a shape
// the store refused is RejectedInvalidContext, any other failure goes to
// the degraded matrix.
func (l *Limiter) checkFailed(ctx context.Context, ev *evaluation, err error) {
	var le *domain.LimitError
	if errors.As(err, &le) || errors.Is(err, domain.ErrCrossSlot) {
		ev.d.State, ev.d.Cause, ev.err = domain.RejectedInvalidContext, domain.CauseInvalidLimit, err
		return
	}
	cause, ok := requestFault(err)
	switch {
	case ok:
	case errors.Is(err, domain.ErrStoreTimeout):
		cause = domain.CauseStoreTimeout
	default:
		cause = domain.CauseStoreUnavailable
	}
	l.degradedCheck(ctx, ev, cause, err)
}

// degradedCheck is the degraded matrix for a check: as for a decision
// that consumes, but the local action peeks the fallback store rather than
// counting on it.
func (l *Limiter) degradedCheck(ctx context.Context, ev *evaluation, cause domain.Cause, storeErr error) {
	if ev.action != domain.ActionLocal {
		l.degraded(ctx, ev, cause, storeErr)
		return
	}
	ev.err = storeErr
	res, err := l.fallback.Peek(ctx, ev.now, ev.limits[:ev.n])
	if err != nil {
		ev.err = errors.Join(storeErr, err)
		ev.deny(cause, 0)
	} else {
		l.fromResult(ev, &res, domain.SourceFallback)
		ev.d.Cause = domain.CauseLocalLimit
	}
	ev.d.Degraded = true
	ev.d.SystemState = l.SystemState()
}

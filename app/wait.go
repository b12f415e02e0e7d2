package app

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// minRetry is the shortest sleep between two attempts of Wait. A refusal
// always says when to retry; the floor only keeps a refusal that says
// nothing (a retry-after of zero) from turning Wait into a busy loop
// against the store.
const minRetry = time.Millisecond

// Wait decides req as Evaluate does and, while the decision refuses, sleeps
// until the refusal's retry-after and decides again (docs/adr/010). It
// returns the first decision that passes (it has consumed, exactly as an
// Evaluate that passed) with a nil error, or returns early:
//
//   - ctx ends before a decision passes: the last decision (the zero
//     Decision if none was made) and an error wrapping ctx.Err(). Nothing
//     was consumed: every attempt before was an all-or-nothing refusal.
//   - a refusal's retry instant is not before ctx's deadline: the refusal
//     at once, without sleeping, and an error wrapping
//     context.DeadlineExceeded, since no attempt could pass in time. The
//     deadline is compared with the Limiter's clock.
//   - RejectedInvalidContext: the decision at once, with an error wrapping
//     domain.ErrInvalidContext. Waiting cannot mend a request.
//   - a recording error (Evaluate's error): the decision and the error at
//     once, whatever the decision; observability fails closed.
//
// Each degraded state is handled as its meaning says: BypassDegraded
// passed (the handler may run, under the instance's cap); DeniedDegraded
// is waited out like a refusal, for its Retry-After (at least
// domain.DeniedRetryAfter), then decided again; a Throttled decision of
// the local fallback is a refusal like any other. In shadow mode nothing
// blocks, so Wait returns the first decision.
//
// Wait never overshoots: each attempt is one Evaluate, all or nothing on
// the shared store, so a pass never takes a unit beyond a window's limit.
// It never sleeps past the instant it could pass by more than its timer's
// latency: it sleeps exactly the retry-after the store computed (never a
// fixed polling step; at least 1 ms, a floor against a retry-after of
// zero). Waiters on one key set each retry at their own retry instant and
// race there like any other request: no order among them is promised, and
// a newcomer may take a freed unit first. Wait holds no lock and no store
// state while it sleeps: a waiter that crashes or gives up costs nothing.
// Every attempt is an ordinary recorded decision (a refused attempt is a
// Throttled or DeniedDegraded decision in the metrics).
func (l *Limiter) Wait(ctx context.Context, req Request) (domain.Decision, error) {
	var d domain.Decision
	for {
		if err := ctx.Err(); err != nil {
			return d, fmt.Errorf("sluice: wait ended: %w", err)
		}
		var err error
		d, err = l.Evaluate(ctx, req)
		if err != nil || !d.Blocks() {
			return d, err
		}
		if d.State == domain.RejectedInvalidContext {
			return d, fmt.Errorf("sluice: wait: %w", domain.ErrInvalidContext)
		}
		if err := l.sleep(ctx, max(d.RetryAfter, minRetry)); err != nil {
			return d, err
		}
	}
}

// sleep waits d on the Limiter's clock, or returns at once with an error
// wrapping context.DeadlineExceeded when ctx's deadline comes before d
// ends, or an error wrapping ctx.Err() when ctx ends first.
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	if deadline, ok := ctx.Deadline(); ok && !l.clock.Now().Add(d).Before(deadline) {
		return fmt.Errorf("sluice: wait: retry in %v is past the deadline: %w", d, context.DeadlineExceeded)
	}
	t := l.clock.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return fmt.Errorf("sluice: wait ended: %w", ctx.Err())
	}
}

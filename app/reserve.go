package app

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// CONTRACT (coordinator): the signatures below are the API the entry
// points build on; the wt-app helper replaces every body with the
// implementation (docs/adr/012, docs/adr/013). Nothing here ships as is.

// Reserving reports whether route's profile decides through
// reservations: it holds a concurrency window, or it has settle rules
// (ProfileConfig.Settle). The HTTP middleware and the gRPC interceptors
// call Reserve for such a route and Evaluate for the others.
func (l *Limiter) Reserving(route string) bool { panic("contract") }

// Reserve decides req as Evaluate does and, when the decision passes,
// returns the Reservation that holds what it took: the cost on every rate
// window and a slot of every concurrency window, under a lease
// (docs/adr/012). The caller settles it once the request is served
// (Finish or Settle); a caller that dies leaves the lease to expire,
// which counts the reserved cost and gives its slots back.
//
// The Reservation is nil exactly when the decision does not pass. A
// decision that passes without the primary store (degraded) returns a
// Reservation whose Settle and Renew do nothing on the primary store.
func (l *Limiter) Reserve(ctx context.Context, req Request) (domain.Decision, *Reservation, error) {
	panic("contract")
}

// Reservation is a passing decision's hold on its windows until it is
// settled. Its methods are safe for simultaneous use; settling twice
// settles once.
type Reservation struct{}

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
}

// Finish settles the reservation by its profile's settle rules: the
// reported cost when there is one, nothing (a full refund) when the
// request failed and the profile refunds failures, else the cost
// reserved (which keeps the cost and gives the concurrency slots back).
func (r *Reservation) Finish(ctx context.Context, o Outcome) (domain.Settlement, error) {
	panic("contract")
}

// Settle settles the reservation at actual units (ports.Reserver.Settle).
func (r *Reservation) Settle(ctx context.Context, actual int64) (domain.Settlement, error) {
	panic("contract")
}

// Renew extends the lease by its TTL, for a request that outlives it.
func (r *Reservation) Renew(ctx context.Context) error { panic("contract") }

// RenewEvery is how often an entry point renews the lease while the
// request runs (a third of its TTL); zero when nothing needs renewing.
func (r *Reservation) RenewEvery() time.Duration { panic("contract") }

// CostHeader is the response header, trailer or gRPC trailer metadata
// key (lower-cased there) in which the handler reports the request's
// cost; "" when the profile reads none.
func (r *Reservation) CostHeader() string { panic("contract") }

// Cost is the cost reserved.
func (r *Reservation) Cost() int64 { panic("contract") }

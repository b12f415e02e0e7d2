package httpmw

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Reserver decides through reservations that settle after the response
// (docs/adr/012); *app.Limiter is one. The middleware finds it on its
// Evaluator by type assertion.
//
// For a route that Reserving reports (a profile with a concurrency
// window or settle rules), the middleware calls Reserve instead of
// Evaluate, runs the handler while renewing the lease every
// Reservation.RenewEvery, and when the handler returns (or panics)
// finishes the reservation with what it learned: Failed when the status
// is 5xx or the handler panicked, and the cost the handler reported in the
// Reservation.CostHeader response header or trailer (or through
// WithCost's function). The settlement runs on a context detached from
// the request's, bounded by Config.SettleTimeout, so a client that goes
// away is still settled; a settlement that fails anyway is recorded by
// the Limiter, and the lease expires at its TTL, counting the cost
// reserved (docs/adr/012).
type Reserver interface {
	Evaluator
	Reserving(route string) bool
	CanReserve() bool
	Reserve(ctx context.Context, req app.Request) (domain.Decision, *app.Reservation, error)
}

var _ Reserver = (*app.Limiter)(nil)

// CostFunc reports the cost of a request its handler served: status is the
// final status, h the response header (with any trailers the handler
// set). ok false reports nothing: the reservation settles by its
// profile's rules (a refund on failure when the profile refunds failures,
// else the cost reserved). A cost below 0 or above domain.MaxLimit is
// ignored and audited.
type CostFunc func(r *http.Request, status int, h http.Header) (cost int64, ok bool)

// Option configures the middleware beyond Config.
type Option func(*options)

type options struct {
	cost CostFunc
}

// WithCost makes every route reserve and settle at the cost f reports,
// instead of reading the profile's cost header. New fails when the
// Evaluator is not a Reserver.
func WithCost(f CostFunc) Option { return func(o *options) { o.cost = f } }

// serveReserved runs the handler of a reserved request and settles the
// reservation when it returns, also when it panics (the panic then goes
// on).
func (m *middleware) serveReserved(w http.ResponseWriter, r *http.Request, route string, rsv *app.Reservation) {
	sw := &statusWriter{}
	ww := wrapStatus(w, sw)
	stopRenew := rsv.KeepAlive(r.Context(), m.cfg.Clock, m.cfg.SettleTimeout)
	returned := false
	defer func() {
		stopRenew()
		status := sw.Status()
		o := app.Outcome{Failed: !returned || status >= http.StatusInternalServerError, Status: status}
		o.Cost, o.Reported = m.reportedCost(r, route, status, w.Header(), rsv)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.cfg.SettleTimeout)
		defer cancel()
		// A failure is recorded by the Limiter (a settle store call with
		// its error); the lease then expires at its TTL.
		_, _ = rsv.Finish(ctx, o)
	}()
	m.next.ServeHTTP(ww, r)
	returned = true
}

// reportedCost is the cost the handler reported, through the CostFunc or
// the reservation's cost header (a response header or trailer).
func (m *middleware) reportedCost(r *http.Request, route string, status int, h http.Header, rsv *app.Reservation) (int64, bool) {
	if m.cost != nil {
		c, ok := m.cost(r, status, h)
		if !ok {
			return 0, false
		}
		if domain.ValidateActual(c) != nil {
			m.auditCost(r.Context(), route, "cost function", strconv.FormatInt(c, 10), rsv)
			return 0, false
		}
		return c, true
	}
	name := rsv.CostHeader()
	if name == "" {
		return 0, false
	}
	vals := costValues(h, name)
	if len(vals) == 0 {
		return 0, false
	}
	if len(vals) == 1 {
		if c, ok := domain.ParseCost(vals[0]); ok {
			return c, true
		}
	}
	m.auditCost(r.Context(), route, name, strings.Join(vals, ","), rsv)
	return 0, false
}

// costValues returns the values of the cost header name in h: a header
// (or a trailer declared in the Trailer header, which the handler sets in
// h after writing) and a trailer set under http.TrailerPrefix.
func costValues(h http.Header, name string) []string {
	vals := h.Values(name)
	for k, v := range h {
		if rest, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && strings.EqualFold(rest, name) {
			vals = append(vals, v...)
		}
	}
	return vals
}

// maxAuditedCost bounds the reported value written to the audit log.
const maxAuditedCost = 64

// auditCost records a cost report the middleware ignored.
func (m *middleware) auditCost(ctx context.Context, route, source, value string, rsv *app.Reservation) {
	if len(value) > maxAuditedCost {
		value = value[:maxAuditedCost] + "..."
	}
	m.cfg.AuditLog.LogAttrs(ctx, slog.LevelWarn, "sluice: cost report ignored",
		slog.String("route", route), slog.String("source", source),
		slog.String("value", strconv.Quote(value)), slog.Int64("reserved", rsv.Cost()))
}

package grpcmw

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Reserver decides through reservations that settle after the call
// (docs/adr/012); *app.Limiter is one. The interceptors find it on their
// Evaluator by type assertion.
//
// For a method that Reserving reports (a profile with a concurrency
// window or settle rules), the interceptors call Reserve instead of
// Evaluate, run the handler while renewing the lease every
// Reservation.RenewEvery (a stream holds its concurrency slot until its
// handler returns), and when the handler returns (or panics) finish the
// reservation with what they learned: Failed when the handler's status is
// the server's fault (Internal, Unavailable, DataLoss, Unknown,
// DeadlineExceeded) or it panicked, and the cost the handler reported in
// trailer metadata under Reservation.CostHeader lower-cased (or through
// WithCost's function). The settlement runs on a context detached from
// the call's, bounded by Config.SettleTimeout, so a cancelled call is
// still settled; a settlement that fails anyway is recorded by the
// Limiter, and the lease expires at its TTL, counting the cost reserved
// (docs/adr/012).
type Reserver interface {
	Evaluator
	Reserving(route string) bool
	CanReserve() bool
	Reserve(ctx context.Context, req app.Request) (domain.Decision, *app.Reservation, error)
}

var _ Reserver = (*app.Limiter)(nil)

// CostFunc reports the cost of a call its handler served: err is what the
// handler returned, trailer the trailer metadata it set. ok false reports
// nothing: the reservation settles by its profile's rules (a refund on
// failure when the profile refunds failures, else the cost reserved). A
// cost below 0 or above domain.MaxLimit is ignored and audited.
type CostFunc func(ctx context.Context, fullMethod string, err error, trailer metadata.MD) (cost int64, ok bool)

// Option configures the interceptors beyond Config.
type Option func(*options)

type options struct {
	cost CostFunc
}

// WithCost makes every method reserve and settle at the cost f reports,
// instead of reading the profile's cost trailer. New fails when the
// Evaluator is not a Reserver.
func WithCost(f CostFunc) Option { return func(o *options) { o.cost = f } }

// serverFault reports whether a handler's status is the server's fault:
// a reservation's Outcome.Failed.
// A context error returned as is counts as the server does: canceled or
// deadline exceeded.
func serverFault(err error) bool {
	switch statusOf(err).Code() {
	case codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unknown, codes.DeadlineExceeded:
		return true
	}
	return false
}

// statusOf is the status a handler's error becomes on the wire: its own,
// or a context error's, or Unknown for a plain error; OK for nil.
func statusOf(err error) *status.Status {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return st
}

// unaryReserved runs a reserved unary call's handler and settles the
// reservation when it returns, also when it panics (the panic then goes
// on).
func (i *Interceptors) unaryReserved(ctx context.Context, req any, method string, handler grpc.UnaryHandler, rsv *app.Reservation) (resp any, err error) {
	ctx, tr := captureTrailer(ctx)
	stopRenew := rsv.KeepAlive(ctx, i.cfg.Clock, i.cfg.SettleTimeout)
	returned := false
	defer func() {
		stopRenew()
		i.finish(ctx, method, rsv, err, tr.metadata(), !returned)
	}()
	resp, err = handler(ctx, req)
	returned = true
	return resp, err
}

// streamReserved runs a reserved stream's handler and settles the
// reservation when it returns, also when it panics.
func (i *Interceptors) streamReserved(srv any, ss grpc.ServerStream, method string, handler grpc.StreamHandler, rsv *app.Reservation) (err error) {
	ctx, tr := captureTrailer(ss.Context())
	stopRenew := rsv.KeepAlive(ctx, i.cfg.Clock, i.cfg.SettleTimeout)
	returned := false
	defer func() {
		stopRenew()
		i.finish(ctx, method, rsv, err, tr.metadata(), !returned)
	}()
	err = handler(srv, &trailerStream{ServerStream: ss, ctx: ctx, tr: tr})
	returned = true
	return err
}

// finish settles rsv by what the call's handler did.
func (i *Interceptors) finish(ctx context.Context, method string, rsv *app.Reservation, err error, trailer metadata.MD, panicked bool) {
	o := app.Outcome{Failed: panicked || serverFault(err), Code: statusOf(err).Code().String()}
	o.Cost, o.Reported = i.reportedCost(ctx, method, err, trailer, rsv)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.cfg.SettleTimeout)
	defer cancel()
	// A failure is recorded by the Limiter (a settle store call with its
	// error); the lease then expires at its TTL.
	_, _ = rsv.Finish(sctx, o)
}

// reportedCost is the cost the handler reported, through the CostFunc or
// the reservation's cost trailer.
func (i *Interceptors) reportedCost(ctx context.Context, method string, err error, trailer metadata.MD, rsv *app.Reservation) (int64, bool) {
	if i.cost != nil {
		c, ok := i.cost(ctx, method, err, trailer)
		if !ok {
			return 0, false
		}
		if domain.ValidateActual(c) != nil {
			i.auditCost(ctx, method, "cost function", strconv.FormatInt(c, 10), rsv)
			return 0, false
		}
		return c, true
	}
	key := strings.ToLower(rsv.CostHeader())
	if key == "" {
		return 0, false
	}
	vals := trailer.Get(key)
	if len(vals) == 0 {
		return 0, false
	}
	if len(vals) == 1 {
		if c, ok := domain.ParseCost(vals[0]); ok {
			return c, true
		}
	}
	i.auditCost(ctx, method, key, strings.Join(vals, ","), rsv)
	return 0, false
}

// maxAuditedCost bounds the reported value written to the audit log.
const maxAuditedCost = 64

// auditCost records a cost report the interceptors ignored.
func (i *Interceptors) auditCost(ctx context.Context, method, source, value string, rsv *app.Reservation) {
	if len(value) > maxAuditedCost {
		value = value[:maxAuditedCost] + "..."
	}
	i.cfg.AuditLog.LogAttrs(ctx, slog.LevelWarn, "sluice: cost report ignored",
		slog.String("route", method), slog.String("source", source),
		slog.String("value", strconv.Quote(value)), slog.Int64("reserved", rsv.Cost()))
}

// trailers collects the trailer metadata a handler sets, by
// grpc.SetTrailer on its context or SetTrailer on its stream.
type trailers struct {
	mu sync.Mutex
	md metadata.MD
}

func (t *trailers) add(md metadata.MD) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.md = metadata.Join(t.md, md)
}

func (t *trailers) metadata() metadata.MD {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.md.Copy()
}

// captureTrailer returns ctx with its server transport stream wrapped so
// that the trailers set through grpc.SetTrailer are collected too.
func captureTrailer(ctx context.Context) (context.Context, *trailers) {
	tr := &trailers{}
	if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
		ctx = grpc.NewContextWithServerTransportStream(ctx, &trailerTransport{ServerTransportStream: sts, tr: tr})
	}
	return ctx, tr
}

// trailerTransport is a grpc.ServerTransportStream that collects the
// trailers set on it.
type trailerTransport struct {
	grpc.ServerTransportStream
	tr *trailers
}

// SetTrailer sets md on the call and collects it.
func (t *trailerTransport) SetTrailer(md metadata.MD) error {
	if err := t.ServerTransportStream.SetTrailer(md); err != nil {
		return err
	}
	t.tr.add(md)
	return nil
}

// trailerStream is the stream a reserved stream's handler sees: its
// trailers are collected, and its context carries the collecting
// transport stream.
type trailerStream struct {
	grpc.ServerStream
	ctx context.Context
	tr  *trailers
}

func (s *trailerStream) Context() context.Context { return s.ctx }

// SetTrailer sets md on the stream and collects it.
func (s *trailerStream) SetTrailer(md metadata.MD) {
	s.ServerStream.SetTrailer(md)
	s.tr.add(md)
}

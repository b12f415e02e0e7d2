package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Span names.
const (
	SpanDecision = "sluice.decision"
	// SpanStore is followed by the operation: sluice.store.evaluate...
	SpanStore = "sluice.store."
)

// Span attribute keys. Spans carry the decision's bounded fields, never an
// identifier, an ip or the route.
const (
	AttrState        = attribute.Key("sluice.decision.state")
	AttrCause        = attribute.Key("sluice.decision.cause")
	AttrProfile      = attribute.Key("sluice.route.profile")
	AttrFamily       = attribute.Key("sluice.route.family")
	AttrDimension    = attribute.Key("sluice.limiting.dimension")
	AttrWindow       = attribute.Key("sluice.limiting.window")
	AttrPeriod       = attribute.Key("sluice.limiting.period_ms")
	AttrSystemState  = attribute.Key("sluice.system_state")
	AttrDegraded     = attribute.Key("sluice.degraded")
	AttrSource       = attribute.Key("sluice.source")
	AttrShadow       = attribute.Key("sluice.shadow")
	AttrStoreOp      = attribute.Key("sluice.store.op")
	AttrStoreKeys    = attribute.Key("sluice.store.keys")
	AttrStoreOutcome = attribute.Key("sluice.store.outcome")
)

var storeSpanNames = func() (n [nOps]string) {
	for op := range nOps {
		n[op] = SpanStore + ports.StoreOp(op).String()
	}
	return n
}()

// decisionSpanKey marks the span StartDecision opened, so that
// RecordDecision never ends a span of the caller's.
type decisionSpanKey struct{}

// StartDecision opens the decision's span, a child of the span in ctx
// (the incoming request's, as the HTTP or gRPC instrumentation put it
// there), and returns the context that carries it. Without a
// TracerProvider it returns ctx unchanged.
func (r *Recorder) StartDecision(ctx context.Context) context.Context {
	if r.tracer == nil || r.closed.Load() {
		return ctx
	}
	ctx, span := r.tracer.Start(ctx, SpanDecision)
	return context.WithValue(ctx, decisionSpanKey{}, span)
}

// endDecisionSpan sets the decision's attributes on the span StartDecision
// opened, if any, and ends it.
func endDecisionSpan(ctx context.Context, rec *ports.DecisionRecord) {
	span, ok := ctx.Value(decisionSpanKey{}).(trace.Span)
	if !ok {
		return
	}
	d := &rec.Decision
	span.SetAttributes(
		AttrState.String(d.State.String()),
		AttrCause.String(string(d.Cause)),
		AttrProfile.String(d.Profile),
		AttrFamily.String(d.Family.String()),
		AttrSystemState.String(d.SystemState.String()),
		AttrDegraded.Bool(d.Degraded),
		AttrSource.String(d.Source.String()),
	)
	if d.LimitingWindow != "" {
		span.SetAttributes(
			AttrDimension.String(d.LimitingDimension.String()),
			AttrWindow.String(d.LimitingWindow),
			AttrPeriod.Int64(d.LimitingPeriod.Milliseconds()),
		)
	}
	if d.Shadow {
		span.SetAttributes(AttrShadow.Bool(true))
	}
	if rec.Err != nil {
		span.SetStatus(codes.Error, errorDescription(rec.Err))
	}
	span.End()
}

// storeSpan records a finished store call as a span, from its start to
// its end on the Limiter's clock, and returns the context that carries it,
// so that the latency observation links to it as an exemplar.
func (r *Recorder) storeSpan(ctx context.Context, call *ports.StoreCall) context.Context {
	op := int(call.Op)
	if op >= nOps {
		op = 0
	}
	outcome := outcomeIndex(call.Err)
	ctx, span := r.tracer.Start(ctx, storeSpanNames[op],
		trace.WithTimestamp(call.Start),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			AttrStoreOp.String(call.Op.String()),
			AttrStoreKeys.Int(call.Keys),
			AttrStoreOutcome.String(outcomes[outcome]),
		))
	if call.Err != nil {
		span.SetStatus(codes.Error, errorDescription(call.Err))
	}
	span.End(trace.WithTimestamp(call.Start.Add(call.Latency)))
	return ctx
}

// errorDescription is a span status: the error's stable code, not its
// text, which is for the logs.
func errorDescription(err error) string {
	if code := domain.CodeOf(err); code != "" {
		return string(code)
	}
	return "error"
}

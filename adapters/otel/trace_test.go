package otel_test

import (
	"context"
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// tracedRecorder is a Recorder with tracing on, on a real SDK tracer
// provider whose finished spans a SpanRecorder keeps.
func tracedRecorder(t *testing.T) (*otel.Recorder, *sdktrace.TracerProvider, *tracetest.SpanRecorder, *httptest.Server) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	sink := &logSink{}
	rec, err := otel.New(otel.Config{
		Registry: reg, AppLog: sink.logger(), AuditLog: sink.logger(), InstanceID: "i", TracerProvider: tp,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rec.Close() })
	srv := httptest.NewServer(rec.Handler())
	t.Cleanup(srv.Close)
	return rec, tp, spans, srv
}

// TestTracing follows one decision as the Limiter drives the Recorder:
// StartDecision under the incoming request's span, a store call, then
// RecordDecision. The decision span is the request span's child, the store
// span the decision span's child with the call's own start and end, and
// the latency histogram carries an exemplar pointing at the store span,
// served in the OpenMetrics format.
func TestTracing(t *testing.T) {
	rec, tp, spans, srv := tracedRecorder(t)
	ctx, request := tp.Tracer("test").Start(context.Background(), "GET /api/v1/users/{id}")

	dctx := rec.StartDecision(ctx)
	start := time.Now().Add(-3 * time.Millisecond)
	rec.RecordStoreCall(dctx, ports.StoreCall{Op: ports.OpEvaluate, Start: start, Latency: 2 * time.Millisecond, Keys: 3})
	require.NoError(t, rec.RecordDecision(dctx, ports.DecisionRecord{
		Decision: domain.Decision{
			State: domain.Throttled, Cause: domain.CauseLimitExceeded, Profile: "users_read", Family: domain.FamilyRead,
			LimitingDimension: domain.DimensionUser, LimitingWindow: "burst", LimitingPeriod: time.Second,
			Layer: domain.LayerUser, Source: domain.SourcePrimary,
		},
		TenantID: "5eed", ClientIP: rawIP, Route: "GET /api/v1/users/{id}",
	}))
	request.End()

	ended := spans.Ended()
	require.Len(t, ended, 3)
	store, decision := ended[0], ended[1]
	assert.Equal(t, "sluice.store.evaluate", store.Name())
	assert.Equal(t, otel.SpanDecision, decision.Name())
	assert.Equal(t, request.SpanContext().SpanID(), decision.Parent().SpanID(), "decision under the request's span")
	assert.Equal(t, decision.SpanContext().SpanID(), store.Parent().SpanID(), "store call under the decision")
	assert.Equal(t, request.SpanContext().TraceID(), store.SpanContext().TraceID())
	assert.True(t, store.StartTime().Equal(start))
	assert.True(t, store.EndTime().Equal(start.Add(2*time.Millisecond)))

	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range decision.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	assert.Equal(t, "THROTTLED", attrs[otel.AttrState].AsString())
	assert.Equal(t, "users_read", attrs[otel.AttrProfile].AsString())
	assert.Equal(t, "burst", attrs[otel.AttrWindow].AsString())
	assert.Equal(t, int64(1000), attrs[otel.AttrPeriod].AsInt64())
	for _, s := range []sdktrace.ReadOnlySpan{store, decision} {
		for _, kv := range s.Attributes() {
			v := kv.Value.String()
			for _, raw := range []string{rawIP.String(), "5eed", "/api/v1"} {
				assert.NotContains(t, v, raw, "span %s attribute %s", s.Name(), kv.Key)
			}
		}
	}

	fams := scrape(t, srv.URL, "application/openmetrics-text; version=1.0.0")
	hist := fams["sluice_store_latency_seconds"].GetMetric()[0].GetHistogram()
	var found bool
	for _, b := range hist.GetBucket() {
		ex := b.GetExemplar()
		if ex == nil {
			continue
		}
		found = true
		assert.Equal(t, 0.0025, b.GetUpperBound(), "2 ms lands in the 2.5 ms bucket")
		assert.InDelta(t, 0.002, ex.GetValue(), 1e-9)
		labels := map[string]string{}
		for _, lp := range ex.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		assert.Equal(t, hex.EncodeToString(traceID(store)), labels["trace_id"])
		assert.Equal(t, store.SpanContext().SpanID().String(), labels["span_id"])
	}
	assert.True(t, found, "an exemplar on the latency histogram")
}

func traceID(s sdktrace.ReadOnlySpan) []byte {
	id := s.SpanContext().TraceID()
	return id[:]
}

// TestTracingErrorStatus: a failed store call and its decision carry an
// error status with the stable code, not the error's text.
func TestTracingErrorStatus(t *testing.T) {
	rec, _, spans, _ := tracedRecorder(t)
	ctx := rec.StartDecision(context.Background())
	rec.RecordStoreCall(ctx, ports.StoreCall{Op: ports.OpEvaluate, Start: time.Now(), Latency: time.Millisecond, Err: errOutage})
	require.NoError(t, rec.RecordDecision(ctx, ports.DecisionRecord{
		Decision: domain.Decision{State: domain.DeniedDegraded, Cause: domain.CauseStoreUnavailable, Degraded: true},
		Err:      errOutage,
	}))
	ended := spans.Ended()
	require.Len(t, ended, 2)
	for _, s := range ended {
		assert.Equal(t, codes.Error, s.Status().Code)
		assert.Equal(t, string(domain.CodeStoreUnavailable), s.Status().Description)
		assert.False(t, strings.Contains(s.Status().Description, "outage"))
	}
}

// TestNoTracing: without a TracerProvider, StartDecision hands the
// context back untouched and a span already in it is never ended.
func TestNoTracing(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	sink := &logSink{}
	rec, err := otel.New(otel.Config{Registry: prometheus.NewRegistry(), AppLog: sink.logger(), AuditLog: sink.logger()})
	require.NoError(t, err)
	defer rec.Close()
	assert.True(t, rec.StartDecision(ctx) == ctx)
	require.NoError(t, rec.RecordDecision(ctx, ports.DecisionRecord{Decision: domain.Decision{State: domain.Allowed}}))
	assert.Empty(t, spans.Ended())
	assert.True(t, request.IsRecording(), "the caller's span is the caller's to end")
}

// TestTracingThroughLimiter: the Limiter opens the decision span through
// StartDecision under the request's span and passes it to the store call
// and the decision; the exemplar of the store call is served over HTTP.
func TestTracingThroughLimiter(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t, testConfig(), func(c *otel.Config) { c.TracerProvider = tp })
	ctx, request := tp.Tracer("test").Start(context.Background(), "POST /api/v1/login")
	_, err := e.lim.Evaluate(ctx, app.Request{Route: routeLogin, ClientIP: rawIP})
	require.NoError(t, err)
	request.End()

	ended := spans.Ended()
	require.Len(t, ended, 3)
	store, decision := ended[0], ended[1]
	assert.Equal(t, "sluice.store.evaluate", store.Name())
	assert.Equal(t, otel.SpanDecision, decision.Name())
	assert.Equal(t, request.SpanContext().SpanID(), decision.Parent().SpanID())
	assert.Equal(t, decision.SpanContext().SpanID(), store.Parent().SpanID())
	attrs := map[attribute.Key]string{}
	for _, kv := range decision.Attributes() {
		attrs[kv.Key] = kv.Value.String()
	}
	assert.Equal(t, "ALLOWED", attrs[otel.AttrState])
	assert.Equal(t, "login", attrs[otel.AttrProfile])
	assert.Equal(t, "burst", attrs[otel.AttrWindow])

	fams := scrape(t, e.srv.URL, "application/openmetrics-text; version=1.0.0")
	var exemplars []string
	for _, b := range fams["sluice_store_latency_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		for _, lp := range b.GetExemplar().GetLabel() {
			if lp.GetName() == "span_id" {
				exemplars = append(exemplars, lp.GetValue())
			}
		}
	}
	assert.Equal(t, []string{store.SpanContext().SpanID().String()}, exemplars)
}

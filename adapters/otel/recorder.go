package otel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/sluicehq/sluice/adapters/otel"

// ErrClosed is returned by every Record method after Close: a decision
// that can no longer be recorded is an error for the caller.
var ErrClosed = errors.New("sluice otel: recorder closed")

// Recorder is a ports.Recorder (and ports.DecisionTracer) that exports
// metrics for Prometheus through OpenTelemetry and writes the application
// and security-audit log channels. It is safe for simultaneous use.
type Recorder struct {
	cfg      Config
	provider *sdkmetric.MeterProvider
	gatherer prometheus.Gatherer
	logs     channels
	tracer   trace.Tracer // nil: tracing off
	closed   atomic.Bool

	transitions metric.Int64Counter
	latency     metric.Float64Histogram
	dsets       *decisionSets
	ssets       *storeSets
	tsets       *transitionSets
	tenants     *tenantSeries

	// deadline is the store deadline exported as store_deadline_seconds,
	// in nanoseconds: Config.StoreDeadline until a Limiter says its own
	// (ObserveStoreDeadline).
	deadline atomic.Int64
	// state mirrors the health machine from the transitions recorded; a
	// Limiter starts HEALTHY (and records its move to DEGRADED at once
	// when its store cannot answer at start).
	state atomic.Uint32
	// nodes holds each store node's state (nodes.go).
	nodes nodeStates
}

var (
	_ ports.Recorder         = (*Recorder)(nil)
	_ ports.DecisionTracer   = (*Recorder)(nil)
	_ ports.DeadlineObserver = (*Recorder)(nil)
)

// ObserveStoreDeadline implements ports.DeadlineObserver: app.New calls
// it with the Limiter's store deadline, which store_deadline_seconds
// exports from then on, whatever Config.StoreDeadline said.
func (r *Recorder) ObserveStoreDeadline(d time.Duration) {
	if d > 0 {
		r.deadline.Store(int64(d))
	}
}

// New validates cfg, registers the exporter on cfg.Registry and creates
// the instruments. A bad configuration is a *domain.ConfigError.
func New(cfg Config) (*Recorder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var reg prometheus.Registerer = prometheus.DefaultRegisterer
	r := &Recorder{cfg: cfg, gatherer: prometheus.DefaultGatherer}
	r.deadline.Store(int64(cfg.StoreDeadline))
	if cfg.Registry != nil {
		reg, r.gatherer = cfg.Registry, cfg.Registry
	}
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("sluice otel: prometheus exporter: %w", err)
	}
	// Exemplars need a sampled span in the context; without tracing the
	// filter is off and costs nothing.
	filter := exemplar.AlwaysOffFilter
	if cfg.TracerProvider != nil {
		filter = exemplar.TraceBasedFilter
		r.tracer = cfg.TracerProvider.Tracer(ScopeName)
	}
	r.provider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithExemplarFilter(filter),
		sdkmetric.WithCardinalityLimit(seriesBound(cfg.TenantSeries)))
	r.logs = channels{app: cfg.AppLog.Handler(), audit: cfg.AuditLog.Handler()}
	instance := attribute.String(LabelInstanceID, cfg.InstanceID)
	r.dsets = newDecisionSets(cfg.InstanceID)
	r.ssets = newStoreSets(instance)
	r.tsets = newTransitionSets()
	r.tenants = newTenantSeries(cfg.TenantSeries, cfg.TenantEpoch)
	r.state.Store(uint32(domain.Healthy))
	r.nodes.states = map[string]domain.SystemState{}
	if err := r.instruments(instance); err != nil {
		_ = r.provider.Shutdown(context.Background())
		return nil, fmt.Errorf("sluice otel: instruments: %w", err)
	}
	return r, nil
}

// instruments creates every instrument, and the transitions the health
// machine lists at zero, so that dashboards and alerts see them before the
// first outage.
func (r *Recorder) instruments(instance attribute.KeyValue) error {
	m := r.provider.Meter(ScopeName)
	p := r.cfg.Prefix
	var errs []error
	check := func(err error) { errs = append(errs, err) }
	decisions, err := m.Int64ObservableCounter(p+"decisions",
		metric.WithDescription("Rate limit decisions by state, route profile and family, and cause."))
	check(err)
	rejected, err := m.Int64ObservableCounter(p+"rejected",
		metric.WithDescription("Refused requests (THROTTLED, DENIED_DEGRADED) by tenant pseudonym and dual-layer layer (ADR-002)."))
	check(err)
	r.transitions, err = m.Int64Counter(p+"system_state_changes",
		metric.WithDescription("Transitions of the store health state machine."))
	check(err)
	state, err := m.Int64ObservableGauge(p+"system_state",
		metric.WithDescription("Current store health state: 1 for the state the instance is in, 0 for the others."))
	check(err)
	breaker, err := m.Int64ObservableGauge(p+"breaker_open",
		metric.WithDescription("1 while the breaker is open (store calls skipped), 0 when closed."))
	check(err)
	r.latency, err = m.Float64Histogram(p+"store_latency", metric.WithUnit("s"),
		metric.WithDescription("Latency of primary store calls, by operation and outcome."),
		metric.WithExplicitBucketBoundaries(r.cfg.LatencyBuckets...))
	check(err)
	deadline, err := m.Float64ObservableGauge(p+"store_deadline", metric.WithUnit("s"),
		metric.WithDescription("The configured deadline of one store call."))
	check(err)
	nodeState, err := m.Int64ObservableGauge(p+"node_state",
		metric.WithDescription("Health of each node of the store (a Redis Cluster master): 1 for the state it is in, 0 for the others; its keys skip the store outside HEALTHY."))
	check(err)
	embedded, err := m.Int64ObservableGauge(p+"store_embedded",
		metric.WithDescription("1 when the primary store is the embedded in-process one: each instance counts alone, and a fleet of N admits N times every limit."))
	check(err)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	stateOpts := [nSystemStates]metric.ObserveOption{}
	for s := range nSystemStates {
		stateOpts[s] = metric.WithAttributes(instance, attribute.String(LabelState, domain.SystemState(s).String()))
	}
	instOpt := metric.WithAttributes(instance)
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		cur := domain.SystemState(r.state.Load())
		for s := range nSystemStates {
			o.ObserveInt64(state, boolInt(domain.SystemState(s) == cur), stateOpts[s])
		}
		// The breaker is closed only while HEALTHY.
		o.ObserveInt64(breaker, boolInt(cur != domain.Healthy), instOpt)
		o.ObserveFloat64(deadline, time.Duration(r.deadline.Load()).Seconds(), instOpt)
		o.ObserveInt64(embedded, boolInt(r.cfg.EmbeddedStore), instOpt)
		r.dsets.observe(func(v int64, opts ...metric.ObserveOption) { o.ObserveInt64(decisions, v, opts...) })
		r.tenants.observe(func(v int64, opts ...metric.ObserveOption) { o.ObserveInt64(rejected, v, opts...) })
		r.observeNodes(o, nodeState, instance)
		return nil
	}, decisions, rejected, state, breaker, deadline, nodeState, embedded)
	if err != nil {
		return err
	}
	for _, c := range []domain.StateChange{
		{From: domain.Healthy, To: domain.Degraded}, {From: domain.Degraded, To: domain.Recovering},
		{From: domain.Recovering, To: domain.Healthy}, {From: domain.Recovering, To: domain.Degraded},
	} {
		r.transitions.Add(context.Background(), 0, r.tsets.options(c)...)
	}
	return nil
}

// seriesBound is the most series one instrument can have, given the caps
// on every label; the SDK's cardinality limit (2000 by default, past which
// series merge into an overflow series with another label set) is set
// just above it, so that it never changes the exported labels.
func seriesBound(tenantSeries int) int {
	decisions := (MaxProfiles + 2) * nFamilies * nStates * (len(domain.Causes()) + 1)
	rejected := (max(tenantSeries, 0) + 2) * nLayers
	return max(decisions, rejected) + 1
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// RecordDecision counts the decision in decisions_total, a refusal in
// rejected_total, writes the log channels and ends the decision's span. It
// returns an error when a log channel fails or the Recorder is closed.
func (r *Recorder) RecordDecision(ctx context.Context, rec ports.DecisionRecord) error {
	if r.closed.Load() {
		return ErrClosed
	}
	d := &rec.Decision
	r.dsets.add(d)
	if d.State == domain.Throttled || d.State == domain.DeniedDegraded {
		r.tenants.add(rec.TenantID, d.Layer, r.cfg.Clock.Now())
	}
	if r.tracer != nil {
		endDecisionSpan(ctx, &rec)
	}
	return r.logs.decision(ctx, r.cfg.Clock, &rec)
}

// RecordTransition counts a health transition, updates the state and
// breaker gauges, and writes the application log.
func (r *Recorder) RecordTransition(ctx context.Context, change domain.StateChange, at time.Time) error {
	if r.closed.Load() {
		return ErrClosed
	}
	r.transitions.Add(ctx, 1, r.tsets.options(change)...)
	r.state.Store(uint32(change.To))
	return r.logs.transition(ctx, change, at)
}

// RecordStoreCall observes the call's latency (with an exemplar when the
// call is traced) and, with tracing on, records the call's span.
func (r *Recorder) RecordStoreCall(ctx context.Context, call ports.StoreCall) {
	if r.closed.Load() {
		return
	}
	if r.tracer != nil {
		ctx = r.storeSpan(ctx, &call)
	}
	r.latency.Record(ctx, call.Latency.Seconds(), r.ssets.options(&call)...)
}

// RecordReset writes an administrative reset to both log channels.
func (r *Recorder) RecordReset(ctx context.Context, rec ports.ResetRecord) error {
	if r.closed.Load() {
		return ErrClosed
	}
	return r.logs.reset(ctx, r.cfg.Clock.Now(), &rec)
}

// Handler serves the registry's metrics, in the OpenMetrics format when
// the scraper asks for it: exemplars are only visible there.
func (r *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(r.gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Close flushes nothing (Prometheus pulls) and shuts the meter provider
// down: the metrics disappear from the registry's output, and every later
// Record method returns ErrClosed. Close is idempotent.
func (r *Recorder) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.provider.Shutdown(context.Background())
}

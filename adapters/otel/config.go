package otel

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Defaults applied to zero fields of Config.
const (
	// DefaultPrefix starts every metric name: sluice_decisions_total...
	DefaultPrefix = "sluice_"
	// DefaultTenantSeries is how many tenants get their own
	// rejected_total series.
	DefaultTenantSeries = 100
	// DefaultTenantEpoch is how often the tenants with their own series
	// are chosen again among the most rejected.
	DefaultTenantEpoch = 10 * time.Minute
)

// TenantSeriesOff, as Config.TenantSeries, counts every tenant's
// rejections under tenant_id="(other)": no series per tenant at all.
const TenantSeriesOff = -1

// DefaultLatencyBuckets are the store latency histogram's bucket bounds,
// in seconds: they resolve 100 µs to 50 ms (the default store deadline),
// with a few above it to show how far past the deadline calls run.
var DefaultLatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
}

// Config configures a Recorder. Zero values mean the documented defaults;
// AppLog and AuditLog are required.
type Config struct {
	// Prefix starts every metric name (default "sluice_"). With
	// "hermes_rate_limit_" the ADR-002 series is exactly
	// hermes_rate_limit_rejected_total{tenant_id,layer}. Letters, digits
	// and single underscores, starting with a letter.
	Prefix string
	// InstanceID is the instance_id label: pass app.Config.InstanceID.
	// Default, as in app.Config: the host name.
	InstanceID string
	// Registry receives the metrics; nil means Prometheus' default
	// registry (prometheus.DefaultRegisterer and DefaultGatherer). Register
	// one Recorder per registry and prefix.
	Registry *prometheus.Registry
	// AppLog is the application log channel: no raw ip, identifier or
	// route ever reaches it. Required (slog.DiscardHandler to drop it).
	AppLog *slog.Logger
	// AuditLog is the security-audit channel: it alone receives the raw
	// client ip, on THROTTLED and DENIED_DEGRADED decisions and on
	// administrative resets, and the raw route. Required.
	AuditLog *slog.Logger
	// TenantSeries caps the tenants that get their own rejected_total
	// series (default 100); the others count under tenant_id="(other)".
	// The tenants kept are the most rejected ones of the last
	// TenantEpoch. TenantSeriesOff turns per-tenant series off.
	TenantSeries int
	// TenantEpoch is how often the tenants with their own series are
	// chosen again (default 10 minutes).
	TenantEpoch time.Duration
	// StoreDeadline is exported as store_deadline_seconds, so the alert on
	// the store's p99 compares with the deadline actually configured
	// (default app.DefaultStoreTimeout). A Limiter built on this Recorder
	// replaces it with its own Config.StoreTimeout (ports.DeadlineObserver),
	// so it need not be set.
	StoreDeadline time.Duration
	// LatencyBuckets are the store latency histogram's bucket bounds in
	// seconds, strictly increasing (default DefaultLatencyBuckets).
	LatencyBuckets []float64
	// TracerProvider turns tracing on: a span per decision and per store
	// call, and exemplars on the latency histogram. nil: no tracing.
	TracerProvider trace.TracerProvider
	// Clock stamps log records and paces TenantEpoch; nil means
	// ports.SystemClock. Tests pass ports/fakeclock.
	Clock ports.Clock
	// EmbeddedStore says that the Limiter's primary store is the
	// in-process one (adapters/local): each instance counts alone, so a
	// fleet of N admits N times every limit. store_embedded exports it
	// (1), so that a dashboard shows a service that was meant to share
	// Redis and runs without it.
	EmbeddedStore bool
}

// prefixPattern keeps a prefix that the Prometheus name translation leaves
// as it is: no double underscore, nothing it would escape.
var prefixPattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*(_[a-zA-Z0-9]+)*_?$`)

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.InstanceID == "" {
		c.InstanceID = hostName()
	}
	if c.TenantSeries == 0 {
		c.TenantSeries = DefaultTenantSeries
	}
	if c.TenantEpoch == 0 {
		c.TenantEpoch = DefaultTenantEpoch
	}
	if c.StoreDeadline == 0 {
		c.StoreDeadline = app.DefaultStoreTimeout
	}
	if c.LatencyBuckets == nil {
		c.LatencyBuckets = DefaultLatencyBuckets
	}
	if c.Clock == nil {
		c.Clock = ports.SystemClock{}
	}
	return c
}

// Validate checks a configuration with its defaults applied; every failure
// is a *domain.ConfigError naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field, reason string) error {
		return &domain.ConfigError{Field: "otel." + field, Reason: reason}
	}
	switch {
	case c.AppLog == nil:
		return bad("app_log", "required: the application log channel")
	case c.AuditLog == nil:
		return bad("audit_log", "required: the security-audit log channel")
	case !prefixPattern.MatchString(c.Prefix):
		return bad("prefix", fmt.Sprintf("%q: letters, digits and single underscores, starting with a letter", c.Prefix))
	case len(c.InstanceID) > 128:
		return bad("instance_id", "longer than 128 bytes")
	case c.TenantSeries < TenantSeriesOff:
		return bad("tenant_series", "below -1 (TenantSeriesOff)")
	case c.TenantEpoch < time.Second:
		return bad("tenant_epoch", "below 1s")
	case c.StoreDeadline < 0:
		return bad("store_deadline", "negative")
	}
	for i, b := range c.LatencyBuckets {
		if !(b > 0) || (i > 0 && b <= c.LatencyBuckets[i-1]) {
			return bad("latency_buckets", "bounds must be positive and strictly increasing")
		}
	}
	if len(c.LatencyBuckets) == 0 {
		return bad("latency_buckets", "empty")
	}
	return nil
}

// hostName is the default instance id, as in app.Config.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" && len(h) <= 128 {
		return h
	}
	return "sluice"
}

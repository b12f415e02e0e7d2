package otel_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

var discard = slog.New(slog.DiscardHandler)

// TestConfigRefused: every bad field is a *domain.ConfigError naming it,
// and nothing is registered.
func TestConfigRefused(t *testing.T) {
	ok := otel.Config{AppLog: discard, AuditLog: discard}
	for _, tc := range []struct {
		field  string
		mutate func(*otel.Config)
	}{
		{"otel.app_log", func(c *otel.Config) { c.AppLog = nil }},
		{"otel.audit_log", func(c *otel.Config) { c.AuditLog = nil }},
		{"otel.prefix", func(c *otel.Config) { c.Prefix = "9lives_" }},
		{"otel.prefix", func(c *otel.Config) { c.Prefix = "double__underscore_" }},
		{"otel.prefix", func(c *otel.Config) { c.Prefix = "dotted.name" }},
		{"otel.tenant_series", func(c *otel.Config) { c.TenantSeries = -2 }},
		{"otel.tenant_epoch", func(c *otel.Config) { c.TenantEpoch = 1 }},
		{"otel.store_deadline", func(c *otel.Config) { c.StoreDeadline = -1 }},
		{"otel.latency_buckets", func(c *otel.Config) { c.LatencyBuckets = []float64{0.1, 0.1} }},
		{"otel.latency_buckets", func(c *otel.Config) { c.LatencyBuckets = []float64{-1} }},
		{"otel.latency_buckets", func(c *otel.Config) { c.LatencyBuckets = []float64{} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			cfg := ok
			cfg.Registry = reg
			tc.mutate(&cfg)
			_, err := otel.New(cfg)
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.field, ce.Field)
			assert.ErrorIs(t, err, domain.ErrInvalidConfig)
			fams, gerr := reg.Gather()
			require.NoError(t, gerr)
			assert.Empty(t, fams)
		})
	}
}

// TestPrefixADR002: with the prefix "hermes_rate_limit_" the ADR-002
// series is exactly hermes_rate_limit_rejected_total{tenant_id,layer}.
func TestPrefixADR002(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec, err := otel.New(otel.Config{Prefix: "hermes_rate_limit_", Registry: reg, AppLog: discard, AuditLog: discard, InstanceID: "i"})
	require.NoError(t, err)
	defer rec.Close()
	require.NoError(t, rec.RecordDecision(context.Background(), ports.DecisionRecord{
		TenantID: "7e4a", Decision: domain.Decision{State: domain.Throttled, Layer: domain.LayerTenant, Cause: domain.CauseLimitExceeded},
	}))
	rec.RecordStoreCall(context.Background(), ports.StoreCall{Op: ports.OpEvaluate})
	srv := httptest.NewServer(rec.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL, "")
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{
		"hermes_rate_limit_decisions_total", "hermes_rate_limit_rejected_total",
		"hermes_rate_limit_system_state_changes_total", "hermes_rate_limit_system_state",
		"hermes_rate_limit_breaker_open", "hermes_rate_limit_store_latency_seconds",
		"hermes_rate_limit_store_deadline_seconds", "hermes_rate_limit_store_embedded",
	}, names)
	assert.Equal(t, map[string]float64{"layer=tenant,tenant_id=7e4a": 1}, series(fams["hermes_rate_limit_rejected_total"]))
}

// TestDefaultRegistry: without a Registry the metrics go to Prometheus'
// default registry, and Close takes them out of its output.
func TestDefaultRegistry(t *testing.T) {
	rec, err := otel.New(otel.Config{Prefix: "default_registry_test_", AppLog: discard, AuditLog: discard})
	require.NoError(t, err)
	require.NoError(t, rec.RecordDecision(context.Background(), ports.DecisionRecord{Decision: domain.Decision{State: domain.Allowed}}))
	count := func() int {
		fams, err := prometheus.DefaultGatherer.Gather()
		require.NoError(t, err)
		n := 0
		for _, mf := range fams {
			if mf.GetName() == "default_registry_test_decisions_total" {
				n += len(mf.GetMetric())
			}
		}
		return n
	}
	assert.Equal(t, 1, count())
	require.NoError(t, rec.Close())
	require.NoError(t, rec.Close(), "Close is idempotent")
	assert.Equal(t, 0, count())
}

// TestUnknownValuesBounded: values outside the closed sets (a cause or a
// state a newer domain might add, a flood of profiles) map to "(other)"
// rather than growing the label sets.
func TestUnknownValuesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec, err := otel.New(otel.Config{Registry: reg, AppLog: slog.New(slog.NewTextHandler(io.Discard, nil)), AuditLog: discard, InstanceID: "i"})
	require.NoError(t, err)
	defer rec.Close()
	ctx := context.Background()
	for i := range otel.MaxProfiles + 50 {
		require.NoError(t, rec.RecordDecision(ctx, ports.DecisionRecord{Decision: domain.Decision{
			State: domain.Allowed, Cause: domain.CauseNone, Profile: "p" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Family: domain.FamilyRead,
		}}))
	}
	require.NoError(t, rec.RecordDecision(ctx, ports.DecisionRecord{Decision: domain.Decision{
		State: domain.State(42), Cause: domain.Cause("brand_new"), Profile: "paa", Family: domain.RouteFamily(9),
	}}))
	fams, err := reg.Gather()
	require.NoError(t, err)
	var decisions map[string]float64
	for _, mf := range fams {
		if mf.GetName() == "sluice_decisions_total" {
			decisions = series(mf)
		}
	}
	assert.Len(t, decisions, otel.MaxProfiles+2)
	assert.Equal(t, float64(50), decisions["cause=none,decision_state=ALLOWED,instance_id=i,route_family=read,route_profile=(other)"])
	assert.Equal(t, float64(1), decisions["cause=(other),decision_state=(other),instance_id=i,route_family=(other),route_profile=paa"])
}

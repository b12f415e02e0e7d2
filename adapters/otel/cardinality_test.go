package otel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// TestCardinalityBounded drives 10 000 distinct routes, users, ips and
// tenants through a Limiter (every tenant throttled once) and asserts a
// bounded number of series: routes, users and ips never become labels,
// tenants are capped.
func TestCardinalityBounded(t *testing.T) {
	const n = 10_000
	const tenantSeries = 10
	e := newEnv(t, testConfig(), func(c *otel.Config) {
		c.TenantSeries = tenantSeries
		// Production levels: allowed decisions are not written.
		c.AppLog = slog.New(slog.NewJSONHandler(io.Discard, nil))
		c.AuditLog = c.AppLog
	})
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range n {
		user, tenant := fmt.Sprintf("user-%d@example.org", i), fmt.Sprintf("tenant-%d", i)
		e.decide(t, app.Request{Route: fmt.Sprintf("/api/v1/r%d/items", i), ClientIP: ip(i), User: user})
		e.decide(t, app.Request{Route: routeRead, ClientIP: ip(i), User: user, Tenant: tenant})
		for range 2 { // tenant burst 1: allowed, then throttled
			e.decide(t, app.Request{Route: routeExport, ClientIP: ip(i), Tenant: tenant})
		}
	}
	fams := scrape(t, e.srv.URL, "")
	total := 0
	for _, mf := range fams {
		total += len(mf.GetMetric())
	}
	// decisions: ALLOWED read, ALLOWED costly, THROTTLED costly, REJECTED
	// profile_missing; rejected: ten tenants and "(other)"; 4 transitions,
	// 3 states, breaker, deadline, embedded store, 1 latency series.
	assert.Len(t, fams["sluice_decisions_total"].GetMetric(), 4)
	assert.Len(t, fams["sluice_rejected_total"].GetMetric(), tenantSeries+1)
	assert.Equal(t, 4+(tenantSeries+1)+4+3+1+1+1+1, total)
	assert.Equal(t, float64(n-tenantSeries), series(fams["sluice_rejected_total"])["layer=tenant,tenant_id=(other)"])
}

// TestTenantSeriesTopN: past the cap, rejections count under "(other)";
// at the end of an epoch the slots go to the epoch's most rejected
// tenants, and a tenant that loses its slot loses its series.
func TestTenantSeriesTopN(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := fakeclock.New(t0)
	sink := &logSink{}
	rec, err := otel.New(otel.Config{
		Registry: reg, AppLog: sink.logger(), AuditLog: sink.logger(), Clock: clock,
		TenantSeries: 2, TenantEpoch: time.Minute, InstanceID: "i",
	})
	require.NoError(t, err)
	defer rec.Close()
	reject := func(tenant string, times int) {
		for range times {
			require.NoError(t, rec.RecordDecision(context.Background(), ports.DecisionRecord{
				TenantID: tenant,
				Decision: domain.Decision{State: domain.Throttled, Cause: domain.CauseLimitExceeded, Layer: domain.LayerTenant},
			}))
		}
	}
	rejected := func() map[string]float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range fams {
			if mf.GetName() == "sluice_rejected_total" {
				return series(mf)
			}
		}
		return nil
	}
	reject("aa", 3)
	reject("bb", 1)
	reject("cc", 5) // no slot left
	reject("", 1)
	assert.Equal(t, map[string]float64{
		"layer=tenant,tenant_id=aa": 3, "layer=tenant,tenant_id=bb": 1,
		"layer=tenant,tenant_id=(other)": 5, "layer=tenant,tenant_id=(anonymous)": 1,
	}, rejected())

	clock.Advance(time.Minute)
	reject("dd", 1) // the epoch ends: cc (5) and aa (3) take the slots
	reject("cc", 2)
	assert.Equal(t, map[string]float64{
		"layer=tenant,tenant_id=aa": 3, "layer=tenant,tenant_id=cc": 2,
		"layer=tenant,tenant_id=(other)": 6, "layer=tenant,tenant_id=(anonymous)": 1,
	}, rejected())

	clock.Advance(time.Minute)
	reject("dd", 1) // this epoch: cc 2, dd 1; aa kept no rejection
	assert.Equal(t, map[string]float64{
		"layer=tenant,tenant_id=cc": 2, "layer=tenant,tenant_id=dd": 1,
		"layer=tenant,tenant_id=(other)": 6, "layer=tenant,tenant_id=(anonymous)": 1,
	}, rejected())
}

// TestTenantSeriesOff: every tenant counts under "(other)".
func TestTenantSeriesOff(t *testing.T) {
	e := newEnv(t, testConfig(), func(c *otel.Config) { c.TenantSeries = otel.TenantSeriesOff })
	export := app.Request{Route: routeExport, ClientIP: rawIP, Tenant: rawTenant}
	e.decide(t, export)
	e.decide(t, export)
	assert.Equal(t, map[string]float64{"layer=tenant,tenant_id=(other)": 1},
		series(scrape(t, e.srv.URL, "")["sluice_rejected_total"]))
}

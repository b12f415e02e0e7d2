package app_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// TestParseConfigReservations reads concurrency windows, settle rules,
// the lease TTLs and a plan that changes a concurrency window's limit.
func TestParseConfigReservations(t *testing.T) {
	data, err := os.ReadFile("testdata/reservations.yaml")
	require.NoError(t, err)
	cfg, err := app.ParseConfig(data, withSecret())
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, cfg.ReservationTTL)
	assert.Equal(t, 3*time.Second, cfg.SplitLeaseTTL)
	assert.Equal(t, &app.SettleConfig{RefundFailures: true, CostHeader: "X-Export-Rows"}, cfg.Profiles[0].Settle)
	assert.Equal(t, app.WindowConfig{Name: "inflight", Limit: 4, Period: 2 * time.Minute, Algorithm: domain.Concurrency}, cfg.Profiles[0].Windows.Tenant[1])
	assert.Nil(t, cfg.Profiles[1].Settle)

	def, err := app.ParseConfig([]byte("profiles: []\n"), withSecret())
	require.NoError(t, err)
	assert.Equal(t, app.DefaultReservationTTL, def.ReservationTTL)
	assert.Equal(t, app.DefaultSplitLeaseTTL, def.SplitLeaseTTL)

	// The plan's concurrency limit applies: 16 in flight for acme, 4 for
	// the others; the lease TTL is the window's period.
	r := newReserveRig(t, cfg, newMemReserver(false), nil)
	ctx := context.Background()
	held := func(tenant string) int {
		n := 0
		for range 20 {
			d, res, err := r.l.Reserve(ctx, app.Request{Route: "GET /api/v1/exports", ClientIP: rawIP, Tenant: tenant})
			require.NoError(t, err)
			if res != nil {
				n++
				assert.Equal(t, 40*time.Second, res.RenewEvery())
				assert.Equal(t, "X-Export-Rows", res.CostHeader())
				assert.Equal(t, int64(10), res.Cost())
			} else {
				assert.Equal(t, "inflight", d.LimitingWindow)
			}
		}
		return n
	}
	assert.Equal(t, 16, held("acme"))
	assert.Equal(t, 4, held("globex"))
	assert.True(t, r.l.Reserving("GET /api/v1/reports"), "a concurrency window alone makes a route reserving")
	d := r.eval(t, app.Request{Route: "GET /api/v1/reports", ClientIP: rawIP, User: "u"})
	assert.Equal(t, domain.CauseNoWindow, d.Cause, "Evaluate counts no concurrency window")
}

// TestConfigRefusesBadReservations: each offence is a *domain.ConfigError
// naming its field.
func TestConfigRefusesBadReservations(t *testing.T) {
	conc := func(limit int64, period time.Duration) []app.WindowConfig {
		return []app.WindowConfig{{Name: "inflight", Limit: limit, Period: period, Algorithm: domain.Concurrency}}
	}
	tests := []struct {
		name   string
		mutate func(*app.Config)
		field  string
		reason string
	}{
		{"cost header not a field name", func(c *app.Config) {
			c.Profiles[0].Settle = &app.SettleConfig{CostHeader: "X Cost"}
		}, "profiles[users_read].settle.cost_header", "HTTP field name"},
		{"refund status not an HTTP status", func(c *app.Config) {
			c.Profiles[0].Settle = &app.SettleConfig{RefundStatuses: []int{404, 42}}
		}, "profiles[users_read].settle.refund_statuses[1]", "at least 100"},
		{"refund code not a gRPC code", func(c *app.Config) {
			c.Profiles[0].Settle = &app.SettleConfig{RefundCodes: []string{"NOT_FOUND"}}
		}, "profiles[users_read].settle.refund_codes[0]", "gRPC status code name"},
		{"concurrency limit too large", func(c *app.Config) {
			c.Profiles[0].Windows.User = conc(domain.MaxConcurrencyLimit+1, time.Minute)
		}, "profiles[users_read].windows.user[0].limit", "concurrency window"},
		{"lease TTL too long", func(c *app.Config) {
			c.Profiles[0].Windows.User = conc(2, 25*time.Hour)
		}, "profiles[users_read].windows.user[0].period", "lease TTL"},
		{"a façade window cannot hold slots", func(c *app.Config) {
			c.Facade.User = []app.FacadeWindowConfig{{Name: "inflight", Period: time.Minute, Limit: 2, Algorithm: domain.Concurrency}}
		}, "facade.user[0].algorithm", "concurrency"},
		{"plan raises a concurrency window past its bound", func(c *app.Config) {
			c.Profiles[1].Windows.User = conc(60_000, time.Minute)
			c.Plans = []app.PlanConfig{{Name: "pro", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{"login": {Multiplier: 2}}}}
		}, "plans[pro].profiles.login.windows.user[inflight].limit", "concurrency window"},
		{"reservation TTL too long", func(c *app.Config) {
			c.ReservationTTL = 25 * time.Hour
		}, "reservation_ttl", "at most"},
		{"reservation TTL not whole microseconds", func(c *app.Config) {
			c.ReservationTTL = time.Second + 500*time.Nanosecond
		}, "reservation_ttl", "microseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mutate(&cfg)
			err := cfg.WithDefaults().Validate()
			require.Error(t, err)
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce, "%v", err)
			assert.Equal(t, tt.field, ce.Field, "%v", err)
			assert.Contains(t, ce.Reason, tt.reason, "%v", err)
		})
	}
}

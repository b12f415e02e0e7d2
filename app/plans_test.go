package app_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// planConfig: the login profile (ip burst 3 per 10 s, sustained 10 per
// hour; user burst 3 per second) with a "pro" plan for tenant acme-corp
// (every limit × 10) and an "enterprise" plan for one api key (the user
// burst set to 50).
func planConfig() app.Config {
	cfg := testConfig()
	cfg.Plans = []app.PlanConfig{
		{Name: "pro", Tenants: []string{rawTenant}, Profiles: map[string]app.PlanProfileConfig{"login": {Multiplier: 10}}},
		{Name: "enterprise", APIKeys: []string{rawAPIKey}, Profiles: map[string]app.PlanProfileConfig{
			"login": {Windows: app.PlanWindowsConfig{User: []app.PlanWindowConfig{{Name: "burst", Limit: 50}}}},
		}},
	}
	return cfg
}

func passes(t *testing.T, r *rig, req app.Request, n int) (passed int, last domain.Decision) {
	t.Helper()
	for range n {
		last = r.eval(t, req)
		if last.State == domain.Allowed {
			passed++
		}
	}
	return passed, last
}

func TestPlansScaleLimitsPerTenantAndAPIKey(t *testing.T) {
	r := newRig(t, func(c *app.Config) { *c = planConfig() })
	ip := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, i}) }

	n, d := passes(t, r, app.Request{Route: routeLogin, ClientIP: ip(1), User: "u1", Tenant: "globex"}, 10)
	assert.Equal(t, 3, n, "a tenant without a plan: the profile's burst of 3")
	assert.Empty(t, d.Plan)

	n, d = passes(t, r, app.Request{Route: routeLogin, ClientIP: ip(2), User: "u1", Tenant: " " + rawTenant}, 40)
	assert.Equal(t, 30, n, "pro: every limit × 10, the tenant matched by its normalised raw id")
	assert.Equal(t, "pro", d.Plan, "the decision names its plan")
	assert.Equal(t, int64(30), d.Limit)

	n, d = passes(t, r, app.Request{Route: routeLogin, ClientIP: ip(3), User: "u2", Tenant: rawTenant, APIKey: rawAPIKey}, 40)
	assert.Equal(t, "enterprise", d.Plan, "the api key's plan wins over its tenant's")
	assert.Equal(t, 3, n, "enterprise raised the user burst only; the ip burst of 3 still applies")

	// A profile the plan does not list keeps its own limits.
	d = r.eval(t, app.Request{Route: routeExport, ClientIP: ip(4), User: "u3", Tenant: rawTenant})
	assert.Empty(t, d.Plan)
	assert.Equal(t, int64(2), d.Remaining)

	// The plan's limits are only ever in the store's window definitions:
	// keys are the same as without a plan, and hold no raw identity.
	assertNoRawIdentifier(t, r.store.seen())
}

// TestPlanNeverRemovesALimit: whatever the plan, every window of the
// profile is still checked.
func TestPlanNeverRemovesALimit(t *testing.T) {
	r := newRig(t, func(c *app.Config) { *c = planConfig() })
	d := r.eval(t, app.Request{Route: routeLogin, ClientIP: rawIP, User: "u", Tenant: rawTenant, APIKey: rawAPIKey})
	require.Equal(t, "enterprise", d.Plan)
	assert.Equal(t, 3, d.Windows.Len(), "ip burst, ip sustained, user burst: none removed")
	for _, w := range d.Windows.All() {
		assert.Positive(t, w.Window.Limit)
	}
}

// TestPlanOverrideExample shows a plan in YAML, as a service writes it.
func TestPlanOverrideFromYAML(t *testing.T) {
	y := `
profiles:
  - name: search
    family: read
    routes: ["GET /search"]
    windows:
      tenant: [{name: sustained, limit: 100, period: 1m}]
plans:
  - name: pro
    tenants: [acme]
    profiles:
      search: {multiplier: 10}
`
	cfg, err := app.ParseConfig([]byte(y), withSecret())
	require.NoError(t, err)
	r := newRig(t, func(c *app.Config) { *c = cfg })
	d := r.eval(t, app.Request{Route: "GET /search", ClientIP: rawIP, Tenant: "acme"})
	assert.Equal(t, "pro", d.Plan)
	assert.Equal(t, int64(1000), d.Limit)
	assert.Equal(t, int64(999), d.Remaining)
	r.clock.Advance(time.Second)
	d = r.eval(t, app.Request{Route: "GET /search", ClientIP: rawIP, Tenant: "globex"})
	assert.Equal(t, int64(100), d.Limit)
}

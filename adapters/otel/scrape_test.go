package otel_test

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// tenantPseudonym is what the Limiter makes of rawTenant under testSecret.
func tenantPseudonym(t testing.TB) string {
	t.Helper()
	secret, err := testConfig().SecretBytes()
	require.NoError(t, err)
	p, err := domain.NewPseudonymiser(secret)
	require.NoError(t, err)
	id, err := domain.NormaliseIdentifier(rawTenant)
	require.NoError(t, err)
	return p.Pseudonymise(domain.DimensionTenant, id)
}

// script runs the sequence the scrape and log tests share: allowed and
// throttled requests on each profile (a refusal repeated within its
// retry-after comes from the Limiter's refusal cache, without a store
// call), four invalid contexts, then, a minute later, an outage: the
// first failure is degraded in band, the second opens the breaker, and
// the last two find it open.
func script(t *testing.T, e *env) {
	t.Helper()
	user := app.Request{Route: routeRead, ClientIP: rawIP, User: rawUser, Tenant: rawTenant}
	for range 5 { // user burst 3: 3 allowed, 2 throttled by the user layer
		e.decide(t, user)
	}
	login := app.Request{Route: routeLogin, ClientIP: rawIP}
	for range 3 { // ip burst 2, anonymous
		e.decide(t, login)
	}
	export := app.Request{Route: routeExport, ClientIP: rawIP, Tenant: rawTenant, APIKey: rawAPIKey}
	for range 2 { // tenant burst 1
		e.decide(t, export)
	}
	for _, req := range []app.Request{
		{Route: "not a route", ClientIP: rawIP, User: rawUser},
		{Route: "/api/v1/nowhere", ClientIP: rawIP, User: rawUser},
		{Route: routeRead, User: rawUser}, // no client ip
		{Route: routeRead, ClientIP: rawIP, User: "bad\x00user"},
	} {
		require.Equal(t, domain.RejectedInvalidContext, e.decide(t, req).State)
	}
	e.clock.Advance(time.Minute) // every window and cached refusal has expired
	e.primary.down.Store(true)
	require.Equal(t, domain.BypassDegraded, e.decide(t, user).State)
	require.Equal(t, domain.DeniedDegraded, e.decide(t, login).State) // second failure: breaker opens
	require.True(t, e.lim.BreakerOpen())
	require.Equal(t, domain.DeniedDegraded, e.decide(t, export).State)
	require.Equal(t, domain.BypassDegraded, e.decide(t, user).State)
}

// TestScrapeAfterScript scrapes /metrics over HTTP after the script and
// checks every series of every family, exactly.
func TestScrapeAfterScript(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	script(t, e)
	fams := scrape(t, e.srv.URL, "")

	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{
		"sluice_decisions_total", "sluice_rejected_total", "sluice_system_state_changes_total",
		"sluice_system_state", "sluice_breaker_open", "sluice_store_latency_seconds", "sluice_store_deadline_seconds",
		"sluice_store_embedded",
	}, names, "no scope labels, no target_info, nothing else")

	dec := func(state, profile, family, cause string) string {
		return "cause=" + cause + ",decision_state=" + state + ",instance_id=test-1,route_family=" + family + ",route_profile=" + profile
	}
	assert.Equal(t, map[string]float64{
		dec("ALLOWED", "users_read", "read", "none"):                               3,
		dec("THROTTLED", "users_read", "read", "limit_exceeded"):                   2,
		dec("ALLOWED", "login", "auth", "none"):                                    2,
		dec("THROTTLED", "login", "auth", "limit_exceeded"):                        1,
		dec("ALLOWED", "exports", "costly", "none"):                                1,
		dec("THROTTLED", "exports", "costly", "limit_exceeded"):                    1,
		dec("REJECTED_INVALID_CONTEXT", "(none)", "(none)", "route_invalid"):       1,
		dec("REJECTED_INVALID_CONTEXT", "(none)", "(none)", "profile_missing"):     1,
		dec("REJECTED_INVALID_CONTEXT", "users_read", "read", "ip_unresolved"):     1,
		dec("REJECTED_INVALID_CONTEXT", "users_read", "read", "dimension_invalid"): 1,
		dec("BYPASS_DEGRADED", "users_read", "read", "store_unavailable"):          1,
		dec("DENIED_DEGRADED", "login", "auth", "store_unavailable"):               1,
		dec("DENIED_DEGRADED", "exports", "costly", "breaker_open"):                1,
		dec("BYPASS_DEGRADED", "users_read", "read", "breaker_open"):               1,
	}, series(fams["sluice_decisions_total"]))

	tenant := tenantPseudonym(t)
	assert.Equal(t, map[string]float64{
		"layer=user,tenant_id=" + tenant:   2,
		"layer=tenant,tenant_id=" + tenant: 1,
		"layer=none,tenant_id=" + tenant:   1, // denied degraded: no layer decided
		"layer=none,tenant_id=(anonymous)": 2, // login: throttled by ip, then denied degraded
	}, series(fams["sluice_rejected_total"]))

	assert.Equal(t, map[string]float64{
		"from=HEALTHY,to=DEGRADED":    1,
		"from=DEGRADED,to=RECOVERING": 0,
		"from=RECOVERING,to=HEALTHY":  0,
		"from=RECOVERING,to=DEGRADED": 0,
	}, series(fams["sluice_system_state_changes_total"]))
	assert.Equal(t, map[string]float64{
		"instance_id=test-1,state=HEALTHY":    0,
		"instance_id=test-1,state=DEGRADED":   1,
		"instance_id=test-1,state=RECOVERING": 0,
	}, series(fams["sluice_system_state"]))
	assert.Equal(t, map[string]float64{"instance_id=test-1": 1}, series(fams["sluice_breaker_open"]))
	assert.Equal(t, map[string]float64{"instance_id=test-1": 0.05}, series(fams["sluice_store_deadline_seconds"]))
	// Nine calls answered (4 + 3 + 2: the user's second refusal came from
	// the refusal cache), two failed; invalid contexts and an open breaker
	// call nothing.
	assert.Equal(t, map[string]float64{
		"instance_id=test-1,op=evaluate,outcome=ok":                9,
		"instance_id=test-1,op=evaluate,outcome=store_unavailable": 2,
	}, series(fams["sluice_store_latency_seconds"]))

	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				for _, raw := range []string{rawIP.String(), rawUser, rawTenant, rawAPIKey, "/api/", "nowhere"} {
					assert.NotContains(t, strings.ToLower(v), strings.ToLower(raw), "%s{%s}", mf.GetName(), lp.GetName())
				}
			}
		}
	}
}

// TestStoreLatencyBuckets checks the histogram resolves 100 µs to 50 ms:
// observations land in the buckets their latency names.
func TestStoreLatencyBuckets(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	req := app.Request{Route: routeRead, ClientIP: netip.MustParseAddr("198.51.100.1"), User: "u"}
	e.decide(t, req)
	fams := scrape(t, e.srv.URL, "")
	h := fams["sluice_store_latency_seconds"].GetMetric()[0].GetHistogram()
	var bounds []float64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	assert.Equal(t, []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, math.Inf(1)}, bounds)
	// The fake clock does not move during the call: a zero latency, in
	// the first bucket.
	assert.Equal(t, uint64(1), h.GetBucket()[0].GetCumulativeCount())
}

// TestStoreDeadlineFollowsTheLimiter: a Recorder given no StoreDeadline
// exports the deadline of the Limiter built on it (ports.DeadlineObserver),
// not the default, so the store-latency alert compares with the deadline
// the decisions keep.
func TestStoreDeadlineFollowsTheLimiter(t *testing.T) {
	cfg := testConfig()
	cfg.StoreTimeout = 80 * time.Millisecond
	e := newEnv(t, cfg, func(c *otel.Config) { c.StoreDeadline = 0 })
	fams := scrape(t, e.srv.URL, "")
	assert.Equal(t, map[string]float64{"instance_id=" + cfg.InstanceID: 0.08}, series(fams["sluice_store_deadline_seconds"]))
}

// TestStoreEmbedded: store_embedded says whether the primary store is
// the embedded one (38.3): 1 with Config.EmbeddedStore, 0 without.
func TestStoreEmbedded(t *testing.T) {
	for _, embedded := range []bool{false, true} {
		cfg := testConfig()
		e := newEnv(t, cfg, func(c *otel.Config) { c.EmbeddedStore = embedded })
		fams := scrape(t, e.srv.URL, "")
		want := 0.0
		if embedded {
			want = 1
		}
		assert.Equal(t, map[string]float64{"instance_id=" + cfg.InstanceID: want}, series(fams["sluice_store_embedded"]), "embedded %t", embedded)
	}
}

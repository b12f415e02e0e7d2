package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/boot"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// service is a running service's Limiter, wired as examples/demo and
// sluice-rls wire theirs (internal/boot: the configuration with the
// environment, the stores, the recorder), on the harness' Redis.
type service struct {
	lim  *app.Limiter
	logs *bytes.Buffer
}

func startService(t *testing.T, configFile string, env map[string]string) service {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	data := []byte("{}")
	if configFile != "" {
		var err error
		data, err = os.ReadFile(configFile)
		require.NoError(t, err)
	}
	cfg, _, err := boot.Config(data, false, "")
	require.NoError(t, err)
	// Generous on a loaded machine, as every end-to-end test sets it.
	cfg.StoreTimeout = limitertest.StoreTimeout
	// The service repeats a refusal it just had for at most this long
	// (docs/adr/005): 1 ms, so that it asks Redis again at once after the
	// reset rather than within the default second.
	cfg.RefusalCacheTTL = time.Millisecond
	primary, fallback, _, closeStores, err := boot.Stores(cfg)
	require.NoError(t, err)
	t.Cleanup(closeStores)
	var logs bytes.Buffer
	rec, err := boot.Recorder(cfg, &logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rec.Close() })
	lim, err := boot.Limiter(cfg, primary, fallback, rec, &logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	return service{lim: lim, logs: &logs}
}

// TestResetUnblocksWhatTheDemoRefused is the support desk's "I am
// blocked": the demo refuses a user's exports (100 rows a minute, 10
// reserved per export), peek shows the user blocked, a reset not
// confirmed changes nothing, a confirmed one is written on the audit
// channel with its actor, and the demo admits the user again.
func TestResetUnblocksWhatTheDemoRefused(t *testing.T) {
	env := map[string]string{"REDIS_URL": redistest.StandaloneURL(t), "RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	svc := startService(t, demoConfig, env)
	user := unique("alice") + "@example.org"
	export := app.Request{Route: "POST /api/v1/exports", ClientIP: netip.MustParseAddr("203.0.113.7"), User: user}
	reserve := func() domain.Decision {
		d, _, err := svc.lim.Reserve(t.Context(), export)
		require.NoError(t, err)
		return d
	}
	for i := range 10 {
		require.Equal(t, domain.Allowed, reserve().State, "export %d", i+1)
	}
	require.Equal(t, domain.Throttled, reserve().State, "the 11th export is refused: 100 rows reserved")

	cli := []string{"-config", demoConfig, "-user", user, "-store-timeout", "2s"}
	r := sluice(t, env, "", append([]string{"peek", "-route", "POST /api/v1/exports", "-json"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var peek decisionOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &peek))
	require.Len(t, peek.Windows, 1)
	assert.True(t, *peek.Blocked)
	assert.Equal(t, int64(0), *peek.Windows[0].Remaining)
	assert.Positive(t, *peek.Windows[0].ResetAfterMS)
	assert.NotContains(t, r.stdout, user, "the raw id never reaches the output")

	// Every profile, as a table.
	r = sluice(t, env, "", append([]string{"peek"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "route POST /api/v1/exports: profile exports")
	assert.Contains(t, r.stdout, "BLOCKED")
	assert.Contains(t, r.stdout, "route GET /api/v1/search: profile search")

	// Not confirmed: nothing reset, nothing recorded.
	r = sluice(t, env, "no\n", append([]string{"reset", "-actor", "support-7"}, cli...)...)
	assert.Equal(t, exitNotConfirmed, r.code, r.stderr)
	assert.Contains(t, r.stderr, "Reset the user windows of user")
	assert.NotContains(t, r.stderr, "rate limit reset")
	require.Equal(t, domain.Throttled, reserve().State, "still refused")

	// Confirmed on stdin.
	r = sluice(t, env, "yes\n", append([]string{"reset", "-actor", "support-7"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "recorded on the audit channel")
	audit := auditLine(t, r.stderr)
	assert.Contains(t, audit, "actor=support-7")
	assert.Contains(t, audit, "dimension=user")
	assert.NotContains(t, audit, user, "the audit record names the pseudonym, as Limiter.Reset records it")

	assert.Equal(t, domain.Allowed, reserve().State, "the demo admits the user again")
	r = sluice(t, env, "", append([]string{"peek", "-route", "POST /api/v1/exports", "-json"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &peek))
	assert.False(t, *peek.Blocked)
	assert.Equal(t, int64(90), *peek.Windows[0].Remaining, "one export of 10 rows since the reset")
}

// auditLine returns the security-audit record of a reset in a run's
// stderr.
func auditLine(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "channel=audit") && strings.Contains(l, `msg="rate limit reset"`) {
			return l
		}
	}
	t.Fatalf("no audit record of the reset in:\n%s", stderr)
	return ""
}

// TestResetUnblocksEnvoyDescriptors: the same for sluice-rls: its service
// refuses a tenant's descriptor, peek shows it, reset -yes forgets it and
// the service answers OK again.
func TestResetUnblocksEnvoyDescriptors(t *testing.T) {
	env := map[string]string{"REDIS_URL": redistest.StandaloneURL(t), "RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	svc := startService(t, "", env)
	rlsCfg, err := envoyrls.LoadConfig(envoyDir)
	require.NoError(t, err)
	rls := envoyrls.New(svc.lim, rlsCfg)
	tenant := unique("acme")
	ask := func() rlsv3.RateLimitResponse_Code {
		resp, err := rls.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}},
		}})
		require.NoError(t, err)
		return resp.OverallCode
	}
	require.Equal(t, rlsv3.RateLimitResponse_OK, ask())
	require.Equal(t, rlsv3.RateLimitResponse_OK, ask())
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, ask(), "2 a minute per tenant")

	cli := []string{"-envoy-config", envoyDir, "-domain", "edge", "-descriptor", "tenant=" + tenant, "-store-timeout", "2s"}
	r := sluice(t, env, "", append([]string{"peek", "-json"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var peek decisionOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &peek))
	require.Len(t, peek.Windows, 1)
	assert.True(t, *peek.Blocked)
	assert.Equal(t, int64(0), *peek.Windows[0].Remaining)
	assert.Equal(t, "tenant", peek.Windows[0].Window)

	auditLog := filepath.Join(t.TempDir(), "audit.log")
	r = sluice(t, env, "", append([]string{"reset", "-actor", "support-7", "-yes", "-audit-log", auditLog}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "channel=audit", "-audit-log takes the record")
	logged, err := os.ReadFile(auditLog)
	require.NoError(t, err)
	audit := auditLine(t, string(logged))
	assert.Contains(t, audit, "actor=support-7")
	assert.Contains(t, audit, "dimension=descriptor")
	assert.NotContains(t, audit, tenant)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, ask(), "the service answers OK again")
}

// TestPeekAndResetOnACluster: with REDIS_CLUSTER_ADDRS (and no REDIS_URL)
// peek and reset reach a Redis Cluster; the search route's ip windows
// live in another slot than the tenant's, so the peek spans partitions
// (docs/adr/013).
func TestPeekAndResetOnACluster(t *testing.T) {
	env := map[string]string{"REDIS_CLUSTER_ADDRS": strings.Join(redistest.Cluster(t), ","), "RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	cli := []string{"-config", demoConfig, "-route", "GET /api/v1/search", "-user", unique("carol"), "-tenant", unique("acme"), "-ip", "198.51.100.4", "-store-timeout", "2s"}
	r := sluice(t, env, "", append([]string{"peek", "-json"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var peek decisionOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &peek))
	require.Len(t, peek.Windows, 6)
	slots := map[uint16]bool{}
	for _, w := range peek.Windows {
		slots[w.Slot] = true
		assert.Equal(t, w.Limit, *w.Remaining, "%s/%s: nothing counted", w.Dimension, w.Window)
	}
	assert.Len(t, slots, 2, "the ip's slot and the tenant's")
	r = sluice(t, env, "", append([]string{"reset", "-actor", "support-7", "-yes"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `on profile(s) "search"`, "-route narrows the reset to its profile")
	assert.Contains(t, auditLine(t, r.stderr), "actor=support-7")
}

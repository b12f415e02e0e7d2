package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	assert.Contains(t, r.stdout, "1 of ", "the user's rows window: one key held a count")
	audit := auditLine(t, r.stderr)
	assert.Contains(t, audit, "actor=support-7")
	assert.Contains(t, audit, "dimension=user")
	assert.Equal(t, "1", field(audit, "deleted"))
	for _, rec := range auditRecords(r.stderr) {
		assert.NotContains(t, rec, user, "the audit record names the pseudonym, as Limiter.Reset records it")
	}

	assert.Equal(t, domain.Allowed, reserve().State, "the demo admits the user again")
	r = sluice(t, env, "", append([]string{"peek", "-route", "POST /api/v1/exports", "-json"}, cli...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &peek))
	assert.False(t, *peek.Blocked)
	assert.Equal(t, int64(90), *peek.Windows[0].Remaining, "one export of 10 rows since the reset")
}

// auditLine returns the security-audit record of a reset's outcome in a
// run's stderr, after checking that the record of the reset begun comes
// first, with the same actor.
func auditLine(t *testing.T, stderr string) string {
	t.Helper()
	recs := auditRecords(stderr)
	require.Len(t, recs, 2, "a reset begun and done, in:\n%s", stderr)
	require.Contains(t, recs[0], "phase=begun")
	require.Contains(t, recs[1], "phase=done")
	require.Equal(t, field(recs[0], "actor"), field(recs[1], "actor"))
	return recs[1]
}

// auditRecords are the security-audit records of resets in a run's
// stderr, in order.
func auditRecords(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "channel=audit") && strings.Contains(l, `msg="rate limit reset"`) {
			out = append(out, l)
		}
	}
	return out
}

// field is the value of key=value in a text log line, "" without.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
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
	// Nothing was counted: the reset reaches the cluster, deletes nothing
	// and says so.
	r = sluice(t, env, "", append([]string{"reset", "-actor", "support-7", "-yes"}, cli...)...)
	require.Equal(t, exitNothingReset, r.code, r.stderr)
	assert.Contains(t, r.stdout, `on profile(s) "search": 0 of 3 keys deleted`, "-route narrows the reset to its profile")
	audit := auditLine(t, r.stderr)
	assert.Contains(t, audit, "actor=support-7")
	assert.NotContains(t, audit, "error=", "the store answered")
}

// TestResetSaysWhatItDeletedAndWhere: a reset reports the keys the store
// held and deleted, not those it named. A user counted within a tenant,
// reset without -tenant, or under another secret, deletes nothing: a
// warning and exit status 8, the audit record saying deleted=0. An ip
// reset names its true scope in the question and the audit record: every
// tenant, and for IPv6 the /64 it counts as.
func TestResetSaysWhatItDeletedAndWhere(t *testing.T) {
	secret := newSecret(t)
	env := map[string]string{"REDIS_URL": redistest.StandaloneURL(t), "RATE_LIMIT_HMAC_SECRET": secret}
	svc := startService(t, demoConfig, env)
	user, tenant := unique("dave"), unique("acme")
	search := app.Request{Route: "GET /api/v1/search", ClientIP: netip.MustParseAddr("203.0.113.8"), User: user, Tenant: tenant}
	d, err := svc.lim.Evaluate(t.Context(), search)
	require.NoError(t, err)
	require.Equal(t, domain.Allowed, d.State)

	resetUser := []string{"reset", "-config", demoConfig, "-user", user, "-actor", "support-7", "-yes", "-store-timeout", "2s"}
	t.Run("without the tenant", func(t *testing.T) {
		r := sluice(t, env, "", resetUser...)
		assert.Equal(t, exitNothingReset, r.code, r.stderr)
		assert.Contains(t, r.stdout, "without a tenant")
		assert.Contains(t, r.stdout, ": 0 of ")
		assert.Contains(t, r.stderr, "warning: the reset deleted nothing")
		assert.Contains(t, r.stderr, "-tenant")
		assert.Equal(t, "0", field(auditLine(t, r.stderr), "deleted"))
	})
	t.Run("under another secret", func(t *testing.T) {
		other := map[string]string{"REDIS_URL": env["REDIS_URL"], "RATE_LIMIT_HMAC_SECRET": newSecret(t)}
		r := sluice(t, other, "", append(resetUser, "-tenant", tenant)...)
		assert.Equal(t, exitNothingReset, r.code, r.stderr)
		assert.Contains(t, r.stderr, "RATE_LIMIT_HMAC_SECRET is not the service's secret")
	})
	t.Run("within the tenant", func(t *testing.T) {
		r := sluice(t, env, "", append(resetUser, "-tenant", tenant, "-json")...)
		require.Equal(t, exitOK, r.code, r.stderr)
		var out struct {
			Reset         string
			Keys, Deleted int
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		assert.Contains(t, out.Reset, fmt.Sprintf("in tenant %q", tenant))
		assert.Equal(t, 2, out.Deleted, "the user's burst log and sustained GCRA key on search")
		assert.Greater(t, out.Keys, out.Deleted)
		assert.Equal(t, "2", field(auditLine(t, r.stderr), "deleted"))
		r = sluice(t, env, "", append(resetUser, "-tenant", tenant)...)
		assert.Equal(t, exitNothingReset, r.code, "nothing left to delete: %s", r.stderr)
	})

	t.Run("an IPv6 address across tenants", func(t *testing.T) {
		login := func(ip, tenant string) domain.State {
			d, err := svc.lim.Evaluate(t.Context(), app.Request{Route: "POST /api/v1/login", ClientIP: netip.MustParseAddr(ip), Tenant: tenant})
			require.NoError(t, err)
			return d.State
		}
		t1, t2 := unique("t1"), unique("t2")
		for _, c := range [][2]string{{"2001:db8:7:7::1", t1}, {"2001:db8:7:7::2", t2}, {"2001:db8:7:7::1", t1}} {
			require.Equal(t, domain.Allowed, login(c[0], c[1]))
		}
		require.Equal(t, domain.Throttled, login("2001:db8:7:7::3", unique("t3")), "3 per 10 s per /64, whoever sends")

		cli := []string{"reset", "-config", demoConfig, "-ip", "2001:db8:7:7::9", "-tenant", t1, "-actor", "support-7", "-store-timeout", "2s"}
		r := sluice(t, env, "no\n", cli...)
		require.Equal(t, exitNotConfirmed, r.code, r.stderr)
		assert.Contains(t, r.stderr, "ip 2001:db8:7:7::/64 (the /64 of 2001:db8:7:7::9, counted as one client) in every tenant")
		assert.NotContains(t, r.stderr, "in tenant")
		assert.Empty(t, auditRecords(r.stderr), "not confirmed: nothing recorded")

		r = sluice(t, env, "", append(cli, "-yes")...)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, ": 1 of ", "the /64's login log")
		audit := auditLine(t, r.stderr)
		assert.Equal(t, "2001:db8:7:7::/64", field(audit, "client_prefix"))
		assert.Equal(t, "ip", field(audit, "dimension"))
		assert.Empty(t, field(audit, "tenant_id"), "an ip reset is scoped to no tenant")
		assert.Equal(t, domain.Allowed, login("2001:db8:7:7::3", t2), "every address of the /64, in every tenant")
	})
}

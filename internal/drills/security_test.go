package drills

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// The only shapes of key sluice writes (docs/adr/004): every identifier
// part is a pseudonym, so no raw route, address or identity can be in one.
var (
	profileKeyRE = regexp.MustCompile(`^rl:\{[0-9a-f]{32}\}:(ip|user|apikey|tenant|tenant_global):[0-9a-f]{32}:([a-z0-9_-]{1,64}|__global__):[a-z0-9_-]{1,32}$`)
	facadeKeyRE  = regexp.MustCompile(`^rl:\{[0-9a-f]{32}\}(:(user|key):\{[0-9a-f]{32}\})?(:[a-z0-9_-]{1,32})?$`)
)

// TestNoRawIdentifier runs a mixed load (every flow, invalid contexts,
// the ADR-002 façades, administrative resets, and an outage with its
// degraded decisions) recorded by the production recorder (adapters/otel)
// as well as the drill's, then scans every key in Redis, every exported
// metric (names, labels and values), every application log line, and the
// audit log: no raw identifier, in any of the forms the pipeline sees it,
// may be in any of them, except the raw client ip and the raw route in
// the audit log, and the ip only on refusals and resets. The Recorder's
// records are scanned too, as the application log would write them.
func TestNoRawIdentifier(t *testing.T) {
	obs := newObservability(t)
	r := newRig(t, rigOptions{recorder: obs.rec})
	var ids []string
	var ips []netip.Addr
	for i := range users {
		ids = append(ids, rawUser(i), "Key-"+rawUser(i))
	}
	for i := range tenants {
		ids = append(ids, rawTenant(i))
	}
	for i := range users + clients {
		ips = append(ips, rawIP(i))
	}
	// The actor of a reset is support staff, audited by name: not a
	// client identity.
	ids = append(ids, ledgerUser, "Facade.Tenant-Acme", "Facade.User@Example.COM", "Facade.Key-Secret")
	r.journal.scan = newRawScan(ids, ips)

	flows := append(standardFlows(), flow{name: "invalid", family: domain.FamilyRead, request: func(w, i int) app.Request {
		bad := []app.Request{
			{Route: routeRead, ClientIP: rawIP(w), User: rawUser(w) + "\x00"},
			{Route: "/not a route/" + rawUser(w), ClientIP: rawIP(w), User: rawUser(w)},
			{Route: routeRead, User: rawUser(w), Tenant: rawTenant(w % tenants)},
			{Route: "GET /unknown/{id}", ClientIP: rawIP(w), APIKey: "Key-" + rawUser(w)},
		}
		return bad[i%len(bad)]
	}})
	tr := startTraffic(t, r.lim, 4, flows)
	facade := func() {
		for i := range 20 {
			if _, _, _, err := r.lim.AllowDual("Facade.Tenant-Acme", 100, "Facade.User@Example.COM", 10); err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := r.lim.AllowDual("Facade.Tenant-Acme", 100, app.APIKeyPrefix+"Facade.Key-Secret", 10+i); err != nil {
				t.Fatal(err)
			}
		}
	}
	steady(t, r, time.Second)
	facade()
	reset(t, r.lim, app.ResetRequest{Dimension: domain.DimensionUser, User: rawUser(1), Tenant: rawTenant(1), Actor: "Reset.Actor.Name"})
	reset(t, r.lim, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP(users + 1), Actor: "Reset.Actor.Name"})
	// The outage below empties Redis: scan its keys first.
	keys := sluiceKeys(t, r.srv)
	// An outage: degraded decisions and transitions are recorded too.
	if err := r.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "the breaker open", r.lim.BreakerOpen)
	facade()
	time.Sleep(2 * probeInterval)
	if err := r.srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "HEALTHY after the restart", func() bool { return r.lim.SystemState() == domain.Healthy })
	time.Sleep(2 * probeInterval)
	facade()
	tr.stop()
	tr.checkClean(t)

	scanned, found := r.journal.scan.result()
	if scanned < 1000 {
		t.Errorf("only %d records scanned", scanned)
	}
	for _, f := range found {
		t.Error(f)
	}
	keys = append(keys, sluiceKeys(t, r.srv)...)
	if len(keys) < 100 {
		t.Errorf("only %d keys in Redis after the run", len(keys))
	}
	scan := newRawScan(ids, ips)
	for _, k := range keys {
		if !profileKeyRE.MatchString(k) && !facadeKeyRE.MatchString(k) {
			t.Errorf("key %q is not made of pseudonyms", k)
		}
		scan.look("key", k)
	}
	_, inKeys := scan.result()
	for _, f := range inKeys {
		t.Error(f)
	}
	for _, w := range r.lim.Warnings() {
		scan.look("warning", w)
	}
	metrics, appLines, auditLines := obs.check(t, scan)
	figure(t, "security.scan", "%d decision and reset records, %d Redis keys, %d bytes of metrics, %d application log lines and %d audit log lines scanned for %d raw identities in %d forms: none found",
		scanned, len(keys), metrics, appLines, auditLines, len(ids)+len(ips), len(scan.raws))
}

// reset resets req once the breaker is closed (a store call that missed
// its deadline under load may have opened it).
func reset(t *testing.T, lim *app.Limiter, req app.ResetRequest) {
	t.Helper()
	waitFor(t, settle, "a reset", func() bool {
		_, err := lim.Reset(context.Background(), req)
		if err != nil && !errors.Is(err, app.ErrBreakerOpen) && !errors.Is(err, domain.ErrStoreTimeout) {
			t.Fatal(err)
		}
		return err == nil
	})
}

// TestSecretRotation rotates the HMAC secret: every key changes, so every
// counter starts afresh. During a rolling restart, instances with the old
// and the new secret count on different keys and a client passes its
// limit once per secret; with every limit halved during the roll (the
// runbook's procedure), the client passes its limit once, not twice.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	const newSecret = "00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef"
	rotated := func(c *app.Config) { c.HMACSecret = newSecret }
	halve := func(c *app.Config) {
		for i := range c.Profiles {
			for j := range c.Profiles[i].Windows.User {
				c.Profiles[i].Windows.User[j].Limit /= 2
			}
		}
	}
	old := newRig(t, rigOptions{patient: true})
	user := checkExact(t, old.lim, "Rotated.User@Example.COM")
	before := sluiceKeys(t, old.srv)
	fresh := newRig(t, rigOptions{srv: old.srv, mutate: rotated, instance: "drill-new", patient: true})
	if left := quotaLeft(t, fresh.lim, user); left != quotaLimit {
		t.Fatalf("under the new secret %d of %d reports are left, want a fresh count", left, quotaLimit)
	}
	if n := spread(t, []*rig{fresh}, user, quotaLimit); n != quotaLimit {
		t.Fatalf("under the new secret %d reports passed, want %d", n, quotaLimit)
	}
	if n := len(sluiceKeys(t, old.srv)) - len(before); n < 1 {
		t.Fatalf("the new secret wrote %d new keys for the same user", n)
	}

	// A rolling restart: old and new instances serve one client in turn.
	mixed := []*rig{newRig(t, rigOptions{srv: old.srv, instance: "drill-old-2", patient: true}), newRig(t, rigOptions{srv: old.srv, mutate: rotated, instance: "drill-new-2", patient: true})}
	burst := spread(t, mixed, "Rolling.User@Example.COM", 4*quotaLimit)
	if burst != 2*quotaLimit {
		t.Fatalf("during the roll %d reports passed, want the limit once per secret: %d", burst, 2*quotaLimit)
	}
	// The same roll with every user limit halved first.
	halved := []*rig{
		newRig(t, rigOptions{srv: old.srv, mutate: halve, instance: "drill-old-half", patient: true}),
		newRig(t, rigOptions{srv: old.srv, mutate: func(c *app.Config) { rotated(c); halve(c) }, instance: "drill-new-half", patient: true}),
	}
	calm := spread(t, halved, "Careful.User@Example.COM", 4*quotaLimit)
	if calm != quotaLimit {
		t.Fatalf("during a roll with halved limits %d reports passed, want the limit %d", calm, quotaLimit)
	}
	figure(t, "rotation", "new secret: every counter starts afresh; during a plain roll one client passed %d reports for a limit of %d, during a roll with halved limits %d", burst, quotaLimit, calm)
}

// credentialCases are the ways a service reaches a protected Redis.
var credentialCases = []struct {
	name string
	cfg  redistest.Config
	url  func(*redistest.Server) string
}{
	{"password (redis://:pw@)", redistest.Config{Password: "Drill-Pass-7f3a"}, (*redistest.Server).URL},
	{"ACL user, least privilege (redis://user:pw@)", redistest.Config{Users: []redistest.User{{Name: "sluice", Password: "Drill-Acl-91bc",
		Rules: []string{"~rl:*", "+@all", "-@dangerous", "+info"}}}}, func(s *redistest.Server) string { return s.URLWith("sluice", "Drill-Acl-91bc") }},
	{"TLS (rediss://)", redistest.Config{TLS: true}, (*redistest.Server).URL},
	{"TLS and a password (rediss://:pw@)", redistest.Config{TLS: true, Password: "Drill-Pass-c0de"}, (*redistest.Server).URL},
	{"mutual TLS", redistest.Config{TLS: true, ClientCerts: true}, (*redistest.Server).URL},
}

// TestRedisCredentials boots the Redis store from REDIS_URL forms against
// servers that require a password, an ACL user or TLS, and decides
// through a Limiter on each.
func TestRedisCredentials(t *testing.T) {
	t.Parallel()
	for _, c := range credentialCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.NewServerWith(t, c.cfg)
			store, err := redis.New(redis.Config{URL: c.url(srv), TLS: srv.TLSConfig()})
			if err != nil {
				t.Fatalf("redis.New: %v", err)
			}
			t.Cleanup(func() { _ = store.Close() })
			cfg := drillConfig()
			cfg.RedisMemoryBudgetMB = budgetMB
			cfg.StoreTimeout = patientTimeout
			lim := newLimiterDeps(t, cfg, app.Deps{Store: store, Fallback: newFallback(t), Recorder: recordertest.Discard{},
				Prober: store.Prober(), MemoryCheck: func(ctx context.Context, b int64) ([]string, error) {
					rep, err := store.CheckMaxMemory(ctx, b)
					return rep.Warnings, err
				}})
			if st, err := lim.ProbeOnce(context.Background()); err != nil || st != domain.Healthy {
				t.Fatalf("probe: %s, %v", st, err)
			}
			checkExact(t, lim, "Credentials.User@Example.COM")
			figure(t, "credentials."+figureName(c.name), "decisions exact; boot warnings: %q", lim.Warnings())
		})
	}
}

// TestRedisCredentialsRefused: wrong or missing credentials fail cleanly:
// New returns an error wrapping domain.ErrStoreUnavailable (code
// ERR-STORE-01) that never quotes the password. A TLS handshake that
// fails is an outage to the client: the store boots unconnected (Ready
// says why, as cleanly), every call fails the same way and the Limiter
// degrades.
func TestRedisCredentialsRefused(t *testing.T) {
	t.Parallel()
	const secret = "Drill-Pass-7f3a"
	srv := redistest.NewServerWith(t, redistest.Config{Password: secret})
	tlsSrv := redistest.NewServerWith(t, redistest.Config{TLS: true})
	const wrong = "Not-The-Password-42"
	cases := []struct {
		name string
		cfg  redis.Config
		// credentials: the server refused them, a configuration error at
		// boot in every mode (no outage to boot through).
		credentials bool
	}{
		{"wrong password", redis.Config{URL: srv.URLWith("", wrong)}, true},
		{"no password", redis.Config{URL: strings.Replace(srv.URL(), ":"+secret+"@", "", 1)}, true},
		{"unknown user", redis.Config{URL: srv.URLWith("nobody", wrong)}, true},
		{"TLS without the server's CA", redis.Config{URL: tlsSrv.URL()}, false},
		{"clear text to a TLS server", redis.Config{URL: strings.Replace(tlsSrv.URL(), "rediss://", "redis://", 1)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A TLS handshake that fails on a loaded machine may take
			// longer than the store's 50 ms: the refusal is what is
			// tested here, not the speed.
			c.cfg.DialTimeout, c.cfg.Timeout = time.Second, time.Second
			if c.credentials {
				for _, mode := range []redis.Mode{redis.ModeAuto, redis.ModeStandalone} {
					c.cfg.Mode = mode
					_, err := redis.New(c.cfg)
					var ce *domain.ConfigError
					if !errors.As(err, &ce) || ce.Field != "redis.url" {
						t.Fatalf("%s: refused credentials: %v, want a *domain.ConfigError on redis.url", mode, err)
					}
					if !errors.Is(err, domain.ErrStoreUnavailable) {
						t.Errorf("%s: %v does not wrap domain.ErrStoreUnavailable", mode, err)
					}
					for _, s := range []string{wrong, secret} {
						if strings.Contains(fmt.Sprint(err), s) {
							t.Errorf("the error prints a password: %v", err)
						}
					}
					figure(t, "refused."+figureName(t.Name())+"."+mode.String(), "%v", err)
				}
				return
			}
			// No Redis answers the client: an outage to it, which a
			// service boots through (issue 38) in every mode, unconnected,
			// Ready saying why.
			store, err := redis.New(c.cfg)
			if err != nil {
				t.Fatalf("New: %v; want a store, unconnected", err)
			}
			t.Cleanup(func() { _ = store.Close() })
			checkRefusal(t, store.Ready(), wrong, secret)
			_, err = store.Evaluate(context.Background(), time.Now(), []domain.Limit{{Key: "rl:{x}:probe", Window: domain.Window{Name: "w", Limit: 1, Period: time.Second}, Cost: 1}})
			checkRefusal(t, err, wrong, secret)
			lim := newLimiterDeps(t, drillConfig(), app.Deps{Store: store, Fallback: newFallback(t), Recorder: recordertest.Discard{}, Prober: store.Prober()})
			// A probe round whose miss fell in a stall of this process is
			// inconclusive (docs/adr/008): on a loaded machine the first
			// round may prove nothing, a later one must.
			var st domain.SystemState
			for range 10 {
				if st, _ = lim.ProbeOnce(context.Background()); st == domain.Degraded {
					break
				}
			}
			if st != domain.Degraded {
				t.Errorf("after ten refused probes the Limiter is %s", st)
			}
			if d := decide(t, lim, app.Request{Route: routeLogin, ClientIP: rawIP(0)}); d.State != domain.DeniedDegraded {
				t.Errorf("login with Redis refusing the credentials: %s", d.State)
			}
		})
	}
}

// checkRefusal asserts a clean, typed refusal that does not print the
// passwords.
func checkRefusal(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, domain.ErrStoreUnavailable) || domain.CodeOf(err) != domain.CodeStoreUnavailable {
		t.Errorf("err %v does not wrap domain.ErrStoreUnavailable (%s)", err, domain.CodeStoreUnavailable)
	}
	for _, s := range secrets {
		if strings.Contains(fmt.Sprint(err), s) {
			t.Errorf("the error prints a password: %v", err)
		}
	}
	figure(t, "refused."+figureName(t.Name()), "%v", err)
}

// TestMalformedRedisURLKeepsThePasswordOut: a REDIS_URL that does not
// parse is refused at boot with a *domain.ConfigError, which goes to the
// boot log; the password it carries must not (the URL parser's own
// message quotes the whole URL).
func TestMalformedRedisURLKeepsThePasswordOut(t *testing.T) {
	t.Parallel()
	const secret = "S3cret-Drill-Pw"
	for _, u := range []string{
		"redis://:" + secret + "@127.0.0.1:notaport",
		"redis://sluice:" + secret + "@bad host:6379",
		"rediss://:" + secret + "@127.0.0.1:6379/notadb",
	} {
		_, err := redis.New(redis.Config{URL: u})
		var ce *domain.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("redis.New(malformed URL): %v, want a *domain.ConfigError", err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the boot error prints the Redis password: %v", err)
		}
	}
}

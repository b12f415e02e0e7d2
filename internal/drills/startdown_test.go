package drills

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// startDownConfig is a service's configuration, with probes every few
// tens of milliseconds so that a recovery takes a fraction of a second.
const startDownConfig = `
store_timeout: 250ms
probe_interval: 250ms
probe_timeout: 250ms
recovery_probe_interval: 20ms
profiles:
  - name: search
    family: read
    routes: ["GET /search"]
    windows:
      ip: [{name: burst, limit: 100, period: 1s}]
  - name: login
    family: auth
    routes: ["POST /login"]
    windows:
      ip: [{name: burst, limit: 100, period: 1s}]
`

// TestLimiterStartsDuringARedisOutage is issue 38 item 1's drill for a
// service that embeds sluice, wired as the README's "Wiring a Limiter"
// shows (app.LoadConfig's REDIS_URL, redis.New on it, the local fallback,
// the otel recorder), started while its Redis is down on a port chosen
// before: nothing fails (no crash loop), the Limiter starts DEGRADED on
// its state and metrics and decides by the degraded matrix, and once
// Redis starts the health loop finds it and the Limiter recovers to
// HEALTHY, decided by Redis. The password in REDIS_URL reaches no log
// line, even with the Config logged.
func TestLimiterStartsDuringARedisOutage(t *testing.T) {
	const password = "drill-pw-5e6f7a"
	srv := redistest.NewServerWith(t, redistest.Config{Stopped: true, Password: password})
	cfg, err := app.ParseConfig([]byte(startDownConfig), func(k string) (string, bool) {
		switch k {
		case app.EnvRedisURL:
			return srv.URL(), true
		case app.EnvHMACSecret:
			return drillSecret, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	appLog := slog.New(slog.NewTextHandler(logs, nil))

	primary, err := redis.New(redis.Config{URL: cfg.RedisURL})
	if err != nil {
		t.Fatalf("redis.New while Redis is down: %v", err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	fallback, err := local.New(local.Config{MaxMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fallback.Close() })
	rec, err := otel.New(otel.Config{InstanceID: cfg.InstanceID, Registry: prometheus.NewRegistry(),
		AppLog: appLog, AuditLog: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	lim, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: rec})
	if err != nil {
		t.Fatalf("app.New while Redis is down: %v", err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	appLog.Info("boot", "config", cfg, "store", primary.Ready())

	if st := lim.SystemState(); st != domain.Degraded {
		t.Fatalf("started %s while Redis is down, want DEGRADED", st)
	}
	metrics := scrapeMetrics(t, rec)
	for _, want := range []string{
		`(?m)^sluice_system_state\{[^}]*state="DEGRADED"[^}]*\} 1$`,
		`(?m)^sluice_system_state_changes_total\{from="HEALTHY"[^}]*to="DEGRADED"[^}]*\} 1$`,
	} {
		if !regexp.MustCompile(want).MatchString(metrics) {
			t.Errorf("metrics lack %s", want)
		}
	}
	ip := netip.MustParseAddr("198.51.100.7")
	decide := func(route string) domain.Decision {
		t.Helper()
		d, err := lim.Evaluate(context.Background(), app.Request{Route: route, ClientIP: ip})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide("GET /search"); d.State != domain.BypassDegraded || !d.Degraded {
		t.Errorf("a read while Redis is down: %s (degraded %t), want BYPASS_DEGRADED", d.State, d.Degraded)
	}
	if d := decide("POST /login"); d.State != domain.DeniedDegraded {
		t.Errorf("a login while Redis is down: %s, want DENIED_DEGRADED", d.State)
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for lim.SystemState() != domain.Healthy {
		if time.Now().After(deadline) {
			t.Fatalf("still %s 30 s after Redis started (store: %v)", lim.SystemState(), primary.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := decide("POST /login"); d.State != domain.Allowed || d.Source != domain.SourcePrimary {
		t.Errorf("a login once recovered: %s from %v, want ALLOWED from Redis", d.State, d.Source)
	}
	if keys, err := srv.Do(t.Context(), "DBSIZE"); err != nil || keys.(int64) == 0 {
		t.Errorf("DBSIZE %v, %v: the decision did not reach Redis", keys, err)
	}
	if !regexp.MustCompile(`(?m)^sluice_system_state\{[^}]*state="HEALTHY"[^}]*\} 1$`).MatchString(scrapeMetrics(t, rec)) {
		t.Error("sluice_system_state does not say HEALTHY")
	}
	if strings.Contains(strings.Join(logs.lines(), "\n"), password) {
		t.Error("the Redis password reached the application log")
	}
}

// scrapeMetrics reads what rec's handler serves.
func scrapeMetrics(t *testing.T, rec *otel.Recorder) string {
	t.Helper()
	w := httptest.NewRecorder()
	rec.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

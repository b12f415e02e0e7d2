package otel_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Wiring the recorder into app.New and serving /metrics. The README shows
// the same code.
func Example() {
	cfg := app.Config{
		HMACSecret: testSecret, // from RATE_LIMIT_HMAC_SECRET in production
		InstanceID: "api-1",
		Profiles: []app.ProfileConfig{{
			Name: "login", Family: domain.FamilyAuth, Routes: []string{"POST /login"},
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "burst", Limit: 2, Period: time.Second}}},
		}},
	}.WithDefaults()

	var audit bytes.Buffer // a file only security staff can read, in production
	registry := prometheus.NewRegistry()
	rec, err := otel.New(otel.Config{
		InstanceID:    cfg.InstanceID,
		StoreDeadline: cfg.StoreTimeout,
		Registry:      registry,
		AppLog:        slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AuditLog:      slog.New(slog.NewJSONHandler(&audit, nil)),
	})
	if err != nil {
		panic(err) // *domain.ConfigError
	}
	defer rec.Close()

	store, _ := local.New(local.Config{}) // Redis in production
	fallback, _ := local.New(local.Config{})
	defer store.Close()
	defer fallback.Close()
	lim, err := app.New(cfg, app.Deps{Store: store, Fallback: fallback, Recorder: rec})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", rec.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ip := netip.MustParseAddr("203.0.113.7")
	for range 3 {
		if _, err := lim.Evaluate(context.Background(), app.Request{Route: "POST /login", ClientIP: ip}); err != nil {
			panic(err) // the recorder failed: observability fails closed
		}
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "sluice_decisions_total") || strings.HasPrefix(line, "sluice_rejected_total") {
			fmt.Println(line)
		}
	}
	fmt.Println("audit records with the client ip:", strings.Count(audit.String(), `"client_ip":"203.0.113.7"`))
	// Output:
	// sluice_decisions_total{cause="limit_exceeded",decision_state="THROTTLED",instance_id="api-1",route_family="auth",route_profile="login"} 1
	// sluice_decisions_total{cause="none",decision_state="ALLOWED",instance_id="api-1",route_family="auth",route_profile="login"} 2
	// sluice_rejected_total{layer="none",tenant_id="(anonymous)"} 1
	// audit records with the client ip: 1
}

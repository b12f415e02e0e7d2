package httpmw_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// benchLimiter limits one route on the local store with limits no
// benchmark reaches: every decision is an Allowed one. settle, when
// given, makes the route reserve and settle.
func benchLimiter(b *testing.B, settle ...*app.SettleConfig) *app.Limiter {
	cfg := testConfig(b)
	huge := app.WindowConfig{Name: "burst", Limit: domain.MaxLimit, Period: time.Hour, Algorithm: domain.GCRA}
	cfg.Profiles = []app.ProfileConfig{{
		Name: "items", Family: domain.FamilyRead, Routes: []string{"GET /api/v1/items/{id}"},
		Windows: app.WindowsConfig{IP: []app.WindowConfig{huge}, User: []app.WindowConfig{huge}, Tenant: []app.WindowConfig{huge}},
	}}
	if len(settle) > 0 {
		cfg.Profiles[0].Settle = settle[0]
	}
	return newLimiter(b, cfg, newLocal(b), recordertest.Discard{})
}

// BenchmarkEvaluate is the baseline: the Limiter alone, on the request the
// middleware builds.
func BenchmarkEvaluate(b *testing.B) {
	lim := benchLimiter(b)
	req := app.Request{Route: "GET /api/v1/items/{id}", ClientIP: netip.MustParseAddr("203.0.113.7"), User: "alice", Tenant: "acme"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Evaluate(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiddleware is the same decision through the middleware wrapped
// around a ServeMux (route lookup, client address, identity, headers),
// without the network: its cost over BenchmarkEvaluate is the
// middleware's.
func BenchmarkMiddleware(b *testing.B) {
	mux := httpmw.NewServeMux()
	mux.HandleFunc("GET /api/v1/items/{id}", func(http.ResponseWriter, *http.Request) {})
	mw, err := httpmw.New(benchLimiter(b), httpmw.Config{Route: mux.Route(), Identity: identityFromHeaders})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(mux)
	req := httptest.NewRequest("GET", "/api/v1/items/42", nil)
	req.RemoteAddr = "203.0.113.7:50000"
	req.Header.Set(headerUser, "alice")
	req.Header.Set(headerTenant, "acme")
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkMiddlewareReserved is BenchmarkMiddleware on a route that
// settles (the same windows, settle rules with a cost header the handler
// sets): a Reserve before the handler and a Settle after it, on the local
// store. Its cost over BenchmarkMiddleware is the reservation's.
func BenchmarkMiddlewareReserved(b *testing.B) {
	lim := benchLimiter(b, &app.SettleConfig{RefundFailures: true, CostHeader: "X-Cost"})
	mux := httpmw.NewServeMux()
	mux.HandleFunc("GET /api/v1/items/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Cost", "0")
	})
	mw, err := httpmw.New(lim, httpmw.Config{Route: mux.Route(), Identity: identityFromHeaders})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(mux)
	req := httptest.NewRequest("GET", "/api/v1/items/42", nil)
	req.RemoteAddr = "203.0.113.7:50000"
	req.Header.Set(headerUser, "alice")
	req.Header.Set(headerTenant, "acme")
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}

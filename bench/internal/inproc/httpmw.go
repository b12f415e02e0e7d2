package inproc

import (
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/suite"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// httpRoute is the route the HTTP benchmark's profile limits.
const httpRoute = "GET /api/v1/items/{id}"

// Headers the benchmark's stand-in authentication reads.
const (
	headerUser   = "X-Bench-User"
	headerTenant = "X-Bench-Tenant"
)

// httpOp is one request through the HTTP middleware, wrapped around a
// ServeMux, on a Limiter whose primary store is the local store: route
// lookup, client address, identity, context checks, pseudonyms, the
// decision on three windows (ip, user, tenant), the rate-limit headers and
// the recording, by the production Recorder (adapters/otel: metrics for
// Prometheus, log channels to slog.DiscardHandler) when withOtel is set,
// else by one that discards everything. The requests rotate over
// NineKeyClients authenticated clients; the response writer is reused, so
// that what is measured is the middleware, not a recorder of responses.
func httpOp(withOtel bool) func(b *testing.B) func(i int) {
	return func(b *testing.B) func(i int) { return newHTTPOp(b, withOtel) }
}

func newHTTPOp(b *testing.B, withOtel bool) func(i int) {
	var rec ports.Recorder = recordertest.Discard{}
	if withOtel {
		discard := slog.New(slog.DiscardHandler)
		r, err := otel.New(otel.Config{InstanceID: "sluicebench", Registry: prometheus.NewRegistry(), AppLog: discard, AuditLog: discard})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Close() })
		rec = r
	}
	primary, err := local.New(local.Config{})
	if err != nil {
		b.Fatal(err)
	}
	fallback, err := local.New(local.Config{})
	if err != nil {
		b.Fatal(err)
	}
	w := app.WindowConfig{Name: gcra.Name, Limit: gcra.Limit, Period: gcra.Period, Algorithm: domain.GCRA}
	cfg := app.Config{
		HMACSecret: suite.Secret,
		InstanceID: "sluicebench",
		Profiles: []app.ProfileConfig{{Name: "items", Family: domain.FamilyRead, Routes: []string{httpRoute},
			Windows: app.WindowsConfig{IP: []app.WindowConfig{w}, User: []app.WindowConfig{w}, Tenant: []app.WindowConfig{w}}}},
	}
	lim, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: rec})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		lim.Close()
		primary.Close()
		fallback.Close()
	})
	mux := httpmw.NewServeMux()
	mux.HandleFunc(httpRoute, func(http.ResponseWriter, *http.Request) {})
	mw, err := httpmw.New(lim, httpmw.Config{Route: mux.Route(), Identity: func(r *http.Request) httpmw.Identity {
		return httpmw.Identity{User: r.Header.Get(headerUser), Tenant: r.Header.Get(headerTenant)}
	}})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(mux)
	p := population(b)
	reqs := make([]*http.Request, NineKeyClients)
	for i := range reqs {
		id := &p.Clients[i]
		r, err := http.NewRequest(http.MethodGet, "http://api.example/api/v1/items/42", nil)
		if err != nil {
			b.Fatal(err)
		}
		r.RemoteAddr = id.IP.String() + ":50000"
		r.Header.Set(headerUser, id.User)
		r.Header.Set(headerTenant, id.Tenant)
		reqs[i] = r
	}
	return func(i int) {
		rw := responseWriters.Get().(*responseWriter)
		clear(rw.h)
		rw.code = 0
		h.ServeHTTP(rw, reqs[i%len(reqs)])
		if rw.code != 0 && rw.code != http.StatusOK {
			b.Fatalf("status %d", rw.code)
		}
		responseWriters.Put(rw)
	}
}

// responseWriter is a reusable http.ResponseWriter that keeps the headers
// and the status, and discards the body.
type responseWriter struct {
	h    http.Header
	code int
}

func (w *responseWriter) Header() http.Header { return w.h }

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}

func (w *responseWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// responseWriters keeps one writer per goroutine in use.
var responseWriters = sync.Pool{New: func() any { return &responseWriter{h: http.Header{}} }}

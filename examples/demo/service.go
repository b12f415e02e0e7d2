package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/adapters/grpcmw"
	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/boot"
	"github.com/sluicehq/sluice/ports"
)

// The stand-in authentication: headers (HTTP) and metadata keys (gRPC)
// believed as they come. A real service authenticates (a session, a JWT,
// mTLS) and hands sluice the identity it established. The api key header
// is read on HTTP only (the bench's load test sends it: bench/, "HTTP load
// test" in docs/BENCHMARKS.md).
const (
	HeaderUser   = "X-Demo-User"
	HeaderTenant = "X-Demo-Tenant"
	HeaderAPIKey = "X-Demo-API-Key"
	mdUser       = "x-demo-user"
	mdTenant     = "x-demo-tenant"
)

type principalKey struct{}

// authenticate is the HTTP stand-in authenticator: it stores the
// principal in the request's context, where identity reads it.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := httpmw.Identity{User: r.Header.Get(HeaderUser), Tenant: r.Header.Get(HeaderTenant), APIKey: r.Header.Get(HeaderAPIKey)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, id)))
	})
}

func identity(r *http.Request) httpmw.Identity {
	id, _ := r.Context().Value(principalKey{}).(httpmw.Identity)
	return id
}

// HeaderExportRows is where the exports handler reports the rows it
// exported: the exports profile's cost header (sluice.yaml), read by the
// middleware after the handler returns to settle the reservation.
const HeaderExportRows = "X-Export-Rows"

// Bounds of the demo's slow and costly routes.
const (
	maxExportRows   = 1000
	defaultRows     = 3
	maxReportMillis = 10_000
	defaultReportMs = 1500
)

// newHTTPHandler builds the HTTP side: the API behind authentication and
// sluice, and, beside them, /metrics, /healthz and (with -dev)
// /demo/outage. audit
// receives the cost reports the middleware ignores. trusted are the
// proxies whose X-Forwarded-For names the client (none: the peer is).
func newHTTPHandler(lim *app.Limiter, metrics http.Handler, outage *switchable, audit *slog.Logger, trusted []netip.Prefix) (http.Handler, error) {
	api := httpmw.NewServeMux()
	api.HandleFunc("GET /api/v1/search", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]any{"results": []string{"sluice", "rate limiting"}, "q": r.URL.Query().Get("q")})
	})
	api.HandleFunc("POST /api/v1/login", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]string{"session": "demo"})
	})
	api.HandleFunc("POST /api/v1/exports", exportRows)
	api.HandleFunc("GET /api/v1/reports", slowReport)
	if err := lim.CheckRoutes(api.Patterns()); err != nil {
		return nil, err
	}
	limit, err := httpmw.New(lim, httpmw.Config{Route: api.Route(), Identity: identity, AuditLog: audit, TrustedProxies: trusted, ProxyHeader: httpmw.XForwardedFor})
	if err != nil {
		return nil, err
	}
	root := http.NewServeMux()
	root.Handle("/", authenticate(limit(api)))
	root.Handle("GET /metrics", metrics)
	// Not rate-limited, and 200 while DEGRADED: the demo serves by the
	// degraded matrix during a Redis outage (boot.Health).
	root.Handle("GET /healthz", boot.Health(lim, nil))
	if outage != nil {
		root.HandleFunc("POST /demo/outage", func(w http.ResponseWriter, r *http.Request) { outage.set(r.Context(), w, lim, true) })
		root.HandleFunc("DELETE /demo/outage", func(w http.ResponseWriter, r *http.Request) { outage.set(r.Context(), w, lim, false) })
	}
	return root, nil
}

// exportRows is POST /api/v1/exports?rows=N: it "exports" N rows (default
// 3) and reports them in X-Export-Rows, which the middleware charges in
// place of the 10 reserved. ?fail=1 makes the export fail with a 500,
// which the profile refunds.
func exportRows(w http.ResponseWriter, r *http.Request) {
	if identity(r).User == "" {
		reply(w, http.StatusUnauthorized, map[string]string{"error": "exports need " + HeaderUser})
		return
	}
	q := r.URL.Query()
	if q.Get("fail") != "" {
		reply(w, http.StatusInternalServerError, map[string]string{"error": "export failed"})
		return
	}
	rows, err := queryInt(q.Get("rows"), defaultRows, maxExportRows)
	if err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": "rows: " + err.Error()})
		return
	}
	w.Header().Set(HeaderExportRows, strconv.Itoa(rows))
	reply(w, http.StatusOK, map[string]int{"exported_rows": rows})
}

// slowReport is GET /api/v1/reports?ms=N: a report that takes N
// milliseconds (default 1500). It sends its status at once and its body
// when done, so a client knows it holds its in-flight slot as soon as it
// has the headers; the slot comes back when the handler returns.
func slowReport(w http.ResponseWriter, r *http.Request) {
	ms, err := queryInt(r.URL.Query().Get("ms"), defaultReportMs, maxReportMillis)
	if err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": "ms: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"report": "ready", "took_ms": ms})
}

// queryInt reads a query parameter in [0, maxV], def when absent.
func queryInt(v string, def, maxV int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxV {
		return 0, fmt.Errorf("want an integer between 0 and %d", maxV)
	}
	return n, nil
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newGRPCServer builds the gRPC side: the health service behind the
// stand-in authentication and sluice, every method checked for a profile.
func newGRPCServer(lim *app.Limiter) (*grpc.Server, error) {
	rl, err := grpcmw.New(lim, grpcmw.Config{Identity: func(ctx context.Context, _ string) grpcmw.Identity {
		md, _ := metadata.FromIncomingContext(ctx)
		return grpcmw.Identity{User: first(md.Get(mdUser)), Tenant: first(md.Get(mdTenant))}
	}})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rl.Unary()), grpc.ChainStreamInterceptor(rl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := grpcmw.CheckServer(lim, srv); err != nil {
		return nil, err
	}
	return srv, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// switchable is the -dev stand-in for a store outage: the real primary
// store, answering domain.ErrStoreUnavailable while down is set. It
// reserves through the primary's ports.Reserver (the exports and reports
// profiles need one).
type switchable struct {
	ports.Store
	res  ports.Reserver
	down atomic.Bool
}

var _ ports.Reserver = (*switchable)(nil)

// errOutage is what the store answers during a simulated outage.
var errOutage = fmt.Errorf("demo outage: %w", domain.ErrStoreUnavailable)

// newSwitchable wraps primary, which must be able to reserve.
func newSwitchable(primary ports.Store) (*switchable, error) {
	res, ok := primary.(ports.Reserver)
	if !ok {
		return nil, errors.New("demo: the primary store cannot reserve (ports.Reserver)")
	}
	return &switchable{Store: primary, res: res}, nil
}

func (s *switchable) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, errOutage
	}
	return s.Store.Evaluate(ctx, now, limits)
}

func (s *switchable) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, errOutage
	}
	return s.Store.Peek(ctx, now, limits)
}

func (s *switchable) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if s.down.Load() {
		return domain.Result{}, domain.Lease{}, errOutage
	}
	return s.res.Reserve(ctx, now, limits, ttl)
}

func (s *switchable) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	if s.down.Load() {
		return 0, errOutage
	}
	return s.res.Settle(ctx, now, lease, limits, actual)
}

func (s *switchable) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	if s.down.Load() {
		return domain.Lease{}, errOutage
	}
	return s.res.Renew(ctx, now, lease, limits, ttl)
}

// set starts (down) or ends an outage and probes the store at once, as
// the health loop would at its next tick: once to leave HEALTHY, as many
// times as clearing_probes asks to come back.
func (s *switchable) set(ctx context.Context, w http.ResponseWriter, lim *app.Limiter, down bool) {
	s.down.Store(down)
	probes := 1
	if !down {
		probes = lim.Config().ClearingProbes
	}
	var states []string
	for range probes {
		st, err := lim.ProbeOnce(ctx)
		if err != nil {
			reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		states = append(states, st.String())
	}
	reply(w, http.StatusOK, map[string]any{"store_down": down, "system_state": states})
}

// banner is what the service prints when it is up.
type banner struct {
	http, grpc, store, secretNote string
	outage                        bool
}

func (b banner) print(w io.Writer) {
	base := "http://" + b.http
	fmt.Fprintf(w, "sluice demo: store %s\n", b.store)
	if b.secretNote != "" {
		fmt.Fprintln(w, b.secretNote)
	}
	fmt.Fprintf(w, "http: %s\n", base)
	fmt.Fprintf(w, "grpc: %s\n", b.grpc)
	fmt.Fprintf(w, "metrics: %s/metrics  health: %s/healthz\n", base, base)
	fmt.Fprintln(w, "\nTry:")
	fmt.Fprintf(w, "  curl -i %s/api/v1/search -H '%s: alice@example.org' -H '%s: acme'\n", base, HeaderUser, HeaderTenant)
	fmt.Fprintf(w, "  for i in 1 2 3 4; do curl -s -o /dev/null -w '%%{http_code}\\n' -X POST %s/api/v1/login; done\n", base)
	fmt.Fprintf(w, "  curl -i -X POST '%s/api/v1/exports?rows=25' -H '%s: alice@example.org'   # charged 25 rows, not the 10 reserved\n", base, HeaderUser)
	fmt.Fprintf(w, "  for i in 1 2 3; do curl -s -o /dev/null -w '%%{http_code}\\n' %s/api/v1/reports -H '%s: alice@example.org' & done; wait   # 2 in flight per user\n", base, HeaderUser)
	fmt.Fprintf(w, "  curl -i %s/api/v1/unknown\n", base)
	if b.outage {
		fmt.Fprintf(w, "  curl -X POST %s/demo/outage    # simulate a store outage; DELETE to end it\n", base)
	}
	fmt.Fprintf(w, "  go run ./examples/demo tour -http %s -grpc %s\n", base, b.grpc)
	fmt.Fprintln(w, "Ctrl-C stops the service.")
}

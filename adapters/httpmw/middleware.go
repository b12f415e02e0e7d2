package httpmw

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Evaluator decides one request; *app.Limiter is one.
type Evaluator interface {
	Evaluate(ctx context.Context, req app.Request) (domain.Decision, error)
}

var _ Evaluator = (*app.Limiter)(nil)

// Identity is who a request comes from, as the service's authentication
// established it. Empty fields are absent identities.
type Identity struct {
	User, Tenant, APIKey string
}

// IdentityFunc returns the identity of an authenticated request, the zero
// Identity for an anonymous one. It runs inside the middleware, so the
// middleware must sit after (inside) the service's authentication, which
// typically stores its principal in the request's context.
type IdentityFunc func(r *http.Request) Identity

// RouteFunc returns the route template of a request ("GET
// /api/v1/users/{id}"), or "" when no route matches it. It must return the
// template the router matched, never the raw path: profiles are per
// template, and a raw path would let every distinct URL count apart.
type RouteFunc func(r *http.Request) string

// ErrorFunc answers a request whose decision could not be recorded.
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// Config configures the middleware. The zero value of every field is its
// documented default.
type Config struct {
	// Route finds a request's route template. nil means RequestPattern,
	// which reads the pattern a ServeMux set on the request: right when
	// the middleware wraps handlers registered on the mux. To wrap the
	// whole mux, use MuxRoute(mux).
	Route RouteFunc
	// Identity reads the authenticated identity. nil means every request
	// is anonymous: only the ip dimension applies.
	Identity IdentityFunc
	// TrustedProxies are the prefixes of the proxies whose forwarding
	// header is believed. Empty means none: the client is RemoteAddr, and
	// any forwarding header is ignored.
	TrustedProxies []netip.Prefix
	// ProxyHeader is the one forwarding header read from trusted proxies
	// (default X-Forwarded-For).
	ProxyHeader ProxyHeader
	// OnError answers a request whose decision could not be recorded.
	// sluice's observability fails closed: by default such a request is
	// answered 500 and the handler is not called.
	OnError ErrorFunc
	// SettleTimeout bounds the settlement of a reservation after the
	// handler returns, and each renewal of its lease while the handler
	// runs (default DefaultSettleTimeout). Both run on a context detached
	// from the request's, so that a client that goes away still has its
	// reservation settled; the Limiter's store deadline applies within.
	SettleTimeout time.Duration
	// Clock drives the renewals of a reservation's lease while its
	// handler runs. nil means ports.SystemClock; tests pass the
	// Limiter's fake clock.
	Clock ports.Clock
	// AuditLog receives the cost reports the middleware ignores (a cost
	// header that is not one integer between 0 and domain.MaxLimit): the
	// reservation then settles at its reserved cost. nil means
	// slog.Default().
	AuditLog *slog.Logger
}

// DefaultSettleTimeout is Config.SettleTimeout's default.
const DefaultSettleTimeout = 5 * time.Second

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	if c.SettleTimeout < 0 {
		return &domain.ConfigError{Field: "httpmw.settle_timeout", Reason: "must not be negative"}
	}
	if c.ProxyHeader > Forwarded {
		return &domain.ConfigError{Field: "httpmw.proxy_header", Reason: "unknown header"}
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return &domain.ConfigError{Field: fmt.Sprintf("httpmw.trusted_proxies[%d]", i), Reason: "invalid prefix"}
		}
	}
	return nil
}

// New returns the rate-limiting middleware: every request is decided by
// lim before the handler runs. A request that passes (Allowed,
// BypassDegraded, or anything in shadow mode) reaches the handler with its
// rate-limit headers already set on the response.
// A refusal never reaches it: 429 with a quota-exceeded problem, 503 with
// a temporary-reduced-capacity problem, or the uniform 400.
//
// When lim is a Reserver, a route it says is Reserving (every route, with
// WithCost) is decided by Reserve, and its reservation is settled after
// the handler returns (see Reserver).
func New(lim Evaluator, cfg Config, opts ...Option) (func(http.Handler) http.Handler, error) {
	if lim == nil {
		return nil, &domain.ConfigError{Field: "httpmw.limiter", Reason: "required"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	res, _ := lim.(Reserver)
	if o.cost != nil && (res == nil || !res.CanReserve()) {
		return nil, &domain.ConfigError{Field: "httpmw.cost", Reason: "the limiter cannot reserve (not a httpmw.Reserver, or its primary store takes no reservations)"}
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = ports.SystemClock{}
	}
	if cfg.AuditLog == nil {
		cfg.AuditLog = slog.Default()
	}
	if cfg.Route == nil {
		cfg.Route = RequestPattern
	}
	if cfg.OnError == nil {
		cfg.OnError = internalError
	}
	cfg.TrustedProxies = append([]netip.Prefix(nil), cfg.TrustedProxies...)
	for i, p := range cfg.TrustedProxies {
		cfg.TrustedProxies[i] = p.Masked()
	}
	return func(next http.Handler) http.Handler {
		return &middleware{lim: lim, res: res, cost: o.cost, cfg: cfg, next: next}
	}, nil
}

type middleware struct {
	lim Evaluator
	// res is lim when it can reserve, else nil.
	res  Reserver
	cost CostFunc
	cfg  Config
	next http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := app.Request{Route: m.cfg.Route(r), Method: r.Method, Path: r.URL.Path}
	// An unresolved address stays the zero Addr: the Limiter rejects it
	// as invalid context (ip_unresolved) and records that.
	req.ClientIP, _ = clientIP(r, m.cfg.TrustedProxies, m.cfg.ProxyHeader)
	if m.cfg.Identity != nil {
		id := m.cfg.Identity(r)
		req.User, req.Tenant, req.APIKey = id.User, id.Tenant, id.APIKey
	}
	var (
		d   domain.Decision
		rsv *app.Reservation
		err error
	)
	if m.res != nil && (m.cost != nil || m.res.Reserving(req.Route)) {
		d, rsv, err = m.res.Reserve(r.Context(), req)
	} else {
		d, err = m.lim.Evaluate(r.Context(), req)
	}
	if err != nil {
		m.cfg.OnError(w, r, err)
		return
	}
	if d.Blocks() {
		writeRefusal(w, &d)
		return
	}
	setRateLimitHeaders(w.Header(), &d)
	if rsv == nil {
		m.next.ServeHTTP(w, r)
		return
	}
	m.serveReserved(w, r, req.Route, rsv)
}

func internalError(w http.ResponseWriter, _ *http.Request, _ error) {
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

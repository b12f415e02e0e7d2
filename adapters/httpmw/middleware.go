package httpmw

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
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
}

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
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
func New(lim Evaluator, cfg Config) (func(http.Handler) http.Handler, error) {
	if lim == nil {
		return nil, &domain.ConfigError{Field: "httpmw.limiter", Reason: "required"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
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
		return &middleware{lim: lim, cfg: cfg, next: next}
	}, nil
}

type middleware struct {
	lim  Evaluator
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
	d, err := m.lim.Evaluate(r.Context(), req)
	if err != nil {
		m.cfg.OnError(w, r, err)
		return
	}
	if d.Blocks() {
		writeRefusal(w, &d)
		return
	}
	setRateLimitHeaders(w.Header(), &d)
	m.next.ServeHTTP(w, r)
}

func internalError(w http.ResponseWriter, _ *http.Request, _ error) {
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

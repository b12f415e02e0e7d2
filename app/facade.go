package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/domain"
)

// RateLimiter is ADR-002's single-layer interface, kept with its exact
// signature: Allow reports whether one more request under key fits limit
// requests per window, and the requests left.
type RateLimiter interface {
	Allow(key string, limit int) (bool, int, error)
}

// DualLayerLimiter is ADR-002's dual-layer interface, kept with its exact
// signature: the tenant and the user (or api key) layers are checked
// atomically; when either refuses, neither is consumed.
type DualLayerLimiter interface {
	AllowDual(tenantKey string, tenantLimit int, userKey string, userLimit int) (allowed bool, tenantRemaining int, userRemaining int, err error)
}

// ContextRateLimiter is RateLimiter with a context.
type ContextRateLimiter interface {
	AllowContext(ctx context.Context, key string, limit int) (bool, int, error)
}

// ContextDualLayerLimiter is DualLayerLimiter with a context.
type ContextDualLayerLimiter interface {
	AllowDualContext(ctx context.Context, tenantKey string, tenantLimit int, userKey string, userLimit int) (allowed bool, tenantRemaining int, userRemaining int, err error)
}

// The Limiter implements every façade.
var (
	_ RateLimiter             = (*Limiter)(nil)
	_ DualLayerLimiter        = (*Limiter)(nil)
	_ ContextRateLimiter      = (*Limiter)(nil)
	_ ContextDualLayerLimiter = (*Limiter)(nil)
)

// APIKeyPrefix marks a userKey that names an api key rather than a user:
// AllowDual(t, n, "key:k_123", m) checks rl:{t}:key:{k_123}, the api-key
// layer of ADR-002, instead of rl:{t}:user:{…}.
const APIKeyPrefix = "key:"

// facadeWindow is one window of a façade layer; callLimit marks a window
// whose limit is the one the caller passes.
type facadeWindow struct {
	window    domain.Window
	callLimit bool
	// suffix is appended to the layer's ADR-002 key: "" for the first
	// window, ":<name>" for the others.
	suffix string
}

// facadeProfile is the fixed part of every façade decision.
type facadeProfile struct {
	family       domain.RouteFamily
	action       domain.DegradedAction
	tenant, user []facadeWindow
}

// checkFacade checks the façade's configuration (Validate calls it).
func checkFacade(c FacadeConfig) error {
	_, err := newFacadeProfile(c)
	return err
}

func newFacadeProfile(c FacadeConfig) (facadeProfile, error) {
	fp := facadeProfile{family: c.Family, action: c.Degraded}
	if err := checkEnum("facade.family", c.Family); err != nil {
		return fp, err
	}
	if err := checkEnum("facade.degraded", c.Degraded); err != nil {
		return fp, err
	}
	var err error
	if fp.tenant, err = facadeWindows("facade.tenant", c.Tenant); err != nil {
		return fp, err
	}
	fp.user, err = facadeWindows("facade.user", c.User)
	return fp, err
}

func facadeWindows(path string, cs []FacadeWindowConfig) ([]facadeWindow, error) {
	out := make([]facadeWindow, 0, len(cs))
	for i, c := range cs {
		fw := facadeWindow{
			window:    domain.Window{Name: c.Name, Limit: c.Limit, Period: c.Period, Algorithm: c.Algorithm},
			callLimit: c.Limit == 0,
		}
		if i > 0 {
			fw.suffix = ":" + c.Name
		}
		probe := fw.window
		if fw.callLimit {
			probe.Limit = 1 // the caller's limit is checked per call
		}
		if err := windowError(fmt.Sprintf("%s[%d]", path, i), probe.Validate()); err != nil {
			return nil, err
		}
		if c.Algorithm == domain.Concurrency {
			// The façades evaluate; only a reservation holds a slot.
			return nil, &domain.ConfigError{Field: fmt.Sprintf("%s[%d].algorithm", path, i), Reason: "a façade window cannot be a concurrency window: the façades evaluate, only Limiter.Reserve holds slots"}
		}
		out = append(out, fw)
	}
	return out, nil
}

// Allow is ADR-002's RateLimiter.Allow with a background context; see
// AllowContext, including what a degraded answer means.
func (l *Limiter) Allow(key string, limit int) (bool, int, error) {
	return l.AllowContext(context.Background(), key, limit)
}

// AllowContext checks one layer: key is the tenant id (or, for anonymous
// traffic, whatever the caller counts by), counted under rl:{<pseudonym>}
// on the windows of Config.Facade.Tenant, with limit as the limit of each
// window that does not fix its own. It returns whether the request passes
// and the requests left. In shadow mode it always passes.
//
// It takes the pipeline's path: breaker, degraded matrix (the façade's own
// action, Config.Facade.Degraded), recording. A refusal is (false, n, nil);
// err is non-nil for an invalid key or limit (the decision is then
// RejectedInvalidContext) or when recording failed.
//
// Degraded answers: while the store cannot answer, true may come from the
// degraded matrix rather than the shared count — with the default "local"
// action, from this instance's own count, so a fleet of R instances admits
// up to about limit × R (docs/adr/002). The bool cannot say so: callers
// that must know use DecideDual, whose Decision.Degraded does.
func (l *Limiter) AllowContext(ctx context.Context, key string, limit int) (bool, int, error) {
	d, err := l.DecideDual(ctx, key, limit, "", 0)
	return passes(d), remainingOf(d.TenantRemaining, d), err
}

// AllowDual is ADR-002's DualLayerLimiter.AllowDual with a background
// context; see AllowDualContext, including what a degraded answer means.
func (l *Limiter) AllowDual(tenantKey string, tenantLimit int, userKey string, userLimit int) (allowed bool, tenantRemaining int, userRemaining int, err error) {
	return l.AllowDualContext(context.Background(), tenantKey, tenantLimit, userKey, userLimit)
}

// AllowDualContext checks the tenant layer (rl:{tenant}) and the user
// layer (rl:{tenant}:user:{user}, or rl:{tenant}:key:{id} when userKey is
// "key:<id>") atomically, in one store call: when either layer refuses,
// neither is consumed. Both ids are pseudonymised before they reach a key.
// An empty userKey checks the tenant layer alone, as Allow does.
//
// Remaining counts are per layer; ADR-002's X-RateLimit-Remaining is
// min(tenantRemaining, userRemaining). Refusals, errors, shadow mode and
// degraded answers are as for AllowContext.
func (l *Limiter) AllowDualContext(ctx context.Context, tenantKey string, tenantLimit int, userKey string, userLimit int) (allowed bool, tenantRemaining int, userRemaining int, err error) {
	d, err := l.DecideDual(ctx, tenantKey, tenantLimit, userKey, userLimit)
	return passes(d), remainingOf(d.TenantRemaining, d), remainingOf(d.UserRemaining, d), err
}

// DecideDual is AllowDualContext returning the whole decision, for
// entry points that need its state, retry-after and headers, and for
// callers that must tell a degraded answer (Decision.Degraded) from the
// shared count's. The error is the invalid-input error (also recorded) or
// a recording failure.
func (l *Limiter) DecideDual(ctx context.Context, tenantKey string, tenantLimit int, userKey string, userLimit int) (domain.Decision, error) {
	ctx = l.startDecision(ctx)
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	ev.d.Profile, ev.d.Family = DefaultFacadeProfile, l.facade.family
	ev.exactLayers = userKey != ""
	inputErr := l.buildFacadeKeys(ev, tenantKey, tenantLimit, userKey, userLimit)
	if inputErr != nil {
		ev.reject(inputErr)
	} else {
		l.run(ctx, ev)
	}
	return ev.d, errors.Join(inputErr, l.record(ctx, ev, &Request{}))
}

// buildFacadeKeys builds ADR-002's keys with pseudonymised ids: the
// tenant layer's windows on rl:{tenant}, the user (or api-key) layer's on
// rl:{tenant}:user:{user} (rl:{tenant}:key:{id}).
func (l *Limiter) buildFacadeKeys(ev *evaluation, tenantKey string, tenantLimit int, userKey string, userLimit int) error {
	tenant, err := domain.NormaliseIdentifier(tenantKey)
	if err != nil {
		return err
	}
	ev.tenantID = l.pseudonym(domain.DimensionTenant, tenant)
	ev.capDim, ev.capID = domain.DimensionTenant, ev.tenantID
	if err := ev.addFacadeLayer(domain.DimensionTenant, domain.TenantKey(ev.tenantID), l.facade.tenant, tenantLimit); err != nil {
		return err
	}
	if userKey != "" {
		dim, raw := domain.DimensionUser, userKey
		if id, ok := strings.CutPrefix(userKey, APIKeyPrefix); ok {
			dim, raw = domain.DimensionAPIKey, id
		}
		id, err := domain.NormaliseIdentifier(raw)
		if err != nil {
			return err
		}
		pid := l.pseudonym(dim, id)
		key := domain.TenantUserKey(ev.tenantID, pid)
		if dim == domain.DimensionAPIKey {
			key = domain.TenantAPIKeyKey(ev.tenantID, pid)
		}
		if err := ev.addFacadeLayer(dim, key, l.facade.user, userLimit); err != nil {
			return err
		}
		ev.capDim, ev.capID = dim, pid
	}
	ev.action, ev.routeKey = l.facade.action, DefaultFacadeProfile
	ev.capWindow = capWindow(ev.minLimit())
	return nil
}

// addFacadeLayer adds one layer's windows on base (+ suffix) with the
// caller's limit where the window takes it.
func (ev *evaluation) addFacadeLayer(dim domain.Dimension, base string, windows []facadeWindow, callLimit int) error {
	for _, fw := range windows {
		w := fw.window
		if fw.callLimit {
			w.Limit = int64(callLimit)
			if err := w.Validate(); err != nil {
				return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: dim.Layer().String() + " limit: " + err.Error()}
			}
		}
		ev.add(domain.Limit{Key: base + fw.suffix, Window: w, Cost: 1}, dim)
	}
	return nil
}

// passes is what a façade caller should do: let the request through when
// the state passes, and always in shadow mode.
func passes(d domain.Decision) bool { return d.Shadow || d.State.Passes() }

// remainingOf converts a per-layer remaining for the façade's int results:
// an unchecked layer (-1) reports the decision's overall remaining, and
// nothing is ever negative.
func remainingOf(layer int64, d domain.Decision) int {
	if layer < 0 {
		layer = d.Remaining
	}
	return int(max(layer, 0))
}

package app

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
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

// facadeWindowName names the window of both façade layers in decisions.
const facadeWindowName = "facade"

// facadeProfile is the fixed part of every façade decision.
type facadeProfile struct {
	family domain.RouteFamily
	action domain.DegradedAction
	period time.Duration
	alg    domain.Algorithm
}

func newFacadeProfile(c FacadeConfig) (facadeProfile, error) {
	var fp facadeProfile
	var err error
	if fp.family, err = domain.ParseRouteFamily(c.Family); err != nil {
		return fp, &domain.ConfigError{Field: "facade.family", Reason: err.Error()}
	}
	if fp.action, err = domain.ParseDegradedAction(c.Degraded); err != nil {
		return fp, &domain.ConfigError{Field: "facade.degraded", Reason: err.Error()}
	}
	if fp.alg, err = domain.ParseAlgorithm(c.Algorithm); err != nil {
		return fp, &domain.ConfigError{Field: "facade.algorithm", Reason: err.Error()}
	}
	fp.period = c.Period
	return fp, nil
}

// Allow is ADR-002's RateLimiter.Allow with a background context.
func (l *Limiter) Allow(key string, limit int) (bool, int, error) {
	return l.AllowContext(context.Background(), key, limit)
}

// AllowContext checks one layer: key is the tenant id (or, for anonymous
// traffic, whatever the caller counts by), counted under rl:{<pseudonym>}
// with limit requests per Config.Facade.Period. It returns whether the
// request passes and the requests left. In shadow mode it always passes.
//
// It takes the pipeline's path: breaker, degraded matrix (the façade's own
// action, Config.Facade.Degraded), recording. A refusal is (false, n, nil);
// err is non-nil for an invalid key or limit (the decision is then
// RejectedInvalidContext) or when recording failed.
func (l *Limiter) AllowContext(ctx context.Context, key string, limit int) (bool, int, error) {
	d, err := l.DecideDual(ctx, key, limit, "", 0)
	return passes(d), remainingOf(d.TenantRemaining, d), err
}

// AllowDual is ADR-002's DualLayerLimiter.AllowDual with a background
// context.
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
// min(tenantRemaining, userRemaining). Refusals, errors and shadow mode are
// as for AllowContext.
func (l *Limiter) AllowDualContext(ctx context.Context, tenantKey string, tenantLimit int, userKey string, userLimit int) (allowed bool, tenantRemaining int, userRemaining int, err error) {
	d, err := l.DecideDual(ctx, tenantKey, tenantLimit, userKey, userLimit)
	return passes(d), remainingOf(d.TenantRemaining, d), remainingOf(d.UserRemaining, d), err
}

// DecideDual is AllowDualContext returning the whole decision, for
// entry points that need its state, retry-after and headers. The error is
// the invalid-input error (also recorded) or a recording failure.
func (l *Limiter) DecideDual(ctx context.Context, tenantKey string, tenantLimit int, userKey string, userLimit int) (domain.Decision, error) {
	var ev evaluation
	ev.now = l.clock.Now()
	d := l.newDecision()
	d.Profile, d.Family = DefaultFacadeProfile, l.facade.family
	var rec ports.DecisionRecord
	var runErr, inputErr error
	if inputErr = l.buildFacadeKeys(&ev, tenantKey, tenantLimit, userKey, userLimit); inputErr != nil {
		d, rec, _ = reject(d, inputErr)
	} else {
		d, rec, runErr = l.run(ctx, &ev, d)
	}
	rec.Decision = d
	rec.TenantID = ev.tenantID
	return d, errors.Join(inputErr, runErr, l.rec.RecordDecision(ctx, rec))
}

// buildFacadeKeys builds ADR-002's keys with pseudonymised ids.
func (l *Limiter) buildFacadeKeys(ev *evaluation, tenantKey string, tenantLimit int, userKey string, userLimit int) error {
	tenant, err := domain.NormaliseIdentifier(tenantKey)
	if err != nil {
		return err
	}
	w := domain.Window{Name: facadeWindowName, Period: l.facade.period, Algorithm: l.facade.alg}
	ev.tenantID = l.pseudo.Pseudonymise(domain.DimensionTenant, tenant)
	ev.tag = ev.tenantID
	tw := w
	tw.Limit = int64(tenantLimit)
	if err := tw.Validate(); err != nil {
		return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: "tenant limit: " + err.Error()}
	}
	ev.limits[0] = domain.Limit{Key: domain.TenantKey(ev.tenantID), Window: tw, Cost: 1}
	ev.meta[0] = keyed{dim: domain.DimensionTenant, window: tw}
	ev.n = 1
	ev.capDim, ev.capID = domain.DimensionTenant, ev.tenantID
	burst := tw.Limit
	if userKey != "" {
		dim, raw := domain.DimensionUser, userKey
		if id, ok := strings.CutPrefix(userKey, APIKeyPrefix); ok {
			dim, raw = domain.DimensionAPIKey, id
		}
		id, err := domain.NormaliseIdentifier(raw)
		if err != nil {
			return err
		}
		uw := w
		uw.Limit = int64(userLimit)
		if err := uw.Validate(); err != nil {
			return &domain.ContextError{Cause: domain.CauseInvalidLimit, Detail: "user limit: " + err.Error()}
		}
		pid := l.pseudo.Pseudonymise(dim, id)
		key := domain.TenantUserKey(ev.tenantID, pid)
		if dim == domain.DimensionAPIKey {
			key = domain.TenantAPIKeyKey(ev.tenantID, pid)
		}
		ev.limits[1] = domain.Limit{Key: key, Window: uw, Cost: 1}
		ev.meta[1] = keyed{dim: dim, window: uw}
		ev.n = 2
		ev.capDim, ev.capID = dim, pid
		burst = min(burst, uw.Limit)
	}
	ev.action, ev.routeKey = l.facade.action, DefaultFacadeProfile
	ev.capWindow = domain.Window{
		Name:      capWindowName,
		Limit:     min(domain.DegradedCapFactor*burst, domain.MaxLimit),
		Period:    domain.DegradedCapPeriod,
		Algorithm: domain.GCRA,
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

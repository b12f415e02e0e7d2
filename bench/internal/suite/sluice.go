package suite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// newStore connects sluice's Redis store with its defaults but the
// deadline (and the batch bound, when -max-batch gives one).
func newStore(env *Env) (*redis.Store, error) {
	return redis.New(redis.Config{Addrs: []string{env.Addr}, Timeout: callTimeout, MaxBatch: env.MaxBatch})
}

// sluiceStore is sluice's Redis store alone: one Evaluate per request.
func sluiceStore(sets keyset) Contender {
	return Contender{Name: "sluice store", Sluice: true, Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
		st, err := newStore(env)
		if err != nil {
			return nil, nil, err
		}
		all, err := sets(env)
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		worker := func(w, c int) load.Op {
			cur := NewCursor(w, c, len(all))
			return func(ctx context.Context) (load.Outcome, error) {
				r, err := st.Evaluate(ctx, time.Now(), all[cur.Next()])
				if err != nil {
					return 0, err
				}
				if !r.Allowed {
					return load.Refused, nil
				}
				return load.Allowed, nil
			}
		}
		return worker, st.Close, nil
	}}
}

// Routes of the Limiter's profiles.
const (
	routeHot  = "GET /bench/hot"
	routeNine = "GET /bench/nine"
)

// benchConfig is limiterConfig, for sluiceLimiter.
func benchConfig(*Env) (app.Config, error) { return limiterConfig(), nil }

// limiterConfig has one profile per shape the Limiter serves, and the
// ADR-002 façade, all on the shapes' windows.
func limiterConfig() app.Config {
	wc := func(w domain.Window) app.WindowConfig {
		return app.WindowConfig{Name: w.Name, Limit: w.Limit, Period: w.Period, Algorithm: w.Algorithm}
	}
	pair := []app.WindowConfig{wc(burstLog), wc(sustainedLog)}
	return app.Config{
		HMACSecret:   Secret,
		InstanceID:   "sluicebench",
		StoreTimeout: callTimeout,
		// A probe that waits on a busy machine must not open the breaker:
		// the measurement is of the shared store's decisions.
		ProbeTimeout: callTimeout,
		Profiles: []app.ProfileConfig{
			{Name: "hot", Family: domain.FamilyRead, Routes: []string{routeHot},
				Windows: app.WindowsConfig{IP: []app.WindowConfig{wc(hotWindow)}}},
			{Name: routeKey, Family: domain.FamilyRead, Routes: []string{routeNine},
				Windows: app.WindowsConfig{IP: pair, User: pair, APIKey: pair, Tenant: pair, TenantGlobal: pair[1:]}},
		},
		// The caller passes the limit (burstLog's) on every call.
		Facade: app.FacadeConfig{
			Tenant: []app.FacadeWindowConfig{{Name: burstLog.Name, Period: burstLog.Period}},
			User:   []app.FacadeWindowConfig{{Name: burstLog.Name, Period: burstLog.Period}},
		},
	}
}

// decide is one Limiter request for a client.
type decide func(ctx context.Context, l *app.Limiter, id *Identity) (domain.Decision, error)

// hotRequest is an anonymous request from the hot client, whose only
// window is its address'.
func hotRequest(ctx context.Context, l *app.Limiter, id *Identity) (domain.Decision, error) {
	return l.Evaluate(ctx, app.Request{Route: routeHot, ClientIP: id.IP})
}

func nineRequest(ctx context.Context, l *app.Limiter, id *Identity) (domain.Decision, error) {
	return l.Evaluate(ctx, app.Request{Route: routeNine, ClientIP: id.IP, User: id.User, Tenant: id.Tenant, APIKey: id.APIKey})
}

// dualRequest is AllowDual (through DecideDual, its body, which also
// says whether the answer was degraded).
func dualRequest(ctx context.Context, l *app.Limiter, id *Identity) (domain.Decision, error) {
	return l.DecideDual(ctx, id.Tenant, int(burstLog.Limit), id.User, int(burstLog.Limit))
}

// sluiceLimiter is the whole decision pipeline, app.Limiter configured
// by cfg, on sluice's Redis store: context checks, profile, pseudonyms,
// keys, the refusal cache, the store call, the decision and its recording
// (to a Recorder that discards it, so that no exporter is measured).
// With hot, every request comes from the population's hot client.
func sluiceLimiter(cfg func(*Env) (app.Config, error), req decide, hot bool) Contender {
	return Contender{Name: "sluice Limiter", Sluice: true, Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
		config, err := cfg(env)
		if err != nil {
			return nil, nil, err
		}
		st, err := newStore(env)
		if err != nil {
			return nil, nil, err
		}
		fallback, err := local.New(local.Config{})
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		l, err := app.New(config, app.Deps{Store: st, Fallback: fallback, Recorder: recordertest.Discard{}})
		if err != nil {
			st.Close()
			fallback.Close()
			return nil, nil, err
		}
		closeAll := func() error {
			l.Close()
			return errors.Join(st.Close(), fallback.Close())
		}
		clients := env.Population.Clients
		if hot {
			clients = []Identity{env.Population.Hot}
		}
		worker := func(w, c int) load.Op {
			cur := NewCursor(w, c, len(clients))
			return func(ctx context.Context) (load.Outcome, error) {
				d, err := req(ctx, l, &clients[cur.Next()])
				if err != nil {
					return 0, err
				}
				return outcome(d)
			}
		}
		return worker, closeAll, nil
	}}
}

// outcome reads a decision: allowed or throttled by the shared store (or
// the refusal cache it fed); anything else means the measurement did not
// measure what it says.
func outcome(d domain.Decision) (load.Outcome, error) {
	switch {
	case d.Degraded:
		return 0, fmt.Errorf("degraded decision %s (%s)", d.State, d.Cause)
	case d.State == domain.Allowed:
		return load.Allowed, nil
	case d.State == domain.Throttled:
		return load.Refused, nil
	}
	return 0, fmt.Errorf("decision %s (%s)", d.State, d.Cause)
}

package suite

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
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
	routeHot    = "GET /bench/hot"
	routeNine   = "GET /bench/nine"
	routeGlobal = "GET /bench/global"
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
			{Name: "global", Family: domain.FamilyRead, Routes: []string{routeGlobal},
				Windows: app.WindowsConfig{TenantGlobal: []app.WindowConfig{wc(globalWindow)}}},
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

// globalRequest is a request of the client's user in HotTenant, whose
// only window is the tenant's tenant-global one: one key set for every
// client.
func globalRequest(ctx context.Context, l *app.Limiter, id *Identity) (domain.Decision, error) {
	return l.Evaluate(ctx, app.Request{Route: routeGlobal, ClientIP: id.IP, User: id.User, Tenant: HotTenant})
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
// keys, the refusal cache, allotments (docs/adr/019: on, as by default),
// the store call, the decision and its recording (to a Recorder that
// counts the store calls and discards the rest, so that no exporter is
// measured). With hot, every request comes from the population's hot
// client. Its Twin is the same with allotments off.
func sluiceLimiter(cfg func(*Env) (app.Config, error), req decide, hot bool) Contender {
	return allotted(LimiterName, func(_ context.Context, env *Env, _ int, off bool) (load.Worker, func() error, error) {
		config, err := cfg(env)
		if err != nil {
			return nil, nil, err
		}
		l, closeAll, err := openLimiter(env, config, off)
		if err != nil {
			return nil, nil, err
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
	})
}

// LimiterName names the Limiter's contender in tables, and
// NoAllotmentsSuffix the twin of a contender with allotments off.
const (
	LimiterName        = "sluice Limiter"
	NoAllotmentsSuffix = ", no allotments"
)

// allotted returns the sluice contender named name whose Limiter takes
// allotments (docs/adr/019), as sluice does by default, with its Twin,
// named name+NoAllotmentsSuffix, whose Limiter takes none: open builds
// the Limiter with allotments off when off is set.
func allotted(name string, open func(ctx context.Context, env *Env, c int, off bool) (load.Worker, func() error, error)) Contender {
	twin := Contender{Name: name + NoAllotmentsSuffix, Sluice: true, Open: func(ctx context.Context, env *Env, c int) (load.Worker, func() error, error) {
		return open(ctx, env, c, true)
	}}
	return Contender{Name: name, Sluice: true, Twin: &twin, Open: func(ctx context.Context, env *Env, c int) (load.Worker, func() error, error) {
		return open(ctx, env, c, false)
	}}
}

// openLimiter builds app.Limiter with config on sluice's Redis store,
// a local fallback and a Recorder counting the store calls in
// env.StoreCalls (when set); with off, config's allotments are turned
// off. The function returned closes them all.
func openLimiter(env *Env, config app.Config, off bool) (*app.Limiter, func() error, error) {
	if off {
		config.Allotments = app.AllotmentsOff
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
	var rec ports.Recorder = recordertest.Discard{}
	if env.StoreCalls != nil {
		env.StoreCalls.used.Store(true)
		rec = callCounter{calls: env.StoreCalls}
	}
	l, err := app.New(config, app.Deps{Store: st, Fallback: fallback, Recorder: rec})
	if err != nil {
		return nil, nil, errors.Join(err, st.Close(), fallback.Close())
	}
	return l, func() error {
		l.Close()
		return errors.Join(st.Close(), fallback.Close())
	}, nil
}

// StoreCalls counts the calls a Limiter made to its primary store, by
// operation (ports.StoreCall.Op: evaluate for a decision at the store,
// allot for an allotment taken, settle for one given back), and their
// latencies, as its Recorder learns of them. Safe for simultaneous use;
// the zero value is ready.
type StoreCalls struct {
	n, ns [16]atomic.Int64
	used  atomic.Bool
}

// Reset sets every count to zero.
func (s *StoreCalls) Reset() {
	for i := range s.n {
		s.n[i].Store(0)
		s.ns[i].Store(0)
	}
}

// Counts returns the calls counted since the last Reset and their
// latencies summed, in microseconds, by operation name
// (ports.StoreOp.String), those not made left out; nil when no Limiter
// counts into s (a contender that is not built on one).
func (s *StoreCalls) Counts() (calls map[string]int64, micros map[string]float64) {
	if !s.used.Load() {
		return nil, nil
	}
	calls, micros = map[string]int64{}, map[string]float64{}
	for i := range s.n {
		if n := s.n[i].Load(); n > 0 {
			op := ports.StoreOp(i).String()
			calls[op], micros[op] = n, float64(s.ns[i].Load())/1e3
		}
	}
	return calls, micros
}

// callCounter is a Recorder that counts the store calls and discards
// everything else.
type callCounter struct {
	recordertest.Discard
	calls *StoreCalls
}

func (c callCounter) RecordStoreCall(_ context.Context, call ports.StoreCall) {
	i := int(call.Op) % len(c.calls.n)
	c.calls.n[i].Add(1)
	c.calls.ns[i].Add(int64(call.Latency))
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

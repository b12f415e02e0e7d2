package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// DemoConfigPath is the demo's configuration, relative to sluice's
// module root.
const DemoConfigPath = "examples/demo/sluice.yaml"

// DemoRoute is the demo's route whose profile the demo shape measures
// (the search profile: ip, user, tenant and tenant-global windows, both
// algorithms, and a tenant-global window above the compact bound).
const DemoRoute = "GET /api/v1/search"

// DemoPopulation is the population of the demo shape, whatever the run's:
// the demo's limits are a service's (a user may search 5 times a second
// and 100 times a minute), so it takes this many clients for every
// decision to stay admitted at the rates these machines reach (under 1
// search per client per second at 20k/s).
const DemoPopulation = 20_000

// ModuleRoot returns the directory of sluice's module (the one holding
// examples/demo), searched from dir upwards: the bench runs from bench/
// (make bench) or from one of its package directories (go test).
func ModuleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, DemoConfigPath)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("suite: no %s in %s or above", DemoConfigPath, abs)
		}
	}
}

// DemoConfig parses the demo's configuration as the demo does, with the
// suite's HMAC secret and no REDIS_URL, and gives the store the suite's
// deadline (the demo's 50 ms would turn a busy machine's slow answers
// into degraded decisions; the measurement is of the shared store's).
func DemoConfig(data []byte) (app.Config, error) {
	cfg, err := app.ParseConfig(data, func(k string) (string, bool) {
		if k == app.EnvHMACSecret {
			return Secret, true
		}
		return "", false
	})
	if err != nil {
		return cfg, fmt.Errorf("suite: the demo's configuration: %w", err)
	}
	cfg.StoreTimeout, cfg.ProbeTimeout = callTimeout, callTimeout
	return cfg, nil
}

// demoRequest is the demo's search, from an authenticated user of a
// tenant (the demo reads no api key).
func demoRequest(ctx context.Context, l *app.Limiter, id *Identity) (domain.Decision, error) {
	return l.Evaluate(ctx, app.Request{Route: DemoRoute, ClientIP: id.IP, User: id.User, Tenant: id.Tenant})
}

// capture is a store that keeps a copy of the limits of the last Evaluate.
// It reserves through the store it wraps: the demo's configuration has
// profiles that reserve (exports, reports), which a Limiter accepts only
// on a primary store that can.
type capture struct {
	ports.Store
	ports.Reserver
	limits []domain.Limit
}

func (c *capture) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	c.limits = append([]domain.Limit(nil), limits...)
	return c.Store.Evaluate(ctx, now, limits)
}

// limiterLimits is the keyset of a Limiter configured by cfg: each
// client's limits as the Limiter builds them for req (keys, windows after
// plans, costs), read by one decision per client on a local store. It is
// built once per population: the demo shape's population is large.
func limiterLimits(cfg func(*Env) (app.Config, error), req decide) func(*Env) ([][]domain.Limit, error) {
	var mu sync.Mutex
	var done *Population
	var out [][]domain.Limit
	return func(env *Env) ([][]domain.Limit, error) {
		mu.Lock()
		defer mu.Unlock()
		if done == env.Population && out != nil {
			return out, nil
		}
		c, err := cfg(env)
		if err != nil {
			return nil, err
		}
		st, err := local.New(local.Config{})
		if err != nil {
			return nil, err
		}
		fallback, err := local.New(local.Config{})
		if err != nil {
			st.Close()
			return nil, err
		}
		rec := &capture{Store: st, Reserver: st}
		l, err := app.New(c, app.Deps{Store: rec, Fallback: fallback, Recorder: recordertest.Discard{}})
		if err != nil {
			return nil, errors.Join(err, st.Close(), fallback.Close())
		}
		defer func() { l.Close(); st.Close(); fallback.Close() }()
		sets := make([][]domain.Limit, len(env.Population.Clients))
		for i := range env.Population.Clients {
			rec.limits = nil
			d, err := req(context.Background(), l, &env.Population.Clients[i])
			if err != nil {
				return nil, err
			}
			if _, err := outcome(d); err != nil || rec.limits == nil {
				return nil, fmt.Errorf("suite: client %d: no store decision to read the keys from (%s, %s)", i, d.State, d.Cause)
			}
			sets[i] = rec.limits
		}
		done, out = env.Population, sets
		return out, nil
	}
}

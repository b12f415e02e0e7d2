package app_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPlanChangeAcrossARestartOnRedis: a tenant moved to another plan
// keeps the units it consumed (docs/adr/006, docs/adr/009 rule S1), for
// both algorithms. The service "restarts" between the two phases: a new
// Limiter, with a new Redis store, on the same server, at the same
// instant. 10 per 10 s with 8 spent, then 5 per 10 s: none more passes
// (rate_limit_v2 let 1 through on GCRA); 5 per 10 s with 5 spent, then 10
// per 10 s: exactly 5 more (v2 let none through on GCRA).
func TestPlanChangeAcrossARestartOnRedis(t *testing.T) {
	srv := redistest.NewServer(t)
	const route = "GET /api/v1/quota"
	// limiter boots a Limiter on the server, the tenant on the "pro" plan
	// (10 per 10 s) or on the profile's own 5 per 10 s.
	limiter := func(t *testing.T, algo domain.Algorithm, tenant string, pro bool) *rig {
		t.Helper()
		cfg := testConfig()
		cfg.StoreTimeout = 2 * time.Second // a correctness test on a shared machine
		cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{
			Name: "quota", Family: domain.FamilyRead, Routes: []string{route},
			Windows: app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 5, Period: 10 * time.Second, Algorithm: algo}}},
		})
		if pro {
			cfg.Plans = []app.PlanConfig{{
				Name: "pro", Tenants: []string{tenant},
				Profiles: map[string]app.PlanProfileConfig{"quota": {Windows: app.PlanWindowsConfig{
					Tenant: []app.PlanWindowConfig{{Name: "sustained", Limit: 10}},
				}}},
			}}
		}
		s, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone, Time: redis.CallerTime, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("redis.New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return newRigProber(t, cfg, newFaulty(s), s.Prober(), newLocal(t))
	}
	// spend evaluates n requests of tenant and returns how many passed.
	spend := func(t *testing.T, r *rig, tenant string, n int) int {
		t.Helper()
		passed := 0
		for range n {
			d := r.eval(t, app.Request{Route: route, ClientIP: rawIP, Tenant: tenant})
			switch d.State {
			case domain.Allowed:
				passed++
			case domain.Throttled:
			default:
				t.Fatalf("decision %s (%s): the store did not decide", d.State, d.Cause)
			}
		}
		return passed
	}
	for _, algo := range []domain.Algorithm{domain.GCRA, domain.SlidingLog} {
		t.Run(algo.String(), func(t *testing.T) {
			t.Run("Downgraded", func(t *testing.T) {
				tenant := "downgraded-" + algo.String()
				before := limiter(t, algo, tenant, true)
				if got := spend(t, before, tenant, 8); got != 8 {
					t.Fatalf("on 10 per 10 s: %d of 8 passed", got)
				}
				after := limiter(t, algo, tenant, false)
				if got := spend(t, after, tenant, 5); got != 0 {
					t.Errorf("after the move to 5 per 10 s with 8 spent: %d more passed, want 0", got)
				}
			})
			t.Run("Upgraded", func(t *testing.T) {
				tenant := "upgraded-" + algo.String()
				before := limiter(t, algo, tenant, false)
				if got := spend(t, before, tenant, 7); got != 5 {
					t.Fatalf("on 5 per 10 s: %d of 7 passed", got)
				}
				after := limiter(t, algo, tenant, true)
				d := after.eval(t, app.Request{Route: route, ClientIP: rawIP, Tenant: tenant})
				if d.State != domain.Allowed || d.Remaining != 4 {
					t.Fatalf("after the move to 10 per 10 s with 5 spent: %s with %d remaining, want allowed with 4", d.State, d.Remaining)
				}
				if got := 1 + spend(t, after, tenant, 10); got != 5 {
					t.Errorf("after the move to 10 per 10 s with 5 spent: %d more passed, want 5", got)
				}
			})
		})
	}
}

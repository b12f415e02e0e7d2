package app_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// exampleSecret stands for the 32 random bytes a service reads from
// RATE_LIMIT_HMAC_SECRET; never commit a real one.
const exampleSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// newExampleStores returns a primary and a fallback store. A service
// uses Redis (adapters/redis) as its primary; the examples run on two
// in-process stores.
func newExampleStores() (primary, fallback *local.Store) {
	primary, _ = local.New(local.Config{})
	fallback, _ = local.New(local.Config{})
	return primary, fallback
}

// ExampleNew wires a Limiter and decides requests of a login route limited
// to 3 per minute per ip.
func ExampleNew() {
	cfg, err := app.ParseConfig([]byte(`
profiles:
  - name: login
    family: auth
    routes: ["POST /api/v1/login"]
    windows:
      ip: [{name: burst, limit: 3, period: 1m}]
`), func(k string) (string, bool) {
		if k == app.EnvHMACSecret {
			return exampleSecret, true
		}
		return "", false
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	primary, fallback := newExampleStores()
	defer primary.Close()
	defer fallback.Close()
	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	req := app.Request{Route: "POST /api/v1/login", ClientIP: netip.MustParseAddr("203.0.113.7")}
	for range 4 {
		d, err := l.Evaluate(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.State, d.Remaining, d.Blocks())
	}
	d, _ := l.Evaluate(context.Background(), app.Request{Route: "GET /nowhere", ClientIP: req.ClientIP})
	fmt.Println(d.State, d.Cause)
	// Output:
	// ALLOWED 2 false
	// ALLOWED 1 false
	// ALLOWED 0 false
	// THROTTLED 0 true
	// REJECTED_INVALID_CONTEXT profile_missing
}

// ExampleLimiter_AllowDual checks a tenant and a user layer atomically,
// ADR-002's interface: when either layer refuses, neither is consumed.
func ExampleLimiter_AllowDual() {
	primary, fallback := newExampleStores()
	defer primary.Close()
	defer fallback.Close()
	l, err := app.New(app.Config{HMACSecret: exampleSecret}, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	for _, user := range []string{"alice", "alice", "alice", "bob"} {
		allowed, tenantLeft, userLeft, err := l.AllowDual("acme", 3, user, 2)
		fmt.Println(user, allowed, tenantLeft, userLeft, err)
	}
	// Output:
	// alice true 2 1 <nil>
	// alice true 1 0 <nil>
	// alice false 1 0 <nil>
	// bob true 0 1 <nil>
}

// Example_plans gives tenant acme ten times the search quota, within the
// plan ceiling; other tenants keep the profile's.
func Example_plans() {
	cfg := app.Config{
		HMACSecret: exampleSecret,
		Profiles: []app.ProfileConfig{{
			Name: "search", Family: domain.FamilyRead, Routes: []string{"GET /search"},
			Windows: app.WindowsConfig{Tenant: []app.WindowConfig{{Name: "sustained", Limit: 100, Period: time.Minute}}},
		}},
		Plans: []app.PlanConfig{{
			Name: "pro", Tenants: []string{"acme"},
			Profiles: map[string]app.PlanProfileConfig{"search": {Multiplier: 10}},
		}},
	}
	primary, fallback := newExampleStores()
	defer primary.Close()
	defer fallback.Close()
	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	ip := netip.MustParseAddr("198.51.100.1")
	for _, tenant := range []string{"acme", "globex"} {
		d, _ := l.Evaluate(context.Background(), app.Request{Route: "GET /search", ClientIP: ip, Tenant: tenant})
		fmt.Printf("%s: plan %q, limit %d, remaining %d\n", tenant, d.Plan, d.Limit, d.Remaining)
	}
	// Output:
	// acme: plan "pro", limit 1000, remaining 999
	// globex: plan "", limit 100, remaining 99
}

// ExampleLimiter_Peek shows a quota without consuming it, and Reset
// unblocking a user by raw identity.
func ExampleLimiter_Peek() {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	primary, fallback := newExampleStores()
	defer primary.Close()
	defer fallback.Close()
	cfg := app.Config{
		HMACSecret: exampleSecret,
		Profiles: []app.ProfileConfig{{
			Name: "exports", Family: domain.FamilyCostly, Routes: []string{"POST /exports"},
			Windows: app.WindowsConfig{User: []app.WindowConfig{{Name: "daily", Limit: 2, Period: 24 * time.Hour}}},
		}},
	}
	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Clock: clock, Recorder: recordertest.Discard{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	ctx := context.Background()
	req := app.Request{Route: "POST /exports", ClientIP: netip.MustParseAddr("192.0.2.1"), User: "carol@example.org"}
	for range 2 {
		l.Evaluate(ctx, req)
	}
	d, _ := l.Peek(ctx, req)
	fmt.Println("quota:", d.State, d.Remaining, "retry in", d.RetryAfter)
	res, err := l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionUser, User: "Carol@Example.org", Actor: "support-7"})
	fmt.Println("reset:", res.Deleted, "of", res.Keys, "keys deleted,", err)
	d, _ = l.Peek(ctx, req)
	fmt.Println("quota:", d.State, d.Remaining)
	// Output:
	// quota: THROTTLED 0 retry in 24h0m0s
	// reset: 1 of 2 keys deleted, <nil>
	// quota: ALLOWED 2
}

package app_test

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// storeKeyRE is the only shape of a key the pipeline hands a store:
// every identifier part a pseudonym (docs/adr/004), so no raw route,
// address or identity can reach a key.
var storeKeyRE = regexp.MustCompile(`^rl:\{[0-9a-f]{32}\}:(ip|user|apikey|tenant|tenant_global):[0-9a-f]{32}:([a-z0-9_-]{1,64}|__global__):[a-z0-9_-]{1,32}$`)

// keyTap is a store that keeps the keys it is handed.
type keyTap struct {
	ports.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyTap) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	k.mu.Lock()
	for _, l := range limits {
		k.keys = append(k.keys, l.Key)
	}
	k.mu.Unlock()
	return k.Store.Evaluate(ctx, now, limits)
}

func (k *keyTap) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := k.keys
	k.keys = nil
	return keys
}

// FuzzEvaluate drives the whole pipeline with what a client controls: the
// route (as a router would hand it over), the address, the identities and
// the cost. The decision is always complete and terminal, invalid input
// is always RejectedInvalidContext, and every key reaching the store is
// made of pseudonyms. Seeds: testdata/fuzz.
func FuzzEvaluate(f *testing.F) {
	tap := &keyTap{Store: conformance.NewReferenceStore()}
	l, err := app.New(fuzzConfig(), app.Deps{Store: tap, Fallback: conformance.NewReferenceStore(), Recorder: recordertest.Discard{}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = l.Close() })
	f.Add(routeRead, "203.0.113.7", rawUser, rawTenant, rawAPIKey, int64(0))
	f.Add("GET /api/v1/users/:id", "[2001:db8::1]:443", "", "", "", int64(1))
	f.Add(routeLogin, "::ffff:10.0.0.1", "bob@example.org", "", "", int64(2))
	f.Add("/pkg.Service/Export", "10.0.0.1:1", "", "t", "k", int64(-1))
	f.Add("GET /a b", "not an ip", "u\x00", "", "", int64(0))
	f.Add("api.example.org/api/v1/exports", "192.0.2.1", " ", "acme", "", int64(1<<62))
	f.Fuzz(func(t *testing.T, route, rawIP, user, tenant, apiKey string, cost int64) {
		ip, ipErr := domain.ParseClientIP(rawIP)
		d, err := l.Evaluate(context.Background(), app.Request{Route: route, ClientIP: ip, User: user, Tenant: tenant, APIKey: apiKey, Cost: cost})
		if err != nil {
			t.Fatalf("Evaluate: %v (a discarding recorder never fails)", err)
		}
		if !slices.Contains(domain.Causes(), d.Cause) {
			t.Fatalf("cause %q is outside the closed set", d.Cause)
		}
		switch d.State {
		case domain.Allowed, domain.Throttled:
			if d.Profile == "" || d.Family == 0 {
				t.Fatalf("decided %s without a profile: %+v", d.State, d)
			}
		case domain.RejectedInvalidContext:
		default:
			t.Fatalf("state %s with a healthy store", d.State)
		}
		invalid := ipErr != nil || cost < 0
		for _, id := range []string{user, tenant, apiKey} {
			if _, err := domain.NormaliseIdentifier(id); id != "" && err != nil {
				invalid = true
			}
		}
		if invalid && d.State != domain.RejectedInvalidContext {
			t.Fatalf("invalid context decided %s (cause %s)", d.State, d.Cause)
		}
		for _, k := range tap.take() {
			if !storeKeyRE.MatchString(k) {
				t.Fatalf("store key %q is not made of pseudonyms", k)
			}
		}
	})
}

// fuzzConfig has a route of each form a router hands over: a ServeMux
// pattern with a wildcard, an Express-style template, a bare path and a
// gRPC full method.
func fuzzConfig() app.Config {
	cfg := testConfig()
	cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{
		Name: "grpc_export", Family: domain.FamilyCostly,
		Routes:  []string{"/pkg.Service/Export", "/files/:name", "GET /static/{path...}"},
		Windows: app.WindowsConfig{APIKey: []app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}}},
	})
	return cfg
}

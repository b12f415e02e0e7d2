package app_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// goodYAML is testdata/full.yaml: every field of the configuration.
var goodYAML = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func env(m map[string]string) app.LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func withSecret() app.LookupEnv { return env(map[string]string{app.EnvHMACSecret: testSecret}) }

func TestParseConfigReadsEveryField(t *testing.T) {
	cfg, err := app.ParseConfig([]byte(goodYAML), withSecret())
	require.NoError(t, err)
	assert.Equal(t, "redis://127.0.0.1:6379/0", cfg.RedisURL)
	assert.Equal(t, app.Secret(testSecret), cfg.HMACSecret)
	assert.Equal(t, 40*time.Millisecond, cfg.StoreTimeout)
	assert.Equal(t, 800*time.Millisecond, cfg.ShedAfter)
	assert.Equal(t, 5*time.Second, cfg.ProbeInterval)
	assert.Equal(t, 500*time.Millisecond, cfg.RecoveryProbeInterval)
	assert.Equal(t, time.Second, cfg.ProbeTimeout, "default probe timeout")
	assert.Equal(t, 4, cfg.ClearingProbes)
	assert.Equal(t, 7, cfg.BreakerFailures)
	assert.Equal(t, int64(256), cfg.RedisMemoryBudgetMB)
	assert.True(t, cfg.ShadowMode)
	assert.Equal(t, "api-7", cfg.InstanceID)
	assert.Equal(t, 50.0, cfg.PlanCeiling)
	assert.Equal(t, 64, cfg.RefusalCacheSize)
	assert.Equal(t, 500*time.Millisecond, cfg.RefusalCacheTTL)
	assert.Equal(t, -1, cfg.PseudonymCacheSize)
	assert.Equal(t, app.DegradedConfig{Read: domain.ActionLocal, Auth: domain.ActionDeny, Costly: domain.ActionDeny}, cfg.Degraded)
	assert.Equal(t, app.FacadeConfig{
		Tenant: []app.FacadeWindowConfig{
			{Name: "sustained", Period: 30 * time.Second},
			{Name: "burst", Period: time.Second, Limit: 20, Algorithm: domain.GCRA},
		},
		User:     []app.FacadeWindowConfig{{Name: "sustained", Period: 30 * time.Second}},
		Family:   domain.FamilyCostly,
		Degraded: domain.ActionDeny,
	}, cfg.Facade)
	require.Len(t, cfg.Profiles, 2)
	assert.Equal(t, int64(1), cfg.Profiles[0].Cost, "default cost")
	assert.Equal(t, int64(2), cfg.Profiles[1].Cost)
	assert.Equal(t, domain.GCRA, cfg.Profiles[0].Windows.IP[1].Algorithm)
	assert.Equal(t, time.Minute, cfg.Profiles[0].Windows.IP[1].Period)
	require.Len(t, cfg.Plans, 1)
	assert.Equal(t, []string{"acme-corp"}, cfg.Plans[0].Tenants)
	assert.Equal(t, []string{"sk_live_pro"}, cfg.Plans[0].APIKeys)
	assert.Equal(t, 10.0, cfg.Plans[0].Profiles["users_read"].Multiplier)
	assert.Equal(t, []app.PlanWindowConfig{{Name: "burst", Limit: 50}}, cfg.Plans[0].Profiles["login"].Windows.IP)
}

func TestConfigDefaults(t *testing.T) {
	cfg := app.Config{}.WithDefaults()
	assert.Equal(t, 50*time.Millisecond, cfg.StoreTimeout)
	assert.Equal(t, 10*time.Second, cfg.ProbeInterval)
	assert.Equal(t, 3, cfg.ClearingProbes)
	assert.Equal(t, 5, cfg.BreakerFailures)
	assert.Equal(t, float64(app.DefaultPlanCeiling), cfg.PlanCeiling)
	assert.Equal(t, app.DegradedConfig{Read: domain.ActionBypass, Auth: domain.ActionDeny, Costly: domain.ActionDeny}, cfg.Degraded)
	one := []app.FacadeWindowConfig{{Name: "sustained", Period: time.Minute}}
	assert.Equal(t, app.FacadeConfig{Tenant: one, User: one, Family: domain.FamilyRead, Degraded: domain.ActionLocal}, cfg.Facade)
	assert.NotEmpty(t, cfg.InstanceID)
	assert.Empty(t, cfg.HMACSecret, "the secret has no default")
}

// TestFacadeOnlyConfigIsValid: a service that only uses Allow and
// AllowDual needs no route profile.
func TestFacadeOnlyConfigIsValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "facade-only.yaml"))
	require.NoError(t, err)
	cfg, err := app.ParseConfig(b, withSecret())
	require.NoError(t, err)
	assert.Empty(t, cfg.Profiles)
	require.NoError(t, app.Config{HMACSecret: testSecret}.WithDefaults().Validate(), "nothing but the secret is valid too")

	l, err := app.New(cfg, app.Deps{Store: conformance.NewReferenceStore(), Fallback: conformance.NewReferenceStore(), Recorder: recordertest.Discard{}})
	require.NoError(t, err)
	defer l.Close()
	ok, rem, err := l.Allow("acme", 3)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 2, rem)
}

func TestEnvironmentOverridesFile(t *testing.T) {
	other := strings.Repeat("ab", 32)
	y := "hmac_secret: " + testSecret + "\nredis_url: redis://file:1\n" + goodYAML[strings.Index(goodYAML, "profiles:"):]
	cfg, err := app.ParseConfig([]byte(y), env(map[string]string{app.EnvHMACSecret: other, app.EnvRedisURL: "redis://env:2"}))
	require.NoError(t, err)
	assert.Equal(t, app.Secret(other), cfg.HMACSecret)
	assert.Equal(t, "redis://env:2", cfg.RedisURL)

	// An empty variable counts as unset: the file's values stay.
	cfg, err = app.ParseConfig([]byte(y), env(map[string]string{app.EnvHMACSecret: "", app.EnvRedisURL: ""}))
	require.NoError(t, err)
	assert.Equal(t, app.Secret(testSecret), cfg.HMACSecret)
	assert.Equal(t, "redis://file:1", cfg.RedisURL)
}

func TestLoadConfigFromFile(t *testing.T) {
	cfg, err := app.LoadConfig(filepath.Join("testdata", "full.yaml"), withSecret())
	require.NoError(t, err)
	assert.Len(t, cfg.Profiles, 2)

	_, err = app.LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"), withSecret())
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)

	big := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("instance_id: "+strings.Repeat("x", app.MaxConfigBytes)), 0o600))
	_, err = app.LoadConfig(big, withSecret())
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "larger than")
}

func TestSecretNeverPrinted(t *testing.T) {
	cfg, err := app.ParseConfig([]byte(goodYAML), withSecret())
	require.NoError(t, err)
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprint(cfg.HMACSecret)} {
		assert.NotContains(t, s, testSecret)
	}
}

// TestBootFailures: each boot failure is a *domain.ConfigError (code
// ERR-172-05) naming its field, with its own sentinel.
func TestBootFailures(t *testing.T) {
	profilesYAML := goodYAML[strings.Index(goodYAML, "profiles:"):]
	tests := []struct {
		name     string
		yaml     string
		env      map[string]string
		exposed  []string // for the route check
		sentinel error
		field    string
		reason   string
	}{
		{
			name: "missing secret", yaml: profilesYAML, env: map[string]string{},
			sentinel: app.ErrSecretMissing, field: "hmac_secret", reason: "required",
		},
		{
			name: "short secret", yaml: profilesYAML, env: map[string]string{app.EnvHMACSecret: testSecret[:62]},
			sentinel: app.ErrSecretShort, field: "hmac_secret", reason: "too short",
		},
		{
			name: "secret not hex", yaml: profilesYAML, env: map[string]string{app.EnvHMACSecret: strings.Repeat("zz", 32)},
			sentinel: app.ErrSecretMalformed, field: "hmac_secret", reason: "hex",
		},
		{
			name: "secret too long", yaml: profilesYAML, env: map[string]string{app.EnvHMACSecret: testSecret + "00"},
			sentinel: app.ErrSecretMalformed, field: "hmac_secret", reason: "too long",
		},
		{
			name: "unknown top-level field", yaml: "hot_reload: true\n" + profilesYAML,
			sentinel: app.ErrUnknownField, field: "hot_reload", reason: "unknown field",
		},
		{
			name:     "unknown nested field",
			yaml:     strings.Replace(profilesYAML, "{name: burst, limit: 5, period: 10s}", "{name: burst, limit: 5, period: 10s, allow_list: [1.2.3.4]}", 1),
			sentinel: app.ErrUnknownField, field: "profiles[login].windows.ip[0].allow_list", reason: "unknown field",
		},
		{
			name: "route without profile", yaml: profilesYAML, exposed: []string{"GET /api/v1/users/{id}", "POST /api/v1/orders"},
			sentinel: app.ErrRouteWithoutProfile, field: "profiles", reason: `"POST /api/v1/orders"`,
		},
		{
			name: "limit 0", yaml: strings.Replace(profilesYAML, "limit: 5,", "limit: 0,", 1),
			sentinel: app.ErrZeroLimit, field: "profiles[login].windows.ip[0].limit", reason: "at least 1",
		},
	}
	seen := map[error]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.env
			if e == nil {
				e = map[string]string{app.EnvHMACSecret: testSecret}
			}
			cfg, err := app.ParseConfig([]byte(tt.yaml), env(e))
			if tt.exposed != nil {
				require.NoError(t, err)
				err = cfg.CheckRoutes(tt.exposed)
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.sentinel)
			assert.ErrorIs(t, err, domain.ErrInvalidConfig)
			assert.Equal(t, domain.CodeInvalidConfig, domain.CodeOf(err))
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.field, ce.Field)
			assert.Contains(t, ce.Reason, tt.reason)
			assert.NotContains(t, err.Error(), testSecret[:40], "an error must not quote the secret")
			for other := range seen {
				if other == tt.sentinel {
					continue
				}
				assert.NotErrorIs(t, err, other, "boot failures must be distinguishable")
			}
			seen[tt.sentinel] = true
		})
	}
}

// TestNewRefusesInvalidConfig: New validates too, so a config built in
// code cannot skip the checks.
func TestNewRefusesInvalidConfig(t *testing.T) {
	cfg := testConfig()
	cfg.HMACSecret = ""
	_, err := app.New(cfg, app.Deps{})
	assert.ErrorIs(t, err, app.ErrSecretMissing)

	cfg = testConfig()
	cfg.Profiles[1].Windows.IP[0].Limit = 0
	_, err = app.New(cfg, app.Deps{})
	assert.ErrorIs(t, err, app.ErrZeroLimit)
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "profiles[login].windows.ip[0].limit", ce.Field)

	cfg = testConfig()
	_, err = app.New(cfg, app.Deps{Recorder: &recorder{}})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "deps.store", ce.Field)
}

func TestConfigRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*app.Config)
		field  string
		reason string
	}{
		{"bad family", func(c *app.Config) { c.Profiles[0].Family = 9 }, "profiles[users_read].family", "unknown value"},
		{"no family", func(c *app.Config) { c.Profiles[0].Family = 0 }, "profiles[users_read].family", "required"},
		{"bad profile name", func(c *app.Config) { c.Profiles[0].Name = "Users Read" }, "profiles[0].name", "[a-z0-9_-]"},
		{"duplicate profile name", func(c *app.Config) { c.Profiles[1].Name = "users_read" }, "profiles", "unique"},
		{"duplicate window name", func(c *app.Config) { c.Profiles[1].Windows.IP[1].Name = "burst" }, "profiles[login].windows.ip", "unique"},
		{"negative limit", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Limit = -3 }, "profiles[login].windows.ip[0].limit", "at least 1"},
		{"no period", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Period = 0 }, "profiles[login].windows.ip[0].period", "required"},
		{"sub-microsecond period", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Period = time.Second + 1 }, "profiles[login].windows.ip[0].period", "microseconds"},
		{"bad algorithm", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Algorithm = 7 }, "profiles[login].windows.ip[0].algorithm", "unknown algorithm"},
		{"sliding log over its cap", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Limit = domain.MaxSlidingLogLimit + 1 }, "profiles[login].windows.ip[0].limit", "use gcra"},
		{"no window", func(c *app.Config) { c.Profiles[1].Windows = app.WindowsConfig{} }, "profiles[login].windows", "at least one window"},
		{"cost over a limit", func(c *app.Config) { c.Profiles[1].Cost = 4 }, "profiles[login].cost", "exceeds the limit 3"},
		{"no route", func(c *app.Config) { c.Profiles[1].Routes = nil }, "profiles[login].routes", "required"},
		{"route outside the pattern", func(c *app.Config) { c.Profiles[1].Routes = []string{"/login page"} }, "profiles[login].routes[0]", "method"},
		{"root route", func(c *app.Config) { c.Profiles[1].Routes = []string{"/"} }, "profiles[login].routes[0]", "does not match"},
		{"route in two profiles", func(c *app.Config) { c.Profiles[2].Routes = []string{"POST /api/v1/login"} }, "profiles[exports].routes[0]", `profile "login"`},
		{"same route in both forms", func(c *app.Config) { c.Profiles[2].Routes = []string{"GET /api/v1/users/:id"} }, "profiles[exports].routes[0]", `profile "users_read"`},
		{"tenant_global windows disagree", func(c *app.Config) {
			c.Profiles[1].Windows.TenantGlobal = []app.WindowConfig{{Name: "sustained", Limit: 10, Period: time.Minute}}
		}, "profiles[login].windows.tenant_global[0]", "differs"},
		{"bad degraded action", func(c *app.Config) { c.Degraded.Auth = 9 }, "degraded.auth", "unknown value"},
		{"probe timeout over interval", func(c *app.Config) { c.ProbeInterval, c.ProbeTimeout = time.Second, 2*time.Second }, "probe_timeout", "probe_interval"},
		{"store timeout too long", func(c *app.Config) { c.StoreTimeout = time.Minute }, "store_timeout", "at most"},
		{"shed bound too long", func(c *app.Config) { c.ShedAfter = time.Hour }, "shed_after", "at most"},
		{"bad redis url", func(c *app.Config) { c.RedisURL = "not a url" }, "redis_url", "URL"},
		{"bad facade degraded", func(c *app.Config) { c.Facade.Degraded = 9 }, "facade.degraded", "unknown value"},
		{"facade window without period", func(c *app.Config) {
			c.Facade.Tenant = []app.FacadeWindowConfig{{Name: "sustained"}}
		}, "facade.tenant[0].period", "required"},
		{"facade fixed limit over the sliding-log cap", func(c *app.Config) {
			c.Facade.User = []app.FacadeWindowConfig{{Name: "sustained", Period: time.Minute, Limit: domain.MaxSlidingLogLimit + 1}}
		}, "facade.user[0].limit", "use gcra"},
		{"plan on an unknown profile", func(c *app.Config) {
			c.Plans = []app.PlanConfig{{Name: "pro", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{"nope": {Multiplier: 2}}}}
		}, "plans[pro].profiles.nope", "no profile"},
		{"plan names a window the profile lacks", func(c *app.Config) {
			c.Plans = []app.PlanConfig{{Name: "pro", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{
				"login": {Windows: app.PlanWindowsConfig{Tenant: []app.PlanWindowConfig{{Name: "burst", Limit: 9}}}}}}}
		}, "plans[pro].profiles.login.windows", "cannot add or remove windows"},
		{"plan above the ceiling", func(c *app.Config) {
			c.PlanCeiling = 10
			c.Plans = []app.PlanConfig{{Name: "pro", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{"login": {Multiplier: 11}}}}
		}, "plans[pro].profiles.login.windows.ip[burst]", "plan_ceiling"},
		{"plan that changes nothing", func(c *app.Config) {
			c.Plans = []app.PlanConfig{{Name: "pro", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{"login": {}}}}
		}, "plans[pro].profiles.login", "changes nothing"},
		{"plan that drops a limit below the cost", func(c *app.Config) {
			c.Profiles[1].Cost = 2
			c.Plans = []app.PlanConfig{{Name: "free", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{"login": {Multiplier: 0.1}}}}
		}, "plans[free].profiles.login.cost", "exceeds the limit 1"},
		{"tenant on two plans", func(c *app.Config) {
			c.Plans = []app.PlanConfig{
				{Name: "pro", Tenants: []string{"acme"}, Profiles: map[string]app.PlanProfileConfig{"login": {Multiplier: 2}}},
				{Name: "max", Tenants: []string{" acme "}, Profiles: map[string]app.PlanProfileConfig{"login": {Multiplier: 3}}},
			}
		}, "plans[max].tenants[0]", `already on plan "pro"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mutate(&cfg)
			err := cfg.WithDefaults().Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, domain.ErrInvalidConfig)
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce, "%v", err)
			assert.Equal(t, tt.field, ce.Field, "%v", err)
			assert.Contains(t, ce.Reason, tt.reason, "%v", err)
			assert.False(t, errors.Is(err, app.ErrSecretMissing))
		})
	}
	require.NoError(t, testConfig().WithDefaults().Validate())
}

func TestParseConfigRejectsMalformedYAML(t *testing.T) {
	for name, y := range map[string]string{
		"not yaml":          "profiles: [",
		"duration as int":   "store_timeout: 50\n",
		"two documents":     goodYAML + "\n---\nshadow_mode: true\n",
		"limit not integer": strings.Replace(goodYAML, "limit: 5,", "limit: five,", 1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := app.ParseConfig([]byte(y), withSecret())
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce, "%v", err)
			assert.ErrorIs(t, err, domain.ErrInvalidConfig)
		})
	}
}

func TestCheckRoutes(t *testing.T) {
	cfg := testConfig()
	tests := []struct {
		name    string
		exposed []string
		missing string
	}{
		{name: "all covered", exposed: []string{"GET /api/v1/users/{id}", "POST /api/v1/login", "/api/v1/exports", "GET /api/v1/exports"}},
		{name: "express form of a covered pattern", exposed: []string{"GET /api/v1/users/:id"}},
		{name: "host is ignored", exposed: []string{"GET api.example.org/api/v1/users/{id}"}},
		{name: "method not covered", exposed: []string{"POST /api/v1/users/{id}"}, missing: `"POST /api/v1/users/{id}"`},
		{name: "any-method route needs a method-less profile route", exposed: []string{"/api/v1/login"}, missing: `"/api/v1/login"`},
		{name: "grpc method", exposed: []string{"/pkg.Svc/Method"}, missing: `"/pkg.Svc/Method"`},
		{name: "invalid route", exposed: []string{"/"}, missing: "cannot be limited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := cfg.CheckRoutes(tt.exposed)
			if tt.missing == "" {
				require.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, app.ErrRouteWithoutProfile)
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, ce.Reason, tt.missing)
		})
	}
}

// TestYAMLErrorsNameTheirPath: a value the decoder refuses is reported at
// its YAML path, with its line.
func TestYAMLErrorsNameTheirPath(t *testing.T) {
	tests := []struct {
		name, from, to, field, reason string
		sentinel                      error
	}{
		{"unknown algorithm", "{name: burst, limit: 5, period: 10s}", "{name: burst, limit: 5, period: 10s, algorithm: leaky}",
			"profiles[login].windows.ip[0].algorithm", `unknown algorithm "leaky"`, nil},
		{"unknown family", "family: auth", "family: write", "profiles[login].family", `unknown route family "write"`, nil},
		{"unknown degraded action", "read: local", "read: allow", "degraded.read", `unknown degraded action "allow"`, nil},
		{"duration that does not parse", "period: 10s}", "period: 10 seconds}", "profiles[login].windows.ip[0].period", "cannot be read as time.Duration", nil},
		{"unknown field in a plan", "users_read: {multiplier: 10}", "users_read: {multiplier: 10, bypass: true}",
			"plans[pro].profiles.users_read.bypass", "unknown field", app.ErrUnknownField},
		{"unknown field in the facade", "  family: costly", "  family: costly\n  allow_list: [acme]", "facade.allow_list", "unknown field", app.ErrUnknownField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Contains(t, goodYAML, tt.from)
			_, err := app.ParseConfig([]byte(strings.Replace(goodYAML, tt.from, tt.to, 1)), withSecret())
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce, "%v", err)
			assert.Equal(t, tt.field, ce.Field, "%v", err)
			assert.Contains(t, ce.Reason, tt.reason)
			assert.Contains(t, ce.Reason, "line ")
			if tt.sentinel != nil {
				assert.ErrorIs(t, err, tt.sentinel)
			}
		})
	}
}

// TestParseConfigIsLinearOnAdversarialFiles is the regression test of two
// filed defects: a YAML merge key referring to itself (or a cycle of
// anchors) ended the process in a stack overflow, and duplicated merge
// keys nested 32 deep made parsing run for about 20 minutes, because the
// unknown-field check walked aliases and merges. Each file here must be
// refused with a *domain.ConfigError; the 30 s guard only catches a hang
// (each parse takes about a millisecond), it measures nothing.
func TestParseConfigIsLinearOnAdversarialFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "adversarial", "*.yaml"))
	require.NoError(t, err)
	docs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		docs[filepath.Base(f)] = b
	}
	require.Len(t, docs, 6)
	docs["nested sequences 100 000 deep"] = []byte("profiles: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000))
	docs["nested mappings 20 000 deep"] = []byte("degraded: " + strings.Repeat("{a: ", 20_000) + "1" + strings.Repeat("}", 20_000))
	docs["a scalar of 1 MiB"] = []byte("instance_id: " + strings.Repeat("x", app.MaxConfigBytes-20))
	docs["over the size bound"] = []byte("instance_id: " + strings.Repeat("x", app.MaxConfigBytes))
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := app.ParseConfig(doc, withSecret())
				done <- err
			}()
			select {
			case err := <-done:
				var ce *domain.ConfigError
				require.ErrorAs(t, err, &ce, "%v", err)
				assert.ErrorIs(t, err, domain.ErrInvalidConfig)
			case <-time.After(30 * time.Second):
				t.Fatal("parsing hangs")
			}
		})
	}
}

// TestShedAfterDefaults: shed_after defaults to 1 s, and a value below the
// store deadline (set, or left from an earlier WithDefaults) counts as
// the store deadline.
func TestShedAfterDefaults(t *testing.T) {
	assert.Equal(t, app.DefaultShedAfter, app.Config{}.WithDefaults().ShedAfter)
	assert.Equal(t, 2*time.Second, app.Config{StoreTimeout: 2 * time.Second}.WithDefaults().ShedAfter)
	c := app.Config{}.WithDefaults()
	c.StoreTimeout = 3 * time.Second
	assert.Equal(t, 3*time.Second, c.WithDefaults().ShedAfter)
	assert.Equal(t, 300*time.Millisecond, app.Config{ShedAfter: 300 * time.Millisecond}.WithDefaults().ShedAfter)
}

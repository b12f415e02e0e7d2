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
	"github.com/sluicehq/sluice/domain"
)

const goodYAML = `
redis_url: redis://127.0.0.1:6379/0
store_timeout: 40ms
probe_interval: 5s
clearing_probes: 4
breaker_failures: 7
redis_memory_budget_mb: 256
shadow_mode: true
instance_id: api-7
degraded:
  read: local
profiles:
  - name: users_read
    family: read
    routes: ["GET /api/v1/users/{id}", "/api/v1/users"]
    windows:
      ip:
        - {name: burst, limit: 20, period: 1s}
        - {name: sustained, limit: 300, period: 1m, algorithm: gcra}
      user:
        - {name: burst, limit: 10, period: 1s}
      tenant_global:
        - {name: sustained, limit: 5000, period: 1m}
  - name: login
    family: auth
    cost: 2
    routes: ["/auth.v1.AuthService/Login"]
    windows:
      ip:
        - {name: burst, limit: 5, period: 10s}
facade:
  period: 30s
`

func env(m map[string]string) app.LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func withSecret() app.LookupEnv { return env(map[string]string{app.EnvHMACSecret: testSecret}) }

func TestParseConfigReadsEveryFieldAndDefaults(t *testing.T) {
	cfg, err := app.ParseConfig([]byte(goodYAML), withSecret())
	require.NoError(t, err)
	assert.Equal(t, "redis://127.0.0.1:6379/0", cfg.RedisURL)
	assert.Equal(t, app.Secret(testSecret), cfg.HMACSecret)
	assert.Equal(t, 40*time.Millisecond, cfg.StoreTimeout)
	assert.Equal(t, 5*time.Second, cfg.ProbeInterval)
	assert.Equal(t, time.Second, cfg.ProbeTimeout, "default probe timeout")
	assert.Equal(t, 4, cfg.ClearingProbes)
	assert.Equal(t, 7, cfg.BreakerFailures)
	assert.Equal(t, int64(256), cfg.RedisMemoryBudgetMB)
	assert.True(t, cfg.ShadowMode)
	assert.Equal(t, "api-7", cfg.InstanceID)
	assert.Equal(t, app.DegradedConfig{Read: "local", Auth: "deny", Costly: "deny"}, cfg.Degraded)
	assert.Equal(t, app.FacadeConfig{Period: 30 * time.Second, Algorithm: "sliding_log", Family: "read", Degraded: "local"}, cfg.Facade)
	require.Len(t, cfg.Profiles, 2)
	assert.Equal(t, int64(1), cfg.Profiles[0].Cost, "default cost")
	assert.Equal(t, int64(2), cfg.Profiles[1].Cost)
	assert.Equal(t, "gcra", cfg.Profiles[0].Windows.IP[1].Algorithm)
	assert.Equal(t, time.Minute, cfg.Profiles[0].Windows.IP[1].Period)
}

func TestConfigDefaults(t *testing.T) {
	cfg := app.Config{}.WithDefaults()
	assert.Equal(t, 50*time.Millisecond, cfg.StoreTimeout)
	assert.Equal(t, 10*time.Second, cfg.ProbeInterval)
	assert.Equal(t, 3, cfg.ClearingProbes)
	assert.Equal(t, 5, cfg.BreakerFailures)
	assert.Equal(t, app.DegradedConfig{Read: "bypass", Auth: "deny", Costly: "deny"}, cfg.Degraded)
	assert.Equal(t, time.Minute, cfg.Facade.Period)
	assert.Equal(t, "sliding_log", cfg.Facade.Algorithm)
	assert.NotEmpty(t, cfg.InstanceID)
	assert.Empty(t, cfg.HMACSecret, "the secret has no default")
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
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(path, []byte(goodYAML), 0o600))
	cfg, err := app.LoadConfig(path, withSecret())
	require.NoError(t, err)
	assert.Len(t, cfg.Profiles, 2)

	_, err = app.LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"), withSecret())
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
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
		{"no profile", func(c *app.Config) { c.Profiles = nil }, "profiles", "required"},
		{"bad family", func(c *app.Config) { c.Profiles[0].Family = "write" }, "profiles[users_read].family", "one of"},
		{"bad profile name", func(c *app.Config) { c.Profiles[0].Name = "Users Read" }, "profiles[0].name", "[a-z0-9_-]"},
		{"duplicate profile name", func(c *app.Config) { c.Profiles[1].Name = "users_read" }, "profiles", "unique"},
		{"duplicate window name", func(c *app.Config) { c.Profiles[1].Windows.IP[1].Name = "burst" }, "profiles[login].windows.ip", "unique"},
		{"negative limit", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Limit = -3 }, "profiles[login].windows.ip[0].limit", "at least 1"},
		{"no period", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Period = 0 }, "profiles[login].windows.ip[0].period", "required"},
		{"sub-microsecond period", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Period = time.Second + 1 }, "profiles[login].windows.ip[0].period", "microseconds"},
		{"bad algorithm", func(c *app.Config) { c.Profiles[1].Windows.IP[0].Algorithm = "token_bucket" }, "profiles[login].windows.ip[0].algorithm", "one of"},
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
		{"bad degraded action", func(c *app.Config) { c.Degraded.Auth = "allow" }, "degraded.auth", "one of"},
		{"probe timeout over interval", func(c *app.Config) { c.ProbeInterval, c.ProbeTimeout = time.Second, 2*time.Second }, "probe_timeout", "probe_interval"},
		{"store timeout too long", func(c *app.Config) { c.StoreTimeout = time.Minute }, "store_timeout", "at most"},
		{"bad redis url", func(c *app.Config) { c.RedisURL = "not a url" }, "redis_url", "URL"},
		{"bad facade degraded", func(c *app.Config) { c.Facade.Degraded = "open" }, "facade.degraded", "one of"},
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

package app_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://user:hunter2@127.0.0.1:6379/0": "redis://user:xxxxx@127.0.0.1:6379/0",
		"rediss://:hunter2@10.0.0.5:6380":       "rediss://:xxxxx@10.0.0.5:6380",
		"redis://127.0.0.1:6379":                "redis://127.0.0.1:6379",
		"redis://user@127.0.0.1:6379":           "redis://user@127.0.0.1:6379",
		"redis://user:hunter2@[::1":             "xxxxx@[::1", // does not parse
		"redis:user:hunter2@host:6379":          "xxxxx@host:6379",
		"10.0.0.5:6379":                         "10.0.0.5:6379", // the peer's host:port
		"":                                      "",
	} {
		assert.Equal(t, want, app.RedactURL(raw), "RedactURL(%q)", raw)
	}
}

// TestPrintedConfigHoldsNoCredential: a Config printed with fmt, or
// logged with log/slog's text or JSON handler, shows neither the Redis
// password nor the HMAC secret (37.9).
func TestPrintedConfigHoldsNoCredential(t *testing.T) {
	const password = "s3cr3t-redis-pw"
	cfg := testConfig()
	cfg.RedisURL = "redis://sluice:" + password + "@10.0.0.5:6379/0"
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		fmt.Fprintf(&out, verb+"\n", cfg)
		fmt.Fprintf(&out, verb+"\n", &cfg)
		fmt.Fprintf(&out, verb+"\n", struct{ Cfg app.Config }{cfg})
	}
	slog.New(slog.NewTextHandler(&out, nil)).Info("boot", "config", cfg)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("boot", "config", cfg)
	printed := out.String()
	require.NotContains(t, printed, password)
	require.NotContains(t, printed, testSecret)
	assert.Contains(t, printed, "redis://sluice:xxxxx@10.0.0.5:6379/0", "the URL is shown, its password redacted")
	assert.Contains(t, printed, "StoreTimeout", "the rest of the Config is printed")
}

// TestConfigErrorHoldsNoCredential: a REDIS_URL that fails validation
// is refused without its password in the error.
func TestConfigErrorHoldsNoCredential(t *testing.T) {
	const password = "s3cr3t-redis-pw"
	for _, raw := range []string{
		"redis://u:" + password + "@10.0.0.5:6379 x",
		"//u:" + password + "@[::1",
		"redis://u:" + password + "@10.0.0.5:port",
	} {
		_, err := app.ParseConfig([]byte("{}"), env(map[string]string{app.EnvHMACSecret: testSecret, app.EnvRedisURL: raw}))
		require.Error(t, err, raw)
		assert.NotContains(t, err.Error(), password)
	}
}

package app_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// FuzzParseConfig: whatever YAML and environment a deployment hands it,
// ParseConfig never panics; a refusal is made of *domain.ConfigError only
// (matched by errors.Is(err, domain.ErrInvalidConfig), code ERR-172-05) and
// never prints the HMAC secret; an accepted configuration is valid, its
// defaults are stable, and app.New boots on it. Seeds: the YAML files of
// testdata/ (the adversarial ones included) and testdata/fuzz.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	adversarial, _ := filepath.Glob(filepath.Join("testdata", "adversarial", "*.yaml"))
	for _, name := range append(files, adversarial...) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, testSecret, "")
	}
	f.Add([]byte("profiles: []\n"), "", "redis://127.0.0.1:6379")
	f.Add([]byte("hmac_secret: "+testSecret+"\nstore_timeout: 1ms\nprobe_interval: 1ms\n"), "", "")
	f.Add([]byte("{"), testSecret+" ", "::")
	f.Fuzz(func(t *testing.T, data []byte, secret, redisURL string) {
		env := func(k string) (string, bool) {
			switch k {
			case app.EnvHMACSecret:
				return secret, true
			case app.EnvRedisURL:
				return redisURL, true
			}
			return "", false
		}
		cfg, err := app.ParseConfig(data, env)
		if err != nil {
			checkConfigError(t, err)
			if len(secret) >= 8 && !strings.Contains(string(data), secret) && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error prints the secret: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a configuration Validate refuses: %v", err)
		}
		if again := cfg.WithDefaults(); !reflect.DeepEqual(again, cfg) {
			t.Fatalf("WithDefaults is not stable on a parsed configuration:\n%+v\n%+v", cfg, again)
		}
		l, err := app.New(cfg, app.Deps{
			Store:    conformance.NewReferenceStore(),
			Fallback: conformance.NewReferenceStore(),
			Recorder: recordertest.Discard{},
		})
		if err != nil {
			t.Fatalf("app.New refused what ParseConfig accepted: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// checkConfigError walks err (errors.Join trees included) and fails
// unless every error at the leaves is a *domain.ConfigError.
func checkConfigError(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, domain.ErrInvalidConfig) || domain.CodeOf(err) != domain.CodeInvalidConfig {
		t.Fatalf("err %v does not carry ErrInvalidConfig / %s", err, domain.CodeInvalidConfig)
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			checkConfigError(t, e)
		}
		return
	}
	if _, ok := err.(*domain.ConfigError); !ok {
		t.Fatalf("err is a %T, want a *domain.ConfigError: %v", err, err)
	}
}

// Package boot holds what the repository's own binaries (examples/demo and
// cmd/sluice-rls) do alike to start a service on sluice: read the
// configuration with the environment, with a throw-away HMAC secret in
// development mode, and open the stores. A service that embeds sluice
// writes its own composition root; this one exists so that the two
// binaries of this repository keep one.
package boot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/ports"
)

// DevSecretNote is what a binary prints when dev generated the secret.
const DevSecretNote = "-dev: generated a throw-away HMAC secret for this run (counters start afresh at every start)"

// Config parses data (YAML) with the process environment (REDIS_URL,
// RATE_LIMIT_HMAC_SECRET). sluice has no default secret: without one it
// fails, telling how to make one, unless dev is set; then it generates a
// secret for this run and generated says so. devHint ends the message of
// the missing secret (e.g. "or run with -dev").
func Config(data []byte, dev bool, devHint string) (cfg app.Config, generated bool, err error) {
	env := os.LookupEnv
	if v, _ := os.LookupEnv(app.EnvHMACSecret); v == "" && dev {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return cfg, false, err
		}
		secret := hex.EncodeToString(b)
		env = func(k string) (string, bool) {
			if k == app.EnvHMACSecret {
				return secret, true
			}
			return os.LookupEnv(k)
		}
		generated = true
	}
	cfg, err = app.ParseConfig(data, env)
	if errors.Is(err, app.ErrSecretMissing) {
		err = fmt.Errorf("%w\nset %s to 64 hex characters (head -c32 /dev/urandom | od -An -tx1 | tr -d ' \\n'), %s", err, app.EnvHMACSecret, devHint)
	}
	return cfg, generated, err
}

// Stores opens the primary store (Redis with cfg.RedisURL, else the
// embedded local store: one instance's counts) and the in-process fallback.
// kind describes the primary for a banner, the URL's password hidden;
// closeAll closes both.
func Stores(cfg app.Config) (primary, fallback ports.Store, kind string, closeAll func(), err error) {
	if fallback, err = local.New(local.Config{}); err != nil {
		return nil, nil, "", nil, err
	}
	kind = "local (embedded: one instance's counts)"
	if cfg.RedisURL != "" {
		primary, err = redis.New(redis.Config{URL: cfg.RedisURL})
		kind = "redis " + app.RedactURL(cfg.RedisURL)
	} else {
		primary, err = local.New(local.Config{})
	}
	if err != nil {
		_ = fallback.Close()
		return nil, nil, "", nil, err
	}
	return primary, fallback, kind, func() { _ = primary.Close(); _ = fallback.Close() }, nil
}

// Recorder returns the service's Recorder: metrics on a registry of its own
// (served by its Handler) and the application and security-audit log
// channels as text on w.
func Recorder(cfg app.Config, w io.Writer) (*otel.Recorder, error) {
	cfg = cfg.WithDefaults()
	logs := slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})
	return otel.New(otel.Config{
		InstanceID: cfg.InstanceID,
		Registry:   prometheus.NewRegistry(),
		AppLog:     slog.New(logs).With("channel", "app"),
		AuditLog:   slog.New(logs).With("channel", "audit"),
	})
}

// Limiter builds the Limiter on the stores and rec, and prints its boot
// warnings (Redis maxmemory below the budget, ...) on w.
func Limiter(cfg app.Config, primary, fallback ports.Store, rec ports.Recorder, w io.Writer) (*app.Limiter, error) {
	lim, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: rec})
	if err != nil {
		return nil, err
	}
	for _, warning := range lim.Warnings() {
		fmt.Fprintln(w, "warning:", warning)
	}
	return lim, nil
}

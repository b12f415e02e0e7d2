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
	"net/http"
	"os"
	"strings"

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
	return ConfigEnv(data, dev, devHint, os.LookupEnv)
}

// ConfigEnv is Config with env in place of the process environment
// (sluice-rls reads REDIS_URL itself, in envoyproxy/ratelimit's forms).
func ConfigEnv(data []byte, dev bool, devHint string, env app.LookupEnv) (cfg app.Config, generated bool, err error) {
	if v, _ := env(app.EnvHMACSecret); v == "" && dev {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return cfg, false, err
		}
		secret := hex.EncodeToString(b)
		outer := env
		env = func(k string) (string, bool) {
			if k == app.EnvHMACSecret {
				return secret, true
			}
			return outer(k)
		}
		generated = true
	}
	cfg, err = app.ParseConfig(data, env)
	if errors.Is(err, app.ErrSecretMissing) {
		err = fmt.Errorf("%w\nset %s to 64 hex characters (head -c32 /dev/urandom | od -An -tx1 | tr -d ' \\n'), %s", err, app.EnvHMACSecret, devHint)
	}
	return cfg, generated, err
}

// RedisConfig is the Redis store's configuration of cfg (REDIS_URL, or
// redis_url in the file); nil when it names none.
func RedisConfig(cfg app.Config) *redis.Config {
	if cfg.RedisURL == "" {
		return nil
	}
	return &redis.Config{URL: cfg.RedisURL}
}

// Stores is OpenStores on cfg's Redis (RedisConfig), its warnings
// dropped.
func Stores(cfg app.Config) (primary, fallback ports.Store, kind string, closeAll func(), err error) {
	return OpenStores(RedisConfig(cfg), io.Discard)
}

// OpenStores opens the primary store and the in-process fallback: Redis
// as rc says, else (rc nil) the embedded local store, one instance's
// counts, which it says on w since replicas would multiply every limit.
// Redis that does not answer yet is no error (redis.New): the store
// connects when it answers, the Limiter starts DEGRADED meanwhile, and
// w says so. kind describes the primary for a banner, no password shown;
// closeAll closes both.
func OpenStores(rc *redis.Config, w io.Writer) (primary, fallback ports.Store, kind string, closeAll func(), err error) {
	if fallback, err = local.New(local.Config{}); err != nil {
		return nil, nil, "", nil, err
	}
	if rc == nil {
		fmt.Fprintln(w, "warning: no REDIS_URL: the primary store is the embedded local store; each instance counts alone, so N replicas admit N times every limit (sluice_store_embedded 1)")
		kind = "local (embedded: one instance's counts)"
		primary, err = local.New(local.Config{})
	} else {
		kind = "redis " + describe(*rc)
		var st *redis.Store
		if st, err = redis.New(*rc); err == nil {
			primary = st
			if rerr := st.Ready(); rerr != nil {
				fmt.Fprintf(w, "warning: Redis (%s) does not answer: %v; starting DEGRADED (the degraded matrix decides), connecting when it answers\n", describe(*rc), rerr)
			}
		}
	}
	if err != nil {
		_ = fallback.Close()
		return nil, nil, "", nil, err
	}
	return primary, fallback, kind, func() { _ = primary.Close(); _ = fallback.Close() }, nil
}

// describe names where rc connects, without credentials.
func describe(rc redis.Config) string {
	where := app.RedactURL(rc.URL)
	if rc.URL == "" {
		where = strings.Join(rc.Addrs, ",")
	}
	if rc.TLS != nil {
		where += " (TLS)"
	}
	if rc.Mode != redis.ModeAuto {
		where += " (" + rc.Mode.String() + ")"
	}
	return where
}

// Recorder returns the service's Recorder: metrics on a registry of its own
// (served by its Handler) and the application and security-audit log
// channels as text on w. opts adjust its configuration (EmbeddedStore).
func Recorder(cfg app.Config, w io.Writer, opts ...func(*otel.Config)) (*otel.Recorder, error) {
	cfg = cfg.WithDefaults()
	logs := slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})
	oc := otel.Config{
		InstanceID: cfg.InstanceID,
		Registry:   prometheus.NewRegistry(),
		AppLog:     slog.New(logs).With("channel", "app"),
		AuditLog:   slog.New(logs).With("channel", "audit"),
	}
	for _, o := range opts {
		o(&oc)
	}
	return otel.New(oc)
}

// EmbeddedStore is a Recorder option: on says that the primary store is
// the embedded one (OpenStores without Redis), which
// sluice_store_embedded exports.
func EmbeddedStore(on bool) func(*otel.Config) {
	return func(c *otel.Config) { c.EmbeddedStore = on }
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

// Health is a binary's HTTP health check: 503 NOT_SERVING once serving
// says so (a graceful stop), else 200, with "OK" and the Limiter's state
// on the next line. A DEGRADED instance answers 200: it decides every
// request (by the degraded matrix), and taking it out of rotation during
// a Redis outage would turn the outage into one of the service itself
// (docs/runbook.md). The state is for people and probes that read it;
// sluice_system_state is the metric.
func Health(lim *app.Limiter, serving func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if serving != nil && !serving() {
			http.Error(w, "NOT_SERVING", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "OK\nsystem_state: %s\n", lim.SystemState())
	})
}

package boot

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/app"
)

const secret = "9c1f0e2d3b4a59687766554433221100ffeeddccbbaa99887766554433221100"

func TestConfigSecret(t *testing.T) {
	t.Run("MissingWithoutDev", func(t *testing.T) {
		t.Setenv(app.EnvHMACSecret, "")
		_, generated, err := Config([]byte("{}"), false, "or run with -dev")
		if !errors.Is(err, app.ErrSecretMissing) || generated {
			t.Fatalf("err %v, generated %v; want ErrSecretMissing and no secret", err, generated)
		}
		if !strings.HasSuffix(err.Error(), "or run with -dev") {
			t.Errorf("the error does not end with the hint: %q", err)
		}
	})
	t.Run("GeneratedWithDev", func(t *testing.T) {
		t.Setenv(app.EnvHMACSecret, "")
		a, generated, err := Config([]byte("{}"), true, "")
		if err != nil || !generated {
			t.Fatalf("err %v, generated %v; want a generated secret", err, generated)
		}
		b, _, err := Config([]byte("{}"), true, "")
		if err != nil || a.HMACSecret == b.HMACSecret || len(a.HMACSecret) != 64 {
			t.Errorf("two dev runs got secrets %q and %q: want two fresh 32-byte secrets", a.HMACSecret, b.HMACSecret)
		}
	})
	t.Run("EnvironmentWinsOverDev", func(t *testing.T) {
		t.Setenv(app.EnvHMACSecret, secret)
		cfg, generated, err := Config([]byte("{}"), true, "")
		if err != nil || generated || cfg.HMACSecret != secret {
			t.Fatalf("err %v, generated %v, secret %q; want the environment's", err, generated, cfg.HMACSecret)
		}
	})
}

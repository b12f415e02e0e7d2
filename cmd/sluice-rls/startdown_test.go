package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/envoypeer"
	"github.com/sluicehq/sluice/internal/redistest"
)

// drillConfig is -sluice-config for the drills: probes every few tens of
// milliseconds, so that a recovery takes a fraction of a second, and
// deadlines generous enough for a loaded test machine.
const drillConfig = "store_timeout: 250ms\nprobe_interval: 250ms\nprobe_timeout: 250ms\nrecovery_probe_interval: 20ms\n"

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestBinaryStartsDuringARedisOutage is the drill of issue 38 items 1
// and 3: sluice-rls started, as a deployment of envoyproxy/ratelimit
// would start it (REDIS_URL as host:port, REDIS_AUTH user:password,
// REDIS_TLS with the CA's file, a pool size it does not read), while its
// Redis is down, on a port chosen before. It starts (no crash loop),
// DEGRADED on its health check and metrics, decides by the degraded
// matrix (edge.yaml: bypass), and once Redis starts it connects to that
// host and recovers to HEALTHY, decided by Redis. No credential is
// printed.
func TestBinaryStartsDuringARedisOutage(t *testing.T) {
	srv := redistest.NewServerWith(t, redistest.Config{Stopped: true, TLS: true, Password: "default-" + secretPW,
		Users: []redistest.User{{Name: "rl", Password: secretPW}}})
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(drillConfig), 0o600))
	p := runBinary(t, []string{
		"REDIS_URL=127.0.0.1:" + strconv.Itoa(srv.Port()), "REDIS_TYPE=single", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_AUTH=rl:" + secretPW, "REDIS_TLS=true", "REDIS_TLS_CACERT=" + srv.CAFile(), "REDIS_POOL_SIZE=10",
	}, "-config", "../../deploy/envoy/config", "-sluice-config", cfg)

	assert.Contains(t, p.stderr.String(), "warning: REDIS_POOL_SIZE is set but sluice-rls does not read it")
	assert.Contains(t, p.stderr.String(), "does not answer")
	status, body := get(t, p.health)
	assert.Equal(t, http.StatusOK, status, "DEGRADED still decides every request: it stays in rotation")
	assert.Contains(t, body, "system_state: DEGRADED")
	_, metrics := get(t, p.metrics)
	assert.Regexp(t, regexp.MustCompile(`(?m)^sluice_system_state\{[^}]*state="DEGRADED"[^}]*\} 1$`), metrics)
	assert.Regexp(t, regexp.MustCompile(`(?m)^sluice_store_embedded\{[^}]*\} 0$`), metrics)
	for range 3 {
		resp := shouldRateLimit(t, p.client, "edge", 1, envoypeer.Desc("tenant", "acme"))
		require.Equal(t, envoypeer.OK, resp.OverallCode, "degraded: bypass")
	}

	require.NoError(t, srv.Start())
	require.Eventually(t, func() bool {
		_, body := get(t, p.health)
		return regexp.MustCompile(`system_state: HEALTHY`).MatchString(body)
	}, 30*time.Second, 20*time.Millisecond, "recovered once Redis answers: %s", p.stderr.String())
	resp := shouldRateLimit(t, p.client, "edge", 1, envoypeer.Desc("tenant", "acme"))
	require.Equal(t, envoypeer.OK, resp.OverallCode)
	keys, err := srv.Do(t.Context(), "DBSIZE")
	require.NoError(t, err)
	assert.Positive(t, keys, "decided on the host REDIS_URL names, over TLS, as REDIS_AUTH's user")
	_, metrics = get(t, p.metrics)
	assert.Regexp(t, regexp.MustCompile(`(?m)^sluice_system_state\{[^}]*state="HEALTHY"[^}]*\} 1$`), metrics)

	printed := p.stdout.String() + p.stderr.String()
	assert.NotContains(t, printed, secretPW)
}

// TestBinaryRefusesWhatItCannotHonour: a peer setting sluice-rls cannot
// honour stops the start, the error naming the variable (never its
// value), rather than dialling something else.
func TestBinaryRefusesWhatItCannotHonour(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_URL=mymaster,127.0.0.1:26379", "REDIS_TYPE=sentinel"}, "sluice-rls: REDIS_TYPE: sentinel is not supported"},
		{[]string{"REDIS_URL=redis:6379", "REDIS_SOCKET_TYPE=unix"}, "sluice-rls: REDIS_SOCKET_TYPE: unix, but REDIS_URL is not a socket path"},
		{[]string{"REDIS_URL=redis:6379", "REDIS_AUTH=" + secretPW, "REDIS_TLS=maybe"}, "sluice-rls: REDIS_TLS: "},
	} {
		cmd := exec.Command(binary(t), "-dev", "-grpc-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
			"-config", "../../deploy/envoy/config")
		cmd.Env = childEnv(c.env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out)
		assert.Equal(t, 1, exit.ExitCode())
		assert.Contains(t, string(out), c.want)
		assert.NotContains(t, string(out), secretPW)
	}
}

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestDemoStartsDuringARedisOutage is issue 38 item 1's drill for the
// demo: started with REDIS_URL naming a Redis that is down (a port chosen
// before), it starts, DEGRADED on GET /healthz and its metrics, and
// decides by its degraded matrix (search, a read route: bypass; login,
// an auth route: 503); once Redis starts, it recovers to HEALTHY and
// counts on Redis.
func TestDemoStartsDuringARedisOutage(t *testing.T) {
	srv := redistest.NewServerWith(t, redistest.Config{Stopped: true})
	cfg, err := os.ReadFile("sluice.yaml")
	require.NoError(t, err)
	// Probes every few tens of milliseconds: a recovery takes a fraction
	// of a second; deadlines generous for a loaded test machine.
	drill := strings.Replace(strings.Replace(string(cfg), "store_timeout: 50ms", "store_timeout: 250ms", 1),
		"probe_interval: 10s", "probe_interval: 250ms\nprobe_timeout: 250ms\nrecovery_probe_interval: 20ms", 1)
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(file, []byte(drill), 0o600))
	p := startDemo(t, []string{"REDIS_URL=" + srv.URL(), "RATE_LIMIT_HMAC_SECRET=" + strings.Repeat("d4", 32)}, "-config", file)
	assert.Contains(t, p.banner, "store redis "+srv.URL())
	assert.Contains(t, stderr(p), "does not answer")

	resp, body := p.get(t, "GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "DEGRADED still serves")
	assert.Contains(t, body, "system_state: DEGRADED")
	_, metrics := p.get(t, "GET", "/metrics", nil)
	assert.Regexp(t, regexp.MustCompile(`(?m)^sluice_system_state\{[^}]*state="DEGRADED"[^}]*\} 1$`), metrics)
	resp, _ = p.get(t, "GET", "/api/v1/search", http.Header{"X-Demo-User": {"alice@example.org"}})
	assert.Equal(t, http.StatusOK, resp.StatusCode, "read: bypass")
	resp, _ = p.get(t, "POST", "/api/v1/login", nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "auth: deny")

	require.NoError(t, srv.Start())
	require.Eventually(t, func() bool {
		_, body := p.get(t, "GET", "/healthz", nil)
		return strings.Contains(body, "system_state: HEALTHY")
	}, 30*time.Second, 20*time.Millisecond, "recovered once Redis answers: %s", stderr(p))
	resp, _ = p.get(t, "POST", "/api/v1/login", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	keys, err := srv.Do(t.Context(), "DBSIZE")
	require.NoError(t, err)
	assert.Positive(t, keys, "decided by Redis")
	p.stop(t)
}

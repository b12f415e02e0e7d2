package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
)

// secretPW is a password the tests look for in every error and warning.
const secretPW = "pw-0f1e2d3c"

func mapEnv(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestPeerRedis (38.3): REDIS_URL and its companions as
// envoyproxy/ratelimit reads them, or an error naming the variable.
func TestPeerRedis(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	cases := []struct {
		name string
		env  []string
		file string
		want redis.Config
		tls  bool
		bad  string // the variable the error names
	}{
		{name: "the peer's host:port: the host redis, never localhost", env: []string{"REDIS_URL", "redis:6379"},
			want: redis.Config{Addrs: []string{"redis:6379"}}},
		{name: "single", env: []string{"REDIS_URL", "10.0.0.5:6379", "REDIS_TYPE", "SINGLE", "REDIS_SOCKET_TYPE", "tcp"},
			want: redis.Config{Addrs: []string{"10.0.0.5:6379"}, Mode: redis.ModeStandalone}},
		{name: "cluster nodes", env: []string{"REDIS_URL", "n1:7000, n2:7001", "REDIS_TYPE", "cluster"},
			want: redis.Config{Addrs: []string{"n1:7000", "n2:7001"}, Mode: redis.ModeCluster}},
		{name: "password", env: []string{"REDIS_URL", "redis:6379", "REDIS_AUTH", secretPW},
			want: redis.Config{Addrs: []string{"redis:6379"}, Password: secretPW}},
		{name: "user:password", env: []string{"REDIS_URL", "redis:6379", "REDIS_AUTH", "rl:" + secretPW},
			want: redis.Config{Addrs: []string{"redis:6379"}, Username: "rl", Password: secretPW}},
		{name: "TLS", env: []string{"REDIS_URL", "redis:6379", "REDIS_TLS", "true"},
			want: redis.Config{Addrs: []string{"redis:6379"}}, tls: true},
		{name: "a socket path", env: []string{"REDIS_URL", "/var/run/redis.sock"},
			want: redis.Config{URL: "unix:///var/run/redis.sock"}},
		{name: "sluice's URL", env: []string{"REDIS_URL", "redis://redis:6379/0", "REDIS_TYPE", "cluster"},
			want: redis.Config{URL: "redis://redis:6379/0", Mode: redis.ModeCluster}},
		{name: "rediss", env: []string{"REDIS_URL", "rediss://redis:6380"},
			want: redis.Config{URL: "rediss://redis:6380"}, tls: true},
		{name: "the file's redis_url", file: "redis://from-file:6379",
			want: redis.Config{URL: "redis://from-file:6379"}},

		{name: "sentinel", env: []string{"REDIS_URL", "mymaster,s1:26379", "REDIS_TYPE", "sentinel"}, bad: "REDIS_TYPE"},
		{name: "unknown type", env: []string{"REDIS_URL", "redis:6379", "REDIS_TYPE", "ring"}, bad: "REDIS_TYPE"},
		{name: "a list without cluster", env: []string{"REDIS_URL", "n1:7000,n2:7001"}, bad: "REDIS_URL"},
		{name: "no port", env: []string{"REDIS_URL", "redis"}, bad: "REDIS_URL"},
		{name: "a bad port", env: []string{"REDIS_URL", "redis:http"}, bad: "REDIS_URL"},
		{name: "a list of URLs", env: []string{"REDIS_URL", "redis://:" + secretPW + "@n1:7000,redis://n2:7001", "REDIS_TYPE", "cluster"}, bad: "REDIS_URL"},
		{name: "unix but host:port", env: []string{"REDIS_URL", "redis:6379", "REDIS_SOCKET_TYPE", "unix"}, bad: "REDIS_SOCKET_TYPE"},
		{name: "tcp but a path", env: []string{"REDIS_URL", "/var/run/redis.sock", "REDIS_SOCKET_TYPE", "tcp"}, bad: "REDIS_URL"},
		{name: "unknown socket type", env: []string{"REDIS_URL", "redis:6379", "REDIS_SOCKET_TYPE", "udp"}, bad: "REDIS_SOCKET_TYPE"},
		{name: "credentials twice", env: []string{"REDIS_URL", "redis://:" + secretPW + "@redis:6379", "REDIS_AUTH", secretPW}, bad: "REDIS_AUTH"},
		{name: "a user without password", env: []string{"REDIS_URL", "redis:6379", "REDIS_AUTH", "rl:"}, bad: "REDIS_AUTH"},
		{name: "REDIS_TLS not a boolean", env: []string{"REDIS_URL", "redis:6379", "REDIS_TLS", "yes please"}, bad: "REDIS_TLS"},
		{name: "no such CA file", env: []string{"REDIS_URL", "redis:6379", "REDIS_TLS", "true", "REDIS_TLS_CACERT", filepath.Join(dir, "none.pem")}, bad: "REDIS_TLS_CACERT"},
		{name: "a CA file without a certificate", env: []string{"REDIS_URL", "redis:6379", "REDIS_TLS", "true", "REDIS_TLS_CACERT", notPEM}, bad: "REDIS_TLS_CACERT"},
		{name: "a certificate without its key", env: []string{"REDIS_URL", "redis:6379", "REDIS_TLS", "true", "REDIS_TLS_CLIENT_CERT", notPEM}, bad: "REDIS_TLS_CLIENT_CERT"},
		{name: "TLS on a socket", env: []string{"REDIS_URL", "/var/run/redis.sock", "REDIS_TLS", "true"}, bad: "REDIS_TLS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc, _, err := peerRedis(mapEnv(c.env...), c.file)
			if c.bad != "" {
				var ee *envError
				require.True(t, errors.As(err, &ee), "%v", err)
				assert.Equal(t, c.bad, ee.name)
				assert.True(t, strings.HasPrefix(err.Error(), c.bad+": "), err.Error())
				assert.NotContains(t, err.Error(), secretPW)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, rc)
			assert.Equal(t, c.tls, rc.TLS != nil, "TLS")
			if rc.TLS != nil {
				assert.Empty(t, rc.TLS.ServerName, "each node is checked by the host it is dialled by")
			}
			rc.TLS = nil
			assert.Equal(t, c.want, *rc)
		})
	}
}

// TestPeerRedisWarnings: companions that nothing reads are named.
func TestPeerRedisWarnings(t *testing.T) {
	rc, warnings, err := peerRedis(mapEnv("REDIS_AUTH", secretPW, "REDIS_TLS", "true"), "")
	require.NoError(t, err)
	assert.Nil(t, rc, "no REDIS_URL: the embedded store")
	assert.Equal(t, []string{
		"REDIS_AUTH is set but REDIS_URL is not: it is not read, and the store is the embedded one",
		"REDIS_TLS is set but REDIS_URL is not: it is not read, and the store is the embedded one",
	}, warnings)
	_, warnings, err = peerRedis(mapEnv("REDIS_URL", "redis:6379", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"), "")
	require.NoError(t, err)
	assert.Equal(t, []string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION is set but REDIS_TLS is not: it is not read (no TLS)"}, warnings)
}

func TestUnreadWarnings(t *testing.T) {
	got := unreadWarnings([]string{"REDIS_POOL_SIZE=10", "LOG_LEVEL=debug", "TRACING_ENABLED=true", "REDIS_PERSECOND_URL=x:1",
		"REDIS_URL=redis:6379", "PATH=/bin", "USE_STATSD=", "GRPC_PORT=8081"})
	assert.Equal(t, []string{
		"LOG_LEVEL is set but sluice-rls does not read it: text logs, application and audit channels",
		"REDIS_PERSECOND_URL is set but sluice-rls does not read it: one store for every unit: per-second limits count on REDIS_URL too",
		"REDIS_POOL_SIZE is set but sluice-rls does not read it: one multiplexed, auto-pipelined connection per node; health is the breaker's probes",
		"TRACING_ENABLED is set but sluice-rls does not read it: no tracing",
	}, got, "read variables and empty ones say nothing")
}

// TestUnreadMatchesTheREADME: the variables the README's settings table
// says sluice-rls does not read (none, always on) are the ones it warns
// about, and no other.
func TestUnreadMatchesTheREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "| envoyproxy/ratelimit | sluice-rls |")
	require.True(t, ok, "the README's settings table")
	table, _, _ = strings.Cut(table, "\n\n")
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)(=[A-Za-z]+)?`")
	inREADME := map[string]bool{}
	for row := range strings.Lines(table) {
		cols := strings.Split(row, "|")
		if len(cols) < 3 {
			continue
		}
		them, us := cols[1], strings.TrimSpace(cols[2])
		unreadRow := strings.HasPrefix(us, "none") || strings.HasPrefix(us, "always on")
		for _, m := range name.FindAllStringSubmatch(them, -1) {
			if m[2] != "" {
				continue // a value of a variable read, e.g. REDIS_TYPE=sentinel
			}
			v := m[1]
			probe := strings.TrimSuffix(v, "*") + "X"
			if !strings.HasSuffix(v, "*") {
				probe = v
			}
			if unreadRow {
				inREADME[v] = true
				assert.NotEmpty(t, unreadWhy(probe), "%s: the README says not read, sluice-rls says nothing", v)
			} else {
				assert.Empty(t, unreadWhy(probe), "%s: the README says read, sluice-rls warns", v)
			}
		}
	}
	for _, u := range unread {
		for _, n := range u.names {
			assert.True(t, inREADME[n], "%s: warned about, not in the README's table as not read", n)
		}
	}
}

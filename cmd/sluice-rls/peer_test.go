package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/cmdtest"
	"github.com/sluicehq/sluice/internal/envoypeer"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	code := redistest.Run(m)
	cmdtest.RemoveBinary()
	os.Exit(code)
}

// The built binary, run as a deployment of envoyproxy/ratelimit would run
// it: its own configuration files (adapters/envoyrls/testdata/peer), its
// environment variables, its end-to-end scripts over gRPC with the
// go-control-plane client, on the embedded store, standalone Redis and the
// three-master cluster.

const peerData = "../../adapters/envoyrls/testdata/peer/"

// binary is cmd/sluice-rls, built once per test run as its image holds
// it (internal/cmdtest: static, as make image builds it; with coverage
// under make cover).
func binary(t *testing.T) string {
	t.Helper()
	path, err := cmdtest.Binary("sluice-rls")
	require.NoError(t, err)
	return path
}

// peerEnvNames are envoyproxy/ratelimit's variables sluice-rls reads: the
// test's own environment must not leak into the binary's.
var peerEnvNames = []string{"REDIS_URL", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "RATE_LIMIT_HMAC_SECRET", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY",
	"GRPC_HOST", "GRPC_PORT", "HOST", "PORT", "PROMETHEUS_ADDR", "MERGE_DOMAIN_CONFIG", "LIMIT_RESPONSE_HEADERS_ENABLED",
	"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER", "RESPONSE_DYNAMIC_METADATA", "SHADOW_MODE"}

func childEnv(extra ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, n := range peerEnvNames {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return append(cmdtest.Env(env), extra...)
}

// startBinary runs the binary with args and env on loopback ports and
// returns a client of its gRPC address; the binary is stopped (SIGTERM,
// then killed) when the test ends.
func startBinary(t *testing.T, env []string, args ...string) rlsv3.RateLimitServiceClient {
	t.Helper()
	return runBinary(t, env, args...).client
}

// rlsProcess is the binary running: a client of its gRPC address, the URLs
// of its health check and metrics, what it wrote.
type rlsProcess struct {
	client          rlsv3.RateLimitServiceClient
	health, metrics string
	stdout, stderr  *syncBuffer
}

// runBinary is startBinary, with everything the process says.
func runBinary(t *testing.T, env []string, args ...string) *rlsProcess {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"-dev", "-grpc-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = childEnv(env...)
	p := start(t, cmd)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rlsProcess{client: rlsv3.NewRateLimitServiceClient(conn), health: p.health, metrics: p.metrics, stdout: p.stdout, stderr: p.stderr}
}

// process is a started sluice-rls.
type process struct {
	cmd *exec.Cmd
	// grpc is the gRPC address, health and metrics the URLs, as printed.
	grpc, health, metrics string
	stdout, stderr        *syncBuffer
	exited                chan struct{} // closed once err is set
	err                   error         // cmd.Wait's
}

// start starts cmd (the binary with its flags and environment), waits for
// it to print its addresses, and stops it (SIGTERM, then killed) when the
// test ends.
func start(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &process{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	up := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, _ = p.stdout.Write([]byte(sc.Text() + "\n"))
			// grpc: ADDR  health: http://ADDR/healthcheck  metrics: http://ADDR/metrics
			if f := strings.Fields(sc.Text()); len(f) >= 6 && f[0] == "grpc:" {
				up <- f
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case f := <-up:
		p.grpc, p.health, p.metrics = f[1], f[3], f[5]
	case <-p.exited:
		t.Fatalf("sluice-rls exited (%v): %s", p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice-rls did not start: %s", p.stderr.String())
	}
	return p
}

func shouldRateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, dom string, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: dom, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	return resp
}

// TestBinaryPeerScripts: envoyproxy/ratelimit's end-to-end scripts against
// the binary on its docker-compose example configuration, on each store.
func TestBinaryPeerScripts(t *testing.T) {
	stores := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"local", func(*testing.T) string { return "" }},
		{"redis", func(t *testing.T) string { return redistest.StandaloneURL(t) }},
		{"cluster", func(t *testing.T) string { return "redis://" + redistest.Cluster(t)[0] }},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			c := startBinary(t, []string{"REDIS_URL=" + s.url(t)}, "-config", peerData+"examples", "-accept-unlimited")
			// One process, one secret: the scripts' keys are disjoint, as
			// they are against the peer's one service.
			for name, steps := range envoypeer.Scripts() {
				for _, st := range steps {
					resp := shouldRateLimit(t, c, envoypeer.Domain, 0, st.Descriptors...)
					require.Equal(t, st.Want, resp.OverallCode, "%s: %s", name, st.Name)
				}
			}
		})
	}
}

// TestBinaryPeerEnvironment: the peer's environment variables: the
// runtime directory's path, MERGE_DOMAIN_CONFIG, the limit headers.
func TestBinaryPeerEnvironment(t *testing.T) {
	root, err := filepath.Abs(peerData)
	require.NoError(t, err)
	c := startBinary(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=runtime", "RUNTIME_APPDIRECTORY=config",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-RateLimit-Remaining"})
	for i := 1; i <= 51; i++ {
		resp := shouldRateLimit(t, c, "basic", 1, envoypeer.Desc("key1", "binary"))
		if i == 51 {
			require.Equal(t, envoypeer.Over, resp.OverallCode, "key1 call %d", i)
			break
		}
		require.Equal(t, envoypeer.OK, resp.OverallCode, "key1 call %d", i)
		if i == 1 {
			hs := map[string]string{}
			for _, h := range resp.ResponseHeadersToAdd {
				hs[h.Key] = h.Value
			}
			assert.Equal(t, "50", hs["RateLimit-Limit"])
			assert.Equal(t, "49", hs["X-RateLimit-Remaining"])
		}
	}

	dir := t.TempDir()
	for _, f := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
		b, err := os.ReadFile(peerData + "config/" + f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	m := startBinary(t, []string{"MERGE_DOMAIN_CONFIG=true"}, "-config", dir)
	resp := shouldRateLimit(t, m, "test-domain", 1, envoypeer.Desc("key1", "value1"), envoypeer.Desc("key2", "value2"))
	require.Equal(t, envoypeer.OK, resp.OverallCode)
	assert.Equal(t, uint32(10), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	assert.Equal(t, uint32(20), resp.Statuses[1].CurrentLimit.GetRequestsPerUnit())
}

// TestBinaryRefusesNamingTheFile: a refused configuration stops the start,
// and the error names the file, the domain and the descriptor.
func TestBinaryRefusesNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
		b, err := os.ReadFile(peerData + "config/" + f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", peerData + "examples"}, "example.yaml: domain rl: descriptor foo.bar_banned: "},
		{[]string{"-config", dir}, "merge_domain_key2.yaml: domain test-domain: "},
		{[]string{"-config", peerData + "config/replaces_self.yaml"}, "replaces_self.yaml: domain test-domain: descriptor key1_value1.subkey1: "},
	} {
		cmd := exec.Command(binary(t), append([]string{"-dev", "-grpc-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0"}, c.args...)...)
		cmd.Env = childEnv()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out)
		assert.Equal(t, 1, exit.ExitCode())
		assert.Contains(t, string(out), c.want)
	}
}

// TestBinaryRestartReloads: no hot reload (docs/adr/011). The peer's
// reload test swaps its runtime file under a running service; here the
// running binary keeps the limits it started with, and a restart reads the
// new file.
func TestBinaryRestartReloads(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "basic.yaml")
	write := func(rpu string) {
		require.NoError(t, os.WriteFile(file, []byte("domain: reload\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: second\n      requests_per_unit: "+rpu+"\n"), 0o600))
	}
	limit := func(c rlsv3.RateLimitServiceClient) uint32 {
		return shouldRateLimit(t, c, "reload", 1, envoypeer.Desc("key1", "r")).Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	write("50")
	c := startBinary(t, nil, "-config", dir)
	require.Equal(t, uint32(50), limit(c))
	write("7")
	assert.Equal(t, uint32(50), limit(c), "the running service keeps its limits")
	assert.Equal(t, uint32(7), limit(startBinary(t, nil, "-config", dir)), "a restart reads the file")
}

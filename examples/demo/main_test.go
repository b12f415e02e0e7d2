package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/cmdtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.MainLeakFree(m, goleak.Cleanup(func(int) { cmdtest.RemoveBinary() }))
}

// binary is the demo, built once per test run as its image holds it
// (internal/cmdtest: static, as make image builds it; with coverage under
// make cover).
func binary(t *testing.T) string {
	t.Helper()
	path, err := cmdtest.Binary("demo")
	require.NoError(t, err)
	return path
}

// demoProcess is the demo built and started as a process on free ports.
type demoProcess struct {
	cmd      *exec.Cmd
	banner   string
	httpBase string
	grpcAddr string
	exited   chan struct{} // closed once err is set
	err      error         // cmd.Wait's
	stdout   *bytes.Buffer
	stderr   *syncBuffer
}

// startDemo starts the demo with args and env (over an environment
// without RATE_LIMIT_HMAC_SECRET and REDIS_URL) on free loopback ports,
// and waits for it to print its addresses.
func startDemo(t *testing.T, env []string, args ...string) *demoProcess {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATE_LIMIT_HMAC_SECRET=") && !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmdtest.Env(cmd.Env), env...)
	return start(t, cmd)
}

// start starts cmd (the demo with its flags and environment) and waits
// for it to print its addresses. A demo the test did not stop is
// interrupted when the test ends (so that it exits as it would, and
// writes its coverage under make cover), then killed.
func start(t *testing.T, cmd *exec.Cmd) *demoProcess {
	t.Helper()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &demoProcess{cmd: cmd, exited: make(chan struct{}), stdout: &bytes.Buffer{}, stderr: stderr}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	started := false
	t.Cleanup(func() {
		if !started {
			return // killed and waited for below
		}
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	timeout := time.After(60 * time.Second)
	for !strings.Contains(p.banner, "Ctrl-C stops the service.") {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("demo exited before printing its addresses: %v\n%s%s", cmd.Wait(), p.banner, stderr.String())
			}
			p.banner += line + "\n"
			if v, ok := strings.CutPrefix(line, "http: "); ok {
				p.httpBase = v
			}
			if v, ok := strings.CutPrefix(line, "grpc: "); ok {
				p.grpcAddr = v
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("demo did not print its addresses within 60 s:\n%s%s", p.banner, stderr.String())
		}
	}
	go func() {
		for line := range lines {
			p.stdout.WriteString(line + "\n")
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	started = true
	return p
}

// syncBuffer collects the demo's stderr, written by exec's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func stderr(p *demoProcess) string { return p.stderr.String() }

// stop interrupts the demo and checks that it shuts down cleanly.
func (p *demoProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-p.exited:
		require.NoError(t, p.err, "the demo exits 0 on SIGINT")
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop within 30 s of SIGINT")
	}
	assert.Contains(t, p.stdout.String(), "stopped")
}

func (p *demoProcess) get(t *testing.T, method, path string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, p.httpBase+path, nil)
	require.NoError(t, err)
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func (p *demoProcess) check(t *testing.T) error {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestDemoService starts the demo as make demo does (-dev, no secret, no
// Redis), hits it over HTTP and gRPC, runs the tour against it, and stops
// it.
func TestDemoService(t *testing.T) {
	p := startDemo(t, nil, "-dev")
	assert.Contains(t, p.banner, "store local")
	assert.Contains(t, p.banner, "generated a throw-away HMAC secret")
	assert.Contains(t, p.banner, "curl -i "+p.httpBase+"/api/v1/search")

	resp, body := p.get(t, "GET", "/api/v1/search", http.Header{"X-Demo-User": {"alice@example.org"}, "X-Demo-Tenant": {"acme"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, `"user-burst";r=4;t=1`, resp.Header.Get("RateLimit"))
	assert.NotEmpty(t, resp.Header.Get("RateLimit-Policy"))

	resp, body = p.get(t, "GET", "/api/v1/unknown", nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, `{"error":"invalid_context"}`, body)

	var codes []int
	for range 4 {
		resp, _ := p.get(t, "POST", "/api/v1/login", nil)
		codes = append(codes, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 200, 429}, codes, "login: 3 per 10 s per address")

	require.NoError(t, p.check(t))

	resp, body = p.get(t, "GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, `sluice_decisions_total{cause="limit_exceeded",decision_state="THROTTLED",instance_id="demo-1",route_family="auth",route_profile="login"} 1`)
	assert.Contains(t, body, `route_profile="health"`, "gRPC decisions are recorded too")
	assert.Contains(t, stderr(p), "channel=audit", "refusals reach the security-audit channel")

	var tour bytes.Buffer
	require.NoError(t, tourMain(t.Context(), []string{"-http", p.httpBase, "-grpc", p.grpcAddr}, &tour))
	out := tour.String()
	for _, want := range []string{
		"429 Too Many Requests", `400 Bad Request {"error":"invalid_context"}`, "ResourceExhausted",
		"gRPC Watch: Unavailable  retry in 1s", `"user-degraded_cap"`, `"HEALTHY"`,
		// The plans scene: a first request of a tenant on each plan.
		`"user-burst";r=4;t=1`, `"user-burst";r=49;t=1`, `"user-burst";r=1;t=1`,
		// The exports scene: 10 rows reserved each time, settled at 3, 3,
		// 0 (a 500), 40: the fifth export sees 100-46-10 left.
		`"user-rows";r=90;t=`, `"user-rows";r=87;t=`, `"user-rows";r=84;t=`, `"user-rows";r=44;t=`,
		"500 Internal Server Error",
	} {
		assert.Contains(t, out, want)
	}
	// The reports scene: the third concurrent report is refused, the
	// fourth, after the first two, passes.
	reports := out[strings.Index(out, "== 8."):strings.Index(out, "== 9.")]
	// One address, a new user and tenant on every search: the ip burst
	// (20 per second) refuses once the address spent it. (Twenty pass when
	// the 22 searches take less than a second, as they do but on a machine
	// stalled that long: the check asks for the refusal only.)
	rotating := out[strings.Index(out, "== 9."):strings.Index(out, "== 10.")]
	assert.Regexp(t, `(?m)^2[12] .*429 Too Many Requests .*"ip-burst";r=0`, rotating)
	assert.NotRegexp(t, `(?m)^([1-9]|1[0-9]|20) .*429`, rotating, "no refusal before the address spent its 20")
	assert.Regexp(t, `(?m)^3 .*429 Too Many Requests .*"user-inflight";r=0`, reports)
	assert.Regexp(t, `(?m)^4 .*200 OK`, reports)
	// The outage scene: exports (costly: local) reserve and settle on this
	// instance's store, 3 rows each.
	outage := out[strings.Index(out, "== 10."):]
	assert.Regexp(t, `(?m)^4 .*exports.*200 OK +84 +"user-rows";r=84`, outage)
	assert.NotContains(t, out, "DENIED_DEGRADED", "states are internal; the client sees status codes")
	p.stop(t)
}

// TestDemoSettlesExportsAndBoundsReports: an export is charged the rows
// its handler reports (a failed one nothing); reports hold one of the
// user's two in-flight slots each until their handler returns.
func TestDemoSettlesExportsAndBoundsReports(t *testing.T) {
	p := startDemo(t, nil, "-dev")
	grace := http.Header{"X-Demo-User": {"grace@example.org"}, "X-Demo-Tenant": {"acme"}}
	steps := []struct {
		query     string
		status    int
		remaining string // at the decision: 10 reserved
	}{
		{"?rows=25", http.StatusOK, "90"},
		{"?fail=1", http.StatusInternalServerError, "65"},
		{"?rows=0", http.StatusOK, "65"},
		{"?rows=1", http.StatusOK, "65"},
	}
	for _, s := range steps {
		resp, body := p.get(t, "POST", "/api/v1/exports"+s.query, grace)
		require.Equal(t, s.status, resp.StatusCode, "%s: %s", s.query, body)
		assert.Equal(t, s.remaining, resp.Header.Get("X-RateLimit-Remaining"), s.query)
	}

	// Two slow reports: their headers arrive at once, their bodies after
	// 3 s; meanwhile a third is refused.
	var slow []*http.Response
	for range 2 {
		req, err := http.NewRequest("GET", p.httpBase+"/api/v1/reports?ms=3000", nil)
		require.NoError(t, err)
		req.Header = grace.Clone()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		slow = append(slow, resp)
	}
	resp, body := p.get(t, "GET", "/api/v1/reports?ms=0", grace)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	assert.Contains(t, body, "user-inflight")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	for _, r := range slow {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"report":"ready"`)
		_ = r.Body.Close()
	}
	resp, body = p.get(t, "GET", "/api/v1/reports?ms=0", grace)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "both slots are back: %s", body)
	p.stop(t)
}

// TestDemoOnRedis: with REDIS_URL the demo counts on Redis.
func TestDemoOnRedis(t *testing.T) {
	srv := redistest.NewServer(t)
	p := startDemo(t, []string{"REDIS_URL=" + srv.URL(), "RATE_LIMIT_HMAC_SECRET=" + strings.Repeat("c3", 32)})
	assert.Contains(t, p.banner, "store redis redis://"+srv.Addr())
	assert.NotContains(t, p.banner, "generated")
	assert.NotContains(t, p.banner, "/demo/outage", "without -dev there is no simulated outage")

	resp, body := p.get(t, "GET", "/api/v1/search", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NoError(t, p.check(t))
	n, err := srv.Do(t.Context(), "DBSIZE")
	require.NoError(t, err)
	assert.Positive(t, n, "the decisions were counted on Redis")

	resp, _ = p.get(t, "POST", "/demo/outage", nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "no outage endpoint without -dev: an unrouted request")
	p.stop(t)
}

// TestDemoRefusesToStartWithoutSecret: sluice has no default secret; only
// -dev generates one.
func TestDemoRefusesToStartWithoutSecret(t *testing.T) {
	t.Setenv("RATE_LIMIT_HMAC_SECRET", "")
	t.Setenv("REDIS_URL", "")
	var stdout, stderr bytes.Buffer
	code := cli(t.Context(), []string{"-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0"}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "RATE_LIMIT_HMAC_SECRET")
	assert.Contains(t, stderr.String(), "-dev")
	assert.Empty(t, stdout.String(), "nothing started")
}

// TestDemoGRPCRefusal: the gRPC side refuses with ResourceExhausted past
// its burst.
func TestDemoGRPCRefusal(t *testing.T) {
	p := startDemo(t, nil, "-dev")
	var last error
	for range 6 {
		last = p.check(t)
	}
	assert.Equal(t, "ResourceExhausted", status.Code(last).String())
	p.stop(t)
}

// TestDemoRefusesARouteWithoutProfile: the boot check stops the service
// when one of its routes has no profile.
func TestDemoRefusesARouteWithoutProfile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := cli(t.Context(), []string{"-dev", "-config", "testdata/missing-profile.yaml", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0"}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), `"POST /api/v1/exports"`)
	assert.Contains(t, stderr.String(), "ERR-172-05")
	assert.NotContains(t, stdout.String(), "http:", "nothing started")
}

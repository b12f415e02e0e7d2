package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/adapters/envoyrls"
)

// syncBuffer is a bytes.Buffer safe for the server's and the test's
// goroutines.
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

// TestServe runs the binary's service on the embedded store with the
// deploy example's configuration: ShouldRateLimit, the gRPC and HTTP
// health checks and the metrics answer, and a cancelled context stops it
// with exit code 0.
func TestServe(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("RATE_LIMIT_HMAC_SECRET", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := make(chan addrs, 1)
	code := make(chan int, 1)
	var stdout, stderr syncBuffer
	go func() {
		code <- cli(ctx, []string{"-config", "../../deploy/envoy/config", "-dev",
			"-grpc-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0"},
			&stdout, &stderr, func(a addrs) { up <- a })
	}()
	var a addrs
	select {
	case a = <-up:
	case c := <-code:
		t.Fatalf("exited with %d: %s", c, stderr.String())
	}
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}},
	})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, uint32(999), resp.Statuses[0].LimitRemaining)
	h, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
	for _, u := range []string{"http://" + a.health + "/healthcheck", "http://" + a.metrics + "/metrics"} {
		r, err := http.Get(u)
		require.NoError(t, err)
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		assert.Equal(t, http.StatusOK, r.StatusCode, u)
		assert.NotEmpty(t, body, u)
	}
	cancel()
	assert.Equal(t, 0, <-code, stderr.String())
	assert.Contains(t, stdout.String(), "stopped")
}

// TestFlags: no configuration, or a refused one, fails the start.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-config", "../../adapters/envoyrls/testdata/invalid/unlimited.yaml", "-dev"},
	} {
		var out, errs syncBuffer
		assert.Equal(t, 1, cli(context.Background(), args, &out, &errs, nil), args)
		assert.NotEmpty(t, errs.String())
	}
}

// TestDeployFiles parses deploy/envoy's static files as YAML and checks
// that they agree with the binary: the Envoy cluster's name and port, the
// filter's domain, the Kubernetes ports, and the configuration they ship.
func TestDeployFiles(t *testing.T) {
	var envoy map[string]any
	require.NoError(t, yaml.Unmarshal(read(t, "../../deploy/envoy/envoy.yaml"), &envoy))
	text := string(read(t, "../../deploy/envoy/envoy.yaml"))
	clusters := dig(t, envoy, "static_resources", "clusters").([]any)
	var port int
	for _, c := range clusters {
		if c.(map[string]any)["name"] == ClusterName {
			ep := dig(t, c, "load_assignment", "endpoints").([]any)[0]
			lb := dig(t, ep, "lb_endpoints").([]any)[0]
			port = dig(t, lb, "endpoint", "address", "socket_address", "port_value").(int)
		}
	}
	assert.Equal(t, DefaultGRPCPort, port, "the cluster's port is the binary's default")
	assert.Contains(t, text, "cluster_name: "+ClusterName)
	assert.Contains(t, text, "domain: edge")

	cfg, err := envoyrls.LoadConfig("../../deploy/envoy/config")
	require.NoError(t, err)
	assert.Equal(t, []string{"edge"}, cfg.Domains())

	kinds := kubernetes(t)
	svc := kinds["Service"]
	assert.Equal(t, "sluice-rls", dig(t, svc, "metadata", "name"))
	assert.Equal(t, DefaultGRPCPort, dig(t, svc, "spec", "ports").([]any)[0].(map[string]any)["port"])
	dep := kinds["Deployment"]
	assert.Greater(t, dig(t, dep, "spec", "replicas").(int), 1)
	ctr := dig(t, dep, "spec", "template", "spec", "containers").([]any)[0]
	ports := map[string]int{}
	for _, p := range dig(t, ctr, "ports").([]any) {
		ports[p.(map[string]any)["name"].(string)] = p.(map[string]any)["containerPort"].(int)
	}
	assert.Equal(t, map[string]int{"grpc": DefaultGRPCPort, "health": DefaultHealthPort, "metrics": DefaultMetricsPort}, ports)
	edge := dig(t, kinds["ConfigMap"], "data", "edge.yaml").(string)
	_, err = envoyrls.ParseConfig([]byte(edge))
	require.NoError(t, err, "the ConfigMap's configuration loads")
	assert.True(t, strings.HasPrefix(edge, "domain: edge"))
}

// kubernetes reads deploy/envoy/kubernetes.yaml's documents by kind.
func kubernetes(t *testing.T) map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(read(t, "../../deploy/envoy/kubernetes.yaml")))
	kinds := map[string]any{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		kinds[doc["kind"].(string)] = doc
	}
	return kinds
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// dig walks nested maps.
func dig(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, k := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: not a map", k)
		v, ok = m[k]
		require.True(t, ok, "%s: missing", k)
	}
	return v
}

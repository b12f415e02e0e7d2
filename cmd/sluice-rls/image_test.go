//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/cmdtest"
	"github.com/sluicehq/sluice/internal/envoypeer"
	"github.com/sluicehq/sluice/internal/redistest"
)

const containerfile = "../../deploy/image/sluice-rls.Containerfile"

// TestImage is what can be tested of the image `make image` builds
// without building it (deploy/README.md): its Containerfile agrees with
// the binary and with deploy/envoy/kubernetes.yaml, the binary the tests
// run (built as make image builds it) is one a FROM scratch image can
// hold, and it serves as the image runs it.
func TestImage(t *testing.T) {
	cf, err := cmdtest.ReadContainerfile(containerfile)
	require.NoError(t, err)
	uid, gid, err := cf.UIDGID()
	require.NoError(t, err)
	kinds := kubernetes(t)
	pod := dig(t, kinds["Deployment"], "spec", "template", "spec")
	ctr := dig(t, pod, "containers").([]any)[0]

	t.Run("Containerfile", func(t *testing.T) {
		assert.Equal(t, "scratch", cf.From)
		assert.NotZero(t, uid, "USER is not root")
		assert.Equal(t, "sluice-rls", cf.Copies["/sluice-rls"], "make image builds bin/image/sluice-rls")
		assert.Equal(t, "ca-certificates.crt", cf.Copies["/etc/ssl/certs/ca-certificates.crt"],
			"a rediss:// REDIS_URL needs root CAs where Go looks for them on Linux")
		assert.Equal(t, []string{"/sluice-rls"}, cf.Entrypoint)
		assert.ElementsMatch(t, []int{DefaultGRPCPort, DefaultHealthPort, DefaultMetricsPort}, cf.Expose,
			"EXPOSE: the binary's default ports")
	})

	t.Run("Kubernetes", func(t *testing.T) {
		assert.Equal(t, "sluice-rls:latest", dig(t, ctr, "image"), "the tag make image gives")
		assert.Equal(t, true, dig(t, pod, "securityContext", "runAsNonRoot"))
		assert.Equal(t, uid, dig(t, pod, "securityContext", "runAsUser"), "the image's USER")
		assert.Equal(t, gid, dig(t, pod, "securityContext", "runAsGroup"), "the image's USER")
		assert.Equal(t, true, dig(t, ctr, "securityContext", "readOnlyRootFilesystem"), "the binary writes no file")
		assert.Equal(t, []any{"-config", "/etc/sluice-rls"}, dig(t, ctr, "args"))
		assert.Equal(t, []string{"-config", "/etc/sluice-rls"}, cf.Cmd, "the image's CMD is the manifest's args")
		mount := dig(t, ctr, "volumeMounts").([]any)[0]
		assert.Equal(t, "/etc/sluice-rls", dig(t, mount, "mountPath"))
		assert.Equal(t, DefaultGRPCPort, dig(t, ctr, "readinessProbe", "grpc", "port"))
		assert.Equal(t, DefaultHealthPort, dig(t, ctr, "livenessProbe", "httpGet", "port"))
		assert.Equal(t, "/healthcheck", dig(t, ctr, "livenessProbe", "httpGet", "path"))
	})

	bin := binary(t)
	t.Run("Binary", func(t *testing.T) {
		require.NoError(t, cmdtest.CheckImageBinary(bin))
	})

	// Run as the image runs it: as USER (when the test runs as root; else
	// as the test's own uid), in /, with no environment but the manifest's
	// Secret (no HOME, no TMPDIR, no PATH), on the ConfigMap's
	// configuration; loopback ports chosen by the kernel (the default
	// ports are checked above). The Redis speaks TLS with a private CA,
	// given in SSL_CERT_FILE as deploy/README.md says.
	t.Run("Serves", func(t *testing.T) {
		config := worldReadableDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(config, "edge.yaml"),
			[]byte(dig(t, kinds["ConfigMap"], "data", "edge.yaml").(string)), 0o644))
		redis := redistest.NewServerWith(t, redistest.Config{TLS: true})
		ca := filepath.Join(worldReadableDir(t), "ca.pem")
		require.NoError(t, os.WriteFile(ca, read(t, redis.CAFile()), 0o644))
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		cmd, err := cmdtest.ImageCommand(bin, uid, gid,
			[]string{"RATE_LIMIT_HMAC_SECRET=" + hex.EncodeToString(secret), "REDIS_URL=" + redis.URL(), "SSL_CERT_FILE=" + ca},
			"-config", config, "-grpc-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0")
		require.NoError(t, err)
		p := start(t, cmd)
		require.NoError(t, cmdtest.CheckRunsAs(cmd.Process.Pid, uid, gid))

		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "the readiness probe")
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			// A fresh secret: keys no other run counts.
			Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{envoypeer.Desc("tenant", "acme")},
		})
		require.NoError(t, err)
		assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
		// The configuration degrades by bypassing: an OK alone does not
		// show that the Redis counted. Its keys do.
		keys, err := redis.Do(ctx, "DBSIZE")
		require.NoError(t, err)
		assert.NotZero(t, keys, "the decision was counted on the Redis, over TLS")
		for _, u := range []string{p.health, p.metrics} {
			r, err := http.Get(u)
			require.NoError(t, err)
			body, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			assert.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", u, body)
		}

		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM), "as the kubelet stops a pod")
		select {
		case <-p.exited:
			require.NoError(t, p.err, "exit 0 on SIGTERM: %s", p.stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatal("sluice-rls did not stop within 30 s of SIGTERM")
		}
	})
}

// worldReadableDir is a temporary directory that the image's user can
// read when the test runs as root.
func worldReadableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-rls-image-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

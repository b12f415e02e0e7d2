//go:build linux

package main

import (
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cmdtest"
)

// TestImage is what can be tested of the demo's image without building
// it (deploy/README.md): its Containerfile agrees with the demo's flags,
// the binary the tests run (built as make image builds it) is one a FROM
// scratch image can hold, and it serves as the image runs it.
func TestImage(t *testing.T) {
	cf, err := cmdtest.ReadContainerfile("../../deploy/image/demo.Containerfile")
	require.NoError(t, err)
	uid, gid, err := cf.UIDGID()
	require.NoError(t, err)

	t.Run("Containerfile", func(t *testing.T) {
		assert.Equal(t, "scratch", cf.From)
		assert.NotZero(t, uid, "USER is not root")
		assert.Equal(t, "demo", cf.Copies["/demo"], "make image builds bin/image/demo")
		assert.Equal(t, "ca-certificates.crt", cf.Copies["/etc/ssl/certs/ca-certificates.crt"])
		require.NotEmpty(t, cf.Entrypoint)
		assert.Equal(t, "/demo", cf.Entrypoint[0])
		// The entrypoint's addresses: every interface (the demo's default,
		// loopback, is unreachable from outside a container), on the
		// ports EXPOSE lists.
		o, err := parseOptions(append(cf.Entrypoint[1:], cf.Cmd...), os.Stderr)
		require.NoError(t, err)
		var ports []int
		for _, a := range []string{o.httpAddr, o.grpcAddr} {
			host, port, err := net.SplitHostPort(a)
			require.NoError(t, err)
			assert.Empty(t, host, "%s: every interface", a)
			n, err := strconv.Atoi(port)
			require.NoError(t, err)
			ports = append(ports, n)
		}
		assert.ElementsMatch(t, ports, cf.Expose)
		assert.True(t, o.dev, "CMD -dev: the image runs without a secret to set")
	})

	bin := binary(t)
	t.Run("Binary", func(t *testing.T) {
		require.NoError(t, cmdtest.CheckImageBinary(bin))
	})

	// Run as the image runs it: its entrypoint and CMD, as USER (when the
	// test runs as root; else as the test's own uid), in /, with no
	// environment (no HOME, no TMPDIR, no PATH); loopback ports chosen by
	// the kernel, given after the entrypoint's (the last flag wins).
	t.Run("Serves", func(t *testing.T) {
		args := append(slices.Concat(cf.Entrypoint[1:], cf.Cmd), "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0")
		cmd, err := cmdtest.ImageCommand(bin, uid, gid, nil, args...)
		require.NoError(t, err)
		p := start(t, cmd)
		require.NoError(t, cmdtest.CheckRunsAs(cmd.Process.Pid, uid, gid))
		resp, body := p.get(t, "GET", "/api/v1/search", http.Header{"X-Demo-User": {"alice@example.org"}})
		assert.Equal(t, http.StatusOK, resp.StatusCode, body)
		resp, body = p.get(t, "GET", "/metrics", nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Contains(t, body, "sluice_decisions_total")
		require.NoError(t, p.check(t), "gRPC health")
		p.stop(t)
	})
}

package redistest

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
)

// Environment variables that replace the harness' own servers.
const (
	// EnvURL names a standalone server, e.g. redis://:secret@10.0.0.5:6379/0.
	EnvURL = "REDIS_URL"
	// EnvClusterAddrs names cluster nodes, e.g. 10.0.0.5:7000,10.0.0.6:7000.
	EnvClusterAddrs = "REDIS_CLUSTER_ADDRS"
)

// The shared servers, started at most once per test binary. A failed start
// is remembered, so every later caller fails with the same error instead of
// trying again.
var (
	baseDirOnce sync.Once
	baseDir     string
	baseDirErr  error

	standaloneOnce sync.Once
	standalone     *Server
	standaloneErr  error

	clusterOnce  sync.Once
	clusterNodes []*Server
	clusterErr   error
)

// Main runs the package's tests and then stops every server the harness
// started, by PID, before exiting with the tests' status. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit: it returns the exit code for a TestMain that
// has more to do.
func Run(m *testing.M) int {
	code := m.Run()
	if err := stopAll(); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: stopping servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if baseDir != "" {
		_ = os.RemoveAll(baseDir)
	}
	return code
}

// sharedDir returns the temporary directory holding the shared servers'
// data directories; Run removes it.
func sharedDir() (string, error) {
	baseDirOnce.Do(func() { baseDir, baseDirErr = os.MkdirTemp("", "redistest-") })
	return baseDir, baseDirErr
}

// StandaloneURL returns the URL of the shared standalone server: REDIS_URL
// when set, else redis://127.0.0.1:port of a server started on first use.
//
// The server is shared by every test of the binary: use keys unique to the
// test and do not flush it or change its configuration (use NewServer for
// that).
func StandaloneURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return sharedStandalone(t).URL()
}

// Standalone returns the host:port of the shared standalone server (see
// StandaloneURL). With REDIS_URL set it returns the URL's host:port, and
// any credentials in the URL are only available from StandaloneURL.
func Standalone(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(EnvURL)
	if raw == "" {
		return sharedStandalone(t).Addr()
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("redistest: %s=%q is not a redis:// URL with a host", EnvURL, raw)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":6379"
	}
	return host
}

func sharedStandalone(t testing.TB) *Server {
	t.Helper()
	bin := serverBinary(t)
	standaloneOnce.Do(func() {
		var dir string
		if dir, standaloneErr = sharedDir(); standaloneErr != nil {
			return
		}
		dir, standaloneErr = os.MkdirTemp(dir, "standalone-")
		if standaloneErr != nil {
			return
		}
		standalone, standaloneErr = newServer(bin, dir, Config{}, nil)
	})
	if standaloneErr != nil {
		t.Fatalf("redistest: shared standalone server: %v", standaloneErr)
	}
	return standalone
}

// Cluster returns the host:port of every master of the shared three-master
// Redis Cluster: REDIS_CLUSTER_ADDRS when set, else a cluster started on
// first use, with its 16384 slots split evenly and every node agreeing on
// the slot map (cluster_state:ok on each) before Cluster returns.
//
// Like the standalone server, the cluster is shared by the whole binary.
func Cluster(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv(EnvClusterAddrs); env != "" {
		var addrs []string
		for a := range strings.SplitSeq(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return addrs
	}
	bin := serverBinary(t)
	clusterOnce.Do(func() {
		var dir string
		if dir, clusterErr = sharedDir(); clusterErr != nil {
			return
		}
		if dir, clusterErr = os.MkdirTemp(dir, "cluster-"); clusterErr != nil {
			return
		}
		clusterNodes, clusterErr = startCluster(bin, dir, ClusterConfig{Masters: 3, NodeTimeout: sharedNodeTimeout}, false)
	})
	if clusterErr != nil {
		t.Fatalf("redistest: shared cluster: %v", clusterErr)
	}
	addrs := make([]string, len(clusterNodes))
	for i, n := range clusterNodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

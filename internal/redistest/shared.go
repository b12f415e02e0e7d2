package redistest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables that replace the harness' own servers.
const (
	// EnvURL names a standalone server, e.g. redis://:secret@10.0.0.5:6379/0.
	EnvURL = "REDIS_URL"
	// EnvClusterAddrs names cluster nodes, e.g. 10.0.0.5:7000,10.0.0.6:7000.
	EnvClusterAddrs = "REDIS_CLUSTER_ADDRS"
)

// clusterTimeout bounds the wait for a new cluster to agree on its slots.
const clusterTimeout = 30 * time.Second

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
		standalone, standaloneErr = startServer(bin, dir, false, nil)
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
	clusterOnce.Do(func() { clusterNodes, clusterErr = startCluster(bin) })
	if clusterErr != nil {
		t.Fatalf("redistest: shared cluster: %v", clusterErr)
	}
	addrs := make([]string, len(clusterNodes))
	for i, n := range clusterNodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// startCluster starts three cluster-enabled servers, gives each a distinct
// config epoch and a third of the slots, joins them with CLUSTER MEET and
// waits until every node reports cluster_state:ok with the same slot map.
func startCluster(bin string) ([]*Server, error) {
	base, err := sharedDir()
	if err != nil {
		return nil, err
	}
	const masters = 3
	nodes := make([]*Server, 0, masters)
	fail := func(err error) ([]*Server, error) {
		for _, n := range nodes {
			_ = n.Stop()
		}
		return nil, err
	}
	for i := range masters {
		dir, err := os.MkdirTemp(base, fmt.Sprintf("cluster-%d-", i))
		if err != nil {
			return fail(err)
		}
		n, err := startServer(bin, dir, true, nil)
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	per := 16384 / masters
	for i, n := range nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		// Distinct epochs avoid the epoch-collision dance on first contact,
		// as redis-cli --cluster create does.
		if _, err := n.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fail(fmt.Errorf("node %s: CLUSTER SET-CONFIG-EPOCH: %w", n.Addr(), err))
		}
		if _, err := n.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fail(fmt.Errorf("node %s: CLUSTER ADDSLOTSRANGE: %w", n.Addr(), err))
		}
	}
	for _, n := range nodes[1:] {
		if _, err := nodes[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port), strconv.Itoa(n.busPort)); err != nil {
			return fail(fmt.Errorf("CLUSTER MEET %s: %w", n.Addr(), err))
		}
	}
	if err := waitClusterOK(ctx, nodes); err != nil {
		return fail(err)
	}
	return nodes, nil
}

// waitClusterOK polls every node until each says cluster_state:ok, knows
// every node, and returns the same CLUSTER SLOTS map as the others.
func waitClusterOK(ctx context.Context, nodes []*Server) error {
	var last string
	for {
		ok, why := clusterAgrees(ctx, nodes)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready within %s: %s", clusterTimeout, last)
		case <-time.After(pollInterval * 4):
		}
	}
}

func clusterAgrees(ctx context.Context, nodes []*Server) (bool, string) {
	var first string
	for i, n := range nodes {
		v, err := n.Do(ctx, "CLUSTER", "INFO")
		if err != nil {
			return false, fmt.Sprintf("%s: CLUSTER INFO: %v", n.Addr(), err)
		}
		info, _ := v.(string)
		for _, want := range []string{
			"cluster_state:ok",
			"cluster_slots_assigned:16384",
			"cluster_slots_ok:16384",
			"cluster_known_nodes:" + strconv.Itoa(len(nodes)),
			"cluster_size:" + strconv.Itoa(len(nodes)),
		} {
			if !strings.Contains(info, want+"\r\n") {
				return false, fmt.Sprintf("%s: no %q yet", n.Addr(), want)
			}
		}
		v, err = n.Do(ctx, "CLUSTER", "SLOTS")
		if err != nil {
			return false, fmt.Sprintf("%s: CLUSTER SLOTS: %v", n.Addr(), err)
		}
		m := slotMap(v)
		if i == 0 {
			first = m
		} else if m != first {
			return false, fmt.Sprintf("%s sees slots %s, %s sees %s", n.Addr(), m, nodes[0].Addr(), first)
		}
	}
	return true, ""
}

// slotMap renders a CLUSTER SLOTS reply as "lo-hi@port,..." sorted by lo,
// which is how Redis returns it.
func slotMap(v any) string {
	ranges, _ := v.([]any)
	var b strings.Builder
	for _, r := range ranges {
		e, _ := r.([]any)
		if len(e) < 3 {
			continue
		}
		master, _ := e[2].([]any)
		if len(master) < 2 {
			continue
		}
		fmt.Fprintf(&b, "%v-%v@%v,", e[0], e[1], master[1])
	}
	return b.String()
}

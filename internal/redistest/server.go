package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeouts of the harness. Startup polls PING; nothing sleeps for a fixed
// time beyond one polling interval.
const (
	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
	pollInterval = 5 * time.Millisecond
)

// installHint is appended to every "redis-server not found" failure.
const installHint = "install it with `make deps` or `apt-get install redis-server` " +
	"(or point REDIS_URL / REDIS_CLUSTER_ADDRS at running servers)"

// Server is one redis-server process started by this package. Its methods
// are safe for simultaneous use.
type Server struct {
	bin  string
	dir  string
	port int
	// busPort is the cluster bus port, 0 for a server outside a cluster.
	busPort int
	extra   []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// NewServer starts a dedicated standalone redis-server on a free loopback
// port, with its data directory in t.TempDir(), and stops it on t.Cleanup.
// extraArgs are appended to the command line, e.g. "--maxmemory", "10mb".
//
// The server belongs to the test: it may Stop it and Start it again on the
// same port (an outage drill), change its configuration, or flush it.
func NewServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin := serverBinary(t)
	s, err := startServer(bin, t.TempDir(), false, extraArgs)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("redistest: stopping %s: %v", s.Addr(), err)
		}
	})
	return s
}

// Addr returns the server's host:port on the loopback interface.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns redis://host:port, the form of REDIS_URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// PID returns the process id of the running server, 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Start starts the server again on the same port after Stop, and returns
// once it answers PING. Starting a running server is a no-op.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	return s.startLocked()
}

// Stop stops the server (SIGTERM, then SIGKILL after a grace period) and
// waits for the process to exit. Its port is then closed: clients see
// connection refused. Stopping a stopped server is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-exited
	return nil
}

// Do sends one command to the server; see the package-level Do.
func (s *Server) Do(ctx context.Context, args ...string) (any, error) {
	return Do(ctx, s.Addr(), args...)
}

func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
	}
	if s.busPort != 0 {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		)
	}
	return append(a, s.extra...)
}

// startLocked starts the process and waits for PING; s.mu is held.
func (s *Server) startLocked() error {
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := startProcess(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	register(s)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		v, err := Do(pctx, s.Addr(), "PING")
		pcancel()
		if err == nil && v == "PONG" {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited at startup: %s%s", s.port, stderr.String(), s.logTail())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %s (last error: %v)%s", s.port, startTimeout, err, s.logTail())
		case <-time.After(pollInterval):
		}
	}
}

// logTail returns the end of the server's log file, for failure messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nredis.log:\n" + string(b)
}

// startServer picks free ports and starts a server in dir. A port taken
// between the probe and the bind is retried on another port.
func startServer(bin, dir string, cluster bool, extra []string) (*Server, error) {
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, dir: dir, port: port, extra: extra}
		if cluster {
			if s.busPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		lastErr = s.startLocked()
		s.mu.Unlock()
		if lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serverBinary returns the redis-server path or fails the test with
// installation instructions. It never skips.
func serverBinary(t testing.TB) string {
	t.Helper()
	bin, err := lookupServer()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return bin
}

func lookupServer() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found in PATH: %s", installHint)
	}
	return bin, nil
}

// The registry of every process started by this test binary, for Main.
var (
	registryMu sync.Mutex
	registry   = map[*Server]struct{}{}
)

func register(s *Server) {
	registryMu.Lock()
	registry[s] = struct{}{}
	registryMu.Unlock()
}

// stopAll stops every server this binary started and returns the first
// error.
func stopAll() error {
	registryMu.Lock()
	servers := make([]*Server, 0, len(registry))
	for s := range registry {
		servers = append(servers, s)
	}
	clear(registry)
	registryMu.Unlock()
	var first error
	for _, s := range servers {
		if err := s.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

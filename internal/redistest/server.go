package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
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

// File names in a server's data directory.
const (
	confFile   = "redis.conf"
	logFile    = "redis.log"
	outputFile = "redis.out" // stdout and stderr
)

// installHint is appended to every "redis-server not found" failure.
const installHint = "install it with `make deps` or `apt-get install redis-server` " +
	"(or point REDIS_URL / REDIS_CLUSTER_ADDRS at running servers)"

// ErrClosed is returned by Start on a server whose test has ended.
var ErrClosed = errors.New("redistest: server closed")

// Server is one redis-server process started by this package, bound to
// one loopback port for its whole life: it may be stopped, killed and
// started again, always on that port. Its methods are safe for
// simultaneous use.
type Server struct {
	bin     string
	dir     string
	port    int
	cfg     Config
	cluster *clusterNode   // nil outside a cluster
	tls     *tlsMaterial   // nil without TLS
	ports   []reservedPort // held until close

	mu     sync.Mutex
	proc   *process // nil when stopped
	closed bool
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and been reaped
	paused bool
}

// alive reports whether the process has not been reaped yet.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// NewServer starts a dedicated standalone redis-server on a free loopback
// port, with its data directory in t.TempDir(), and stops it on t.Cleanup.
// extraArgs are appended to the command line, e.g. "--maxmemory", "10mb".
// It is NewServerWith(t, Config{Args: extraArgs}).
//
// The server belongs to the test: it may Stop or Kill it and Start it again
// on the same port (an outage drill), change its configuration, or flush
// it.
func NewServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return NewServerWith(t, Config{Args: extraArgs})
}

// NewServerWith starts a dedicated standalone redis-server configured by
// cfg (a password, ACL users, TLS, a memory limit, persistence; or, with
// Config.Stopped, only reserves its port) and stops it on t.Cleanup. A bad
// cfg fails the test with the field at fault.
func NewServerWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := serverBinary(t)
	s, err := newServer(bin, t.TempDir(), cfg, nil)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("redistest: stopping %s: %v", s.Addr(), err)
		}
	})
	return s
}

// Addr returns the server's host:port on the loopback interface.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data directory (redis.conf, redis.log, and
// the RDB or AOF files of a persistent server).
func (s *Server) Dir() string { return s.dir }

// URL returns the server's URL in the form of REDIS_URL, with the default
// user's password when Config.Password is set: redis://127.0.0.1:port,
// redis://:password@127.0.0.1:port, or rediss://… for a TLS server (whose
// client also needs TLSConfig, since the CA is the harness' own).
func (s *Server) URL() string {
	if s.cfg.Password == "" {
		return s.urlWith(nil)
	}
	return s.urlWith(url.UserPassword("", s.cfg.Password))
}

// URLWith returns the server's URL with the given credentials, e.g. those
// of one of Config.Users, or wrong ones for a test of refusal.
func (s *Server) URLWith(user, password string) string {
	return s.urlWith(url.UserPassword(user, password))
}

func (s *Server) urlWith(u *url.Userinfo) string {
	scheme := "redis"
	if s.tls != nil {
		scheme = "rediss"
	}
	return (&url.URL{Scheme: scheme, User: u, Host: s.Addr()}).String()
}

// TLSConfig returns a new client TLS configuration for a TLS server: it
// trusts the server's CA and, with Config.ClientCerts, presents a client
// certificate. It returns nil for a server without TLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.config()
}

// CAPool returns the pool holding the CA that issued a TLS server's
// certificate, nil without TLS.
func (s *Server) CAPool() *x509.CertPool {
	if s.tls == nil {
		return nil
	}
	return s.tls.pool
}

// CAFile returns the path of that CA's PEM certificate, "" without TLS.
func (s *Server) CAFile() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.caFile
}

// Do sends one command to the server, over TLS and authenticated as the
// default user when the server has TLS or a password; see the
// package-level Do for the reply's form.
func (s *Server) Do(ctx context.Context, args ...string) (any, error) {
	return s.access().do(ctx, s.Addr(), args...)
}

func (s *Server) access() access {
	a := access{password: s.cfg.Password}
	if s.tls != nil {
		a.tls = s.tls.config()
	}
	return a
}

// PID returns the process id of the running server, 0 when it is not
// running: stopped, killed, or exited on its own. A process killed from
// outside counts as running until it has exited, a few milliseconds after
// the signal.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.proc.alive() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Running reports whether the server's process is alive (a paused server
// is); see PID for a process killed from outside.
func (s *Server) Running() bool { return s.PID() != 0 }

// Start starts the server again on its port and returns once it answers
// PING. It works whatever stopped the server: Stop, Kill, a signal from
// outside (kill -9), or a crash. A running server that answers PING, or
// is paused, is left as it is; one that is dying is waited for, then
// started again.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.proc != nil {
		running, err := s.settleLocked()
		if err != nil || running {
			return err
		}
	}
	return s.startLocked()
}

// settleLocked tells a live server from a dead or dying one. A process
// signalled from outside may not have exited yet; once it has received
// SIGKILL it never answers again, so a PING that fails is followed by a
// wait for the exit. It clears s.proc when the process is gone.
func (s *Server) settleLocked() (running bool, err error) {
	p := s.proc
	if p.paused && p.alive() {
		return true, nil
	}
	deadline := time.Now().Add(stopTimeout)
	for {
		if !p.alive() {
			s.proc = nil
			return false, nil
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		v, err := s.Do(ctx, "PING")
		cancel()
		if err == nil && v == "PONG" {
			return true, nil
		}
		select {
		case <-p.exited:
			s.proc = nil
			return false, nil
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("redis-server pid %d on port %d is alive but does not answer PING (last error: %v)", p.cmd.Process.Pid, s.port, err)
		}
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after a grace period) and
// waits for the process to exit. Its port is then closed: clients see
// connection refused. A PersistRDB server writes its snapshot. Stopping a
// stopped server is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGTERM)
}

// Kill kills the server with SIGKILL, the drills' outage: no shutdown,
// no snapshot, connections cut. It returns once the process has exited.
// Killing a stopped server is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGKILL)
}

// Restart stops the server gracefully and starts it again on its port.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Pause freezes the server with SIGSTOP: its port still accepts
// connections (the kernel completes them) but nothing is answered until
// Resume, the "Redis hangs" drill. Pausing a paused server is a no-op; a
// stopped server cannot be paused.
func (s *Server) Pause() error { return s.pause(true) }

// Resume undoes Pause with SIGCONT.
func (s *Server) Resume() error { return s.pause(false) }

func (s *Server) pause(stop bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || !p.alive() {
		return fmt.Errorf("redistest: server on port %d is not running", s.port)
	}
	sig := sigResume
	if stop {
		sig = sigPause
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	p.paused = stop
	return nil
}

// stopLocked sends sig and waits for the exit, escalating to SIGKILL after
// stopTimeout; s.mu is held.
func (s *Server) stopLocked(sig syscall.Signal) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if !p.alive() {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	if p.paused {
		// A stopped process acts on SIGTERM only once continued.
		_ = p.cmd.Process.Signal(sigResume)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redis-server pid %d on port %d survived SIGKILL for %s", p.cmd.Process.Pid, s.port, stopTimeout)
	}
}

// close stops the server for good and frees its ports, at the end of its
// test or test binary.
func (s *Server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stopLocked(syscall.SIGTERM)
	s.releasePorts()
	registryMu.Lock()
	delete(registry, s)
	registryMu.Unlock()
	return err
}

// startLocked starts the process and waits for PING; s.mu is held.
func (s *Server) startLocked() error {
	p, err := s.spawn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		v, err := s.Do(pctx, "PING")
		pcancel()
		if err == nil && v == "PONG" {
			s.proc = p
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redis-server on port %d exited at startup: %s%s", s.port, s.output(), s.logTail())
		case <-ctx.Done():
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %s (last error: %v)%s", s.port, startTimeout, err, s.logTail())
		case <-time.After(pollInterval):
		}
	}
}

// spawn starts redis-server on the configuration file and a goroutine
// that reaps it.
func (s *Server) spawn() (*process, error) {
	if s.cfg.Persistence == PersistNone {
		// Start empty even if a SAVE or a replica's full sync left a
		// snapshot behind.
		_ = os.Remove(filepath.Join(s.dir, "dump.rdb"))
		_ = os.RemoveAll(filepath.Join(s.dir, "appendonlydir"))
	}
	cmd := exec.Command(s.bin, append([]string{filepath.Join(s.dir, confFile)}, s.cfg.Args...)...)
	cmd.Dir = s.dir
	// What Redis prints before its log file is open (a configuration
	// error) goes to a file: no copying goroutine outlives the start.
	out, err := os.Create(filepath.Join(s.dir, outputFile))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	err = startProcess(cmd)
	_ = out.Close()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// output returns what the server printed on stdout and stderr.
func (s *Server) output() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, outputFile))
	return string(b)
}

// logTail returns the end of the server's log file, for failure messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, logFile))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nredis.log:\n" + string(b)
}

// newServer reserves ports, writes the configuration (and the TLS
// material) into dir and starts the server; it is registered for Main.
// A port another program took between the reservation and the bind is
// given up for another.
func newServer(bin, dir string, cfg Config, cluster *clusterNode) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, cfg: cfg, cluster: cluster}
	if cfg.TLS {
		m, err := newTLSMaterial(dir, cfg.ClientCerts)
		if err != nil {
			return nil, fmt.Errorf("TLS certificates: %w", err)
		}
		s.tls = m
	}
	var lastErr error
	for range 5 {
		if err := s.reservePorts(); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, confFile), []byte(s.confFile()), 0o600); err != nil {
			s.releasePorts()
			return nil, err
		}
		if cfg.Stopped {
			register(s)
			return s, nil
		}
		s.mu.Lock()
		lastErr = s.startLocked()
		s.mu.Unlock()
		if lastErr == nil {
			register(s)
			return s, nil
		}
		s.releasePorts()
	}
	return nil, lastErr
}

// reservePorts reserves the server's port and, in a cluster, its bus port.
func (s *Server) reservePorts() error {
	n := 1
	if s.cluster != nil {
		n = 2
	}
	for range n {
		p, err := reservePort()
		if err != nil {
			s.releasePorts()
			return err
		}
		s.ports = append(s.ports, p)
	}
	s.port = s.ports[0].port
	if s.cluster != nil {
		s.cluster.busPort = s.ports[1].port
	}
	return nil
}

func (s *Server) releasePorts() {
	for _, p := range s.ports {
		p.release()
	}
	s.ports = nil
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

// The registry of every server started by this test binary, for Main.
var (
	registryMu sync.Mutex
	registry   = map[*Server]struct{}{}
)

func register(s *Server) {
	registryMu.Lock()
	registry[s] = struct{}{}
	registryMu.Unlock()
}

// stopAll stops every server this binary started, frees their ports and
// returns the first error.
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
		if err := s.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

package httpload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/bench/internal/suite"
)

// demoPackage is the demo's package, relative to sluice's module root.
const demoPackage = "./examples/demo"

// build compiles the demo into dir and returns the binary's path. It runs
// the go command found on PATH in sluice's module root, so that the demo
// is built from the very tree the bench measures.
func build(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "demo")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, demoPackage)
	cmd.Dir = root
	// Static, as the demo's image builds it (the Makefile's IMAGE_ENV):
	// the packages are then those sluice's own tests compiled for the
	// binaries they run, not a build of their own.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("httpload: go build %s: %w\n%s", demoPackage, err, out)
	}
	return bin, nil
}

// nineWindows is the bench's nine-window profile (bench/internal/suite:
// ip, user, api key and tenant × burst and sustained, and the tenant-global
// window), in the demo's configuration language.
func nineWindows() map[string]any {
	w := func(name string, period string) map[string]any {
		return map[string]any{"name": name, "limit": 1000, "period": period}
	}
	pair := []any{w("burst", "1s"), w("sustained", "10s")}
	return map[string]any{
		"ip": pair, "user": pair, "apikey": pair, "tenant": pair,
		"tenant_global": []any{w("sustained", "10s")},
	}
}

// writeConfig writes the demo's own configuration into dir with the
// windows of its search profile replaced by the nine-window profile, and
// returns its path. Everything else (the other routes' profiles, the
// degraded matrix, the plans, and the store deadline unless storeTimeout
// is positive) stays the demo's.
func writeConfig(root, dir string, storeTimeout time.Duration) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, suite.DemoConfigPath))
	if err != nil {
		return "", err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("httpload: %s: %w", suite.DemoConfigPath, err)
	}
	profiles, _ := cfg["profiles"].([]any)
	found := false
	for _, p := range profiles {
		if m, ok := p.(map[string]any); ok && m["name"] == searchProfile {
			m["windows"], found = nineWindows(), true
		}
	}
	if !found {
		return "", fmt.Errorf("httpload: %s has no profile %q", suite.DemoConfigPath, searchProfile)
	}
	if storeTimeout > 0 {
		cfg["store_timeout"] = storeTimeout.String()
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sluice.yaml")
	return path, os.WriteFile(path, out, 0o600)
}

// searchProfile is the profile of the demo's search route, the route the
// load test sends.
const searchProfile = "search"

// demo is a running demo service.
type demo struct {
	cmd  *exec.Cmd
	base string // http://host:port
	log  string // its stderr
	done chan error
}

// start runs the demo binary on Redis at redisAddr with the configuration
// at config, its HTTP and gRPC servers on free loopback ports, and waits
// for the banner that says it listens.
func start(ctx context.Context, bin, config, redisAddr, dir string) (*demo, error) {
	logPath := filepath.Join(dir, "demo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-config", config, "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0",
		// The load generator stands for a proxy in front of the demo:
		// each client's address comes in X-Forwarded-For, so that its ip
		// windows count per client (docs/adr/013) as behind a real one.
		"-trusted-proxies", "127.0.0.0/8")
	// Later entries win: a REDIS_URL of the caller's does not leak in.
	cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+redisAddr, "RATE_LIMIT_HMAC_SECRET="+suite.Secret)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &demo{cmd: cmd, log: logPath, done: make(chan error, 1)}
	base := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "http: "); ok {
				select {
				case base <- v:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		d.done <- cmd.Wait()
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case d.base = <-base:
		return d, nil
	case err := <-d.done:
		return nil, fmt.Errorf("httpload: the demo exited before serving (%v): %s", err, tail(logPath))
	case <-timer.C:
		err = errors.New("httpload: the demo did not say where it listens within 30s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = cmd.Process.Kill()
	<-d.done
	return nil, fmt.Errorf("%w: %s", err, tail(logPath))
}

// pid is the demo's process id.
func (d *demo) pid() int { return d.cmd.Process.Pid }

// stop interrupts the demo (it shuts down gracefully) and waits for it; a
// demo still running 10 s later is killed.
func (d *demo) stop() error {
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		return err
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-d.done:
		if err != nil {
			return fmt.Errorf("httpload: the demo: %w: %s", err, tail(d.log))
		}
		return nil
	case <-timer.C:
		_ = d.cmd.Process.Kill()
		<-d.done
		return errors.New("httpload: the demo did not stop within 10s of an interrupt")
	}
}

// tail is the end of the demo's log, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

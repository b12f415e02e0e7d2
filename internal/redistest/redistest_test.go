package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	lockPortChild() // exits when the binary runs as another test binary's stand-in
	MainLeakFree(m)
}

func TestStandalone(t *testing.T) {
	ctx := t.Context()
	addr := Standalone(t)
	if again := Standalone(t); again != addr {
		t.Fatalf("Standalone started twice: %s then %s", addr, again)
	}
	if _, err := Do(ctx, addr, "SET", "redistest:standalone", "1"); err != nil {
		t.Fatal(err)
	}
	v, err := Do(ctx, addr, "GET", "redistest:standalone")
	if err != nil || v != "1" {
		t.Fatalf("GET = %v, %v; want 1", v, err)
	}
	if !strings.HasPrefix(StandaloneURL(t), "redis://") {
		t.Fatalf("StandaloneURL = %q", StandaloneURL(t))
	}
}

func TestStandalonePersistenceOff(t *testing.T) {
	if url := os.Getenv(EnvURL); url != "" {
		// The server is the caller's, and so is its configuration: what
		// the harness owes then is to hand that server out.
		if got := StandaloneURL(t); got != url {
			t.Fatalf("StandaloneURL = %q with %s=%q; want the given server", got, EnvURL, url)
		}
		return
	}
	v, err := Do(t.Context(), Standalone(t), "CONFIG", "GET", "save")
	if err != nil {
		t.Fatal(err)
	}
	if kv, _ := v.([]any); len(kv) != 2 || kv[1] != "" {
		t.Fatalf("CONFIG GET save = %v; want an empty save policy", v)
	}
}

func TestCluster(t *testing.T) {
	ctx := t.Context()
	addrs := Cluster(t)
	if len(addrs) != 3 {
		t.Fatalf("Cluster returned %d nodes; want 3", len(addrs))
	}
	for _, a := range addrs {
		v, err := Do(ctx, a, "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(v.(string), "cluster_state:ok") {
			t.Fatalf("%s: %s", a, v)
		}
	}
	// A key lands on exactly one master; the two others redirect.
	var owners, moved int
	for _, a := range addrs {
		_, err := Do(ctx, a, "SET", "{redistest}:k", "1")
		var re RedisError
		switch {
		case err == nil:
			owners++
		case errors.As(err, &re) && strings.HasPrefix(string(re), "MOVED"):
			moved++
		default:
			t.Fatalf("%s: SET: %v", a, err)
		}
	}
	if owners != 1 || moved != 2 {
		t.Fatalf("owners=%d moved=%d; want 1 and 2", owners, moved)
	}
}

func TestServerStopStartSamePort(t *testing.T) {
	ctx := t.Context()
	s := NewServer(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 {
		t.Fatal("PID after Stop should be 0")
	}
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("restarted on %s; want %s", s.Addr(), addr)
	}
	if v, err := s.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
}

func TestServerExtraArgs(t *testing.T) {
	s := NewServer(t, "--maxmemory", "12345678")
	v, err := s.Do(t.Context(), "CONFIG", "GET", "maxmemory")
	if err != nil {
		t.Fatal(err)
	}
	if kv, _ := v.([]any); len(kv) != 2 || kv[1] != "12345678" {
		t.Fatalf("CONFIG GET maxmemory = %v", v)
	}
}

func TestDoRedisError(t *testing.T) {
	_, err := Do(context.Background(), Standalone(t), "NOSUCHCOMMAND")
	var re RedisError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "ERR") {
		t.Fatalf("err = %v; want a RedisError", err)
	}
}

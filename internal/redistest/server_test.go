//go:build unix

package redistest

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The defect: after kill -9 from outside, Start did nothing and PID still
// named the dead process, so a drill could not bring Redis back.
func TestServerStartAfterExternalKill(t *testing.T) {
	ctx := t.Context()
	s := NewServer(t)
	addr, old := s.Addr(), s.PID()
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
	// Straight after the signal: the process may not have exited yet.
	require.NoError(t, s.Start())
	pid := s.PID()
	require.NotZero(t, pid, "PID after Start")
	require.NotEqual(t, old, pid, "Start after kill -9 must start a new process")
	require.Equal(t, addr, s.Addr(), "restarted on another port")
	v, err := s.Do(ctx, "PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", v)
}

func TestServerPIDAfterExternalKill(t *testing.T) {
	s := NewServer(t)
	require.True(t, s.Running())
	require.NoError(t, syscall.Kill(s.PID(), syscall.SIGKILL))
	waitFor(t, func() bool { return s.PID() == 0 }, "PID of a server killed from outside is not 0")
	assert.False(t, s.Running())
	assertRefused(t, s.Addr())
	require.NoError(t, s.Stop(), "Stop of a killed server")
	require.NoError(t, s.Start())
	assert.True(t, s.Running())
}

func TestServerKillStart(t *testing.T) {
	ctx := t.Context()
	s := NewServer(t)
	addr, old := s.Addr(), s.PID()
	_, err := s.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)

	require.NoError(t, s.Kill())
	assert.Zero(t, s.PID(), "PID after Kill")
	assert.False(t, s.Running())
	assertRefused(t, addr)
	require.NoError(t, s.Kill(), "Kill of a killed server is a no-op")

	require.NoError(t, s.Start())
	assert.NotEqual(t, old, s.PID())
	assert.Equal(t, addr, s.Addr())
	v, err := s.Do(ctx, "GET", "k")
	require.NoError(t, err)
	assert.Nil(t, v, "a server without persistence restarts empty")
}

// A server made Stopped holds its port and answers nothing until Start:
// a service can be started against its address first.
func TestServerStoppedStartsLater(t *testing.T) {
	ctx := t.Context()
	s := NewServerWith(t, Config{Stopped: true})
	require.False(t, s.Running())
	_, err := s.Do(ctx, "PING")
	require.Error(t, err, "nothing listens before Start")
	addr := s.Addr()
	require.NoError(t, s.Start())
	require.Equal(t, addr, s.Addr())
	v, err := s.Do(ctx, "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", v)
}

func TestServerStartRunningIsNoop(t *testing.T) {
	s := NewServer(t)
	pid := s.PID()
	require.NoError(t, s.Start())
	assert.Equal(t, pid, s.PID())
}

func TestServerRestart(t *testing.T) {
	s := NewServer(t)
	pid := s.PID()
	require.NoError(t, s.Restart())
	assert.NotEqual(t, pid, s.PID())
	assert.True(t, s.Running())
}

func TestServerPauseResume(t *testing.T) {
	s := NewServer(t)
	require.NoError(t, s.Pause())
	require.NoError(t, s.Pause(), "Pause of a paused server")
	// A paused server never answers, so this wait cannot pass by luck.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err := s.Do(ctx, "PING")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, s.Running(), "a paused server is running")
	pid := s.PID()
	require.NoError(t, s.Start(), "Start of a paused server")
	assert.Equal(t, pid, s.PID(), "Start replaced a paused server")

	require.NoError(t, s.Resume())
	v, err := s.Do(t.Context(), "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", v)
}

func TestServerStopPaused(t *testing.T) {
	s := NewServer(t)
	require.NoError(t, s.Pause())
	require.NoError(t, s.Stop())
	assert.False(t, s.Running())
	require.Error(t, s.Pause(), "Pause of a stopped server")
	require.NoError(t, s.Start())
}

func TestServerPersistence(t *testing.T) {
	// stop is how the server goes down: "stop" (graceful) or "kill".
	for _, tc := range []struct {
		p        Persistence
		stop     string
		save     bool // SAVE before the second write
		wantKept []string
		wantLost []string
	}{
		{PersistNone, "stop", true, nil, []string{"a", "b"}},
		{PersistNone, "kill", true, nil, []string{"a", "b"}},
		{PersistRDB, "stop", false, []string{"a", "b"}, nil},
		{PersistRDB, "kill", true, []string{"a"}, []string{"b"}},
		{PersistAOF, "kill", false, []string{"a", "b"}, nil},
	} {
		t.Run(tc.p.String()+"/"+tc.stop, func(t *testing.T) {
			ctx := t.Context()
			s := NewServerWith(t, Config{Persistence: tc.p})
			_, err := s.Do(ctx, "SET", "a", "1")
			require.NoError(t, err)
			if tc.save {
				_, err := s.Do(ctx, "SAVE")
				require.NoError(t, err)
			}
			_, err = s.Do(ctx, "SET", "b", "1")
			require.NoError(t, err)
			if tc.stop == "kill" {
				require.NoError(t, s.Kill())
			} else {
				require.NoError(t, s.Stop())
			}
			require.NoError(t, s.Start())
			for _, k := range tc.wantKept {
				v, err := s.Do(ctx, "GET", k)
				require.NoError(t, err)
				assert.Equal(t, "1", v, "key %s lost", k)
			}
			for _, k := range tc.wantLost {
				v, err := s.Do(ctx, "GET", k)
				require.NoError(t, err)
				assert.Nil(t, v, "key %s kept", k)
			}
		})
	}
}

func TestServerMaxMemory(t *testing.T) {
	ctx := t.Context()
	s := NewServerWith(t, Config{MaxMemory: "3mb", MaxMemoryPolicy: "noeviction"})
	for _, kv := range [][2]string{{"maxmemory", "3145728"}, {"maxmemory-policy", "noeviction"}} {
		v, err := s.Do(ctx, "CONFIG", "GET", kv[0])
		require.NoError(t, err)
		require.Equal(t, []any{kv[0], kv[1]}, v)
	}
	// Fill it: a 64 KiB value at a time, until Redis refuses.
	val := string(make([]byte, 64<<10))
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = s.Do(ctx, "SET", "fill:"+time.Now().Format(time.RFC3339Nano), val)
	}
	var re RedisError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, string(re), "OOM")
	// CONFIG SET and FLUSHALL through Do bring it back.
	_, err = s.Do(ctx, "FLUSHALL")
	require.NoError(t, err)
	_, err = s.Do(ctx, "CONFIG", "SET", "maxmemory", "0")
	require.NoError(t, err)
	_, err = s.Do(ctx, "SET", "k", val)
	require.NoError(t, err)
}

func TestServerExtraArgsWin(t *testing.T) {
	// Args come after the harness' own settings.
	s := NewServerWith(t, Config{MaxMemory: "1mb", Args: []string{"--maxmemory", "2mb"}})
	v, err := s.Do(t.Context(), "CONFIG", "GET", "maxmemory")
	require.NoError(t, err)
	assert.Equal(t, []any{"maxmemory", "2097152"}, v)
}

func TestServerBadArgsFailsStart(t *testing.T) {
	_, err := newServer(serverBinary(t), t.TempDir(), Config{MaxMemoryPolicy: "sometimes"}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "maxmemory-policy", "the error names the bad setting")
}

func TestServerClosed(t *testing.T) {
	s, err := newServer(serverBinary(t), t.TempDir(), Config{}, nil)
	require.NoError(t, err)
	require.NoError(t, s.close())
	require.NoError(t, s.close())
	require.ErrorIs(t, s.Start(), ErrClosed)
	assert.False(t, s.Running())
}

func TestConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"unknown persistence":   {Persistence: 7},
		"client certs, no TLS":  {ClientCerts: true},
		"user without name":     {Users: []User{{Password: "p"}}},
		"user name with space":  {Users: []User{{Name: "a b", Password: "p"}}},
		"default user":          {Users: []User{{Name: "default", Password: "p"}}},
		"user twice":            {Users: []User{{Name: "a", Password: "p"}, {Name: "a", Password: "q"}}},
		"user without password": {Users: []User{{Name: "a"}}},
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, c.validate())
			_, err := newServer(serverBinary(t), t.TempDir(), c, nil)
			require.Error(t, err, "newServer must refuse what validate refuses")
		})
	}
	require.NoError(t, Config{Password: `p"a\ss w`, Users: []User{{Name: "a", Password: "x"}}, TLS: true, ClientCerts: true}.validate())
}

func TestQuoteConf(t *testing.T) {
	assert.Equal(t, `"a \"b\" \\c\x0a\xc3\xa9"`, quoteConf("a \"b\" \\c\né"))
	assert.Equal(t, `""`, quoteConf(""))
}

// assertRefused checks that nothing listens on addr.
func assertRefused(t *testing.T, addr string) {
	t.Helper()
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections", addr)
	}
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial %s: %v; want connection refused", addr, err)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(pollInterval)
	}
}

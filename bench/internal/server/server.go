// Package server is the Redis a benchmark run measures against: a private
// redis-server started through the project's test harness
// (internal/redistest), or a running one, and what Redis says about itself
// between measurements: the cost of the scripts it ran (INFO
// commandstats), its memory (INFO memory, MEMORY USAGE) and its keys.
package server

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Server is one Redis.
type Server struct {
	addr  string
	close func() error
}

// Start starts a private redis-server on a free loopback port, with
// persistence off, and extra redis-server arguments, if any. Close stops
// it and removes its directory.
func Start(args ...string) (s *Server, err error) {
	tb := &harnessTB{}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = f.err
			_ = tb.cleanup()
		}
	}()
	srv := redistest.NewServerWith(tb, redistest.Config{Args: args})
	return &Server{addr: srv.Addr(), close: tb.cleanup}, nil
}

// Attach uses the running server at addr (host:port, no password). The
// run flushes it and resets its statistics: never point it at a server
// that holds anything of value.
func Attach(addr string) *Server {
	return &Server{addr: addr, close: func() error { return nil }}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Close stops a server that Start started; it leaves an attached one alone.
func (s *Server) Close() error { return s.close() }

func (s *Server) do(ctx context.Context, args ...string) (any, error) {
	v, err := redistest.Do(ctx, s.addr, args...)
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", strings.Join(args, " "), err)
	}
	return v, nil
}

// Flush deletes every key, synchronously, so that the next measurement
// starts from an empty dataset. Loaded scripts stay cached.
func (s *Server) Flush(ctx context.Context) error {
	_, err := s.do(ctx, "FLUSHALL", "SYNC")
	return err
}

// ResetStats zeroes INFO commandstats (CONFIG RESETSTAT).
func (s *Server) ResetStats(ctx context.Context) error {
	_, err := s.do(ctx, "CONFIG", "RESETSTAT")
	return err
}

// Version returns the server's redis_version.
func (s *Server) Version(ctx context.Context) (string, error) {
	info, err := s.info(ctx, "server")
	if err != nil {
		return "", err
	}
	return info["redis_version"], nil
}

// Stats is what Redis says after a measurement.
type Stats struct {
	// ScriptCalls and ScriptMicros count the scripts run (EVAL, EVALSHA and
	// their read-only forms) since the last ResetStats, and the server time
	// they took, commands inside them included.
	ScriptCalls, ScriptMicros int64
	// Calls and Micros count every other top-level command the clients
	// sent (a peer that needs more than a script, a health probe...).
	// Commands run inside scripts, and INFO, are not counted.
	Calls, Micros int64
	// UsedMemory is INFO memory's used_memory, in bytes. It includes the
	// clients' buffers: read it with no client connected to compare the
	// keys' memory (used_memory_dataset is no help: it wraps below zero
	// when the overhead estimate exceeds the memory in use).
	UsedMemory int64
	// Keys is DBSIZE.
	Keys int64
}

// scriptCommands are the commandstats entries of top-level script calls.
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// insideScripts are the commands sluice's, the floor's and the peers'
// scripts run (or may run: a script version reading another encoding or
// checking a key's type): commandstats counts them as well as the script
// call, so they are left out of Calls, unless no script ran: then a
// client sent them (the envoy shape's fixed windows).
var insideScripts = map[string]bool{
	"get": true, "set": true, "time": true, "zadd": true, "zcard": true, "zrange": true,
	"zremrangebyscore": true, "pexpire": true, "expire": true, "del": true, "incrby": true,
	"zrangebyscore": true, "setex": true, "psetex": true, "mget": true,
	"exists": true, "zcount": true, "type": true, "pttl": true, "ttl": true, "unlink": true,
	"zscore": true, "zrem": true, "zrevrange": true, "zrevrangebyscore": true, "zpopmin": true,
	"hget": true, "hmget": true, "hset": true, "hdel": true, "hgetall": true, "hincrby": true,
	"strlen": true, "getrange": true, "append": true, "pexpireat": true, "persist": true,
}

// Snapshot reads the statistics since the last ResetStats, the memory in
// use and the number of keys.
func (s *Server) Snapshot(ctx context.Context) (Stats, error) {
	var st Stats
	cmds, err := s.info(ctx, "commandstats")
	if err != nil {
		return st, err
	}
	var innerCalls, innerMicros int64
	for name, v := range cmds {
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok || cmd == "info" || cmd == "config|resetstat" || cmd == "dbsize" {
			continue
		}
		calls, usec := field(v, "calls"), field(v, "usec")
		switch {
		case insideScripts[cmd]:
			innerCalls += calls
			innerMicros += usec
		case scriptCommands[cmd]:
			st.ScriptCalls += calls
			st.ScriptMicros += usec
		default:
			st.Calls += calls
			st.Micros += usec
		}
	}
	if st.ScriptCalls == 0 {
		// No script ran: the client sent those commands itself
		// (envoyproxy/ratelimit's INCRBY and EXPIRE).
		st.Calls += innerCalls
		st.Micros += innerMicros
	}
	mem, err := s.info(ctx, "memory")
	if err != nil {
		return st, err
	}
	if st.UsedMemory, err = strconv.ParseInt(mem["used_memory"], 10, 64); err != nil {
		return st, fmt.Errorf("redis INFO memory: used_memory %q: %w", mem["used_memory"], err)
	}
	n, err := s.do(ctx, "DBSIZE")
	if err != nil {
		return st, err
	}
	st.Keys, _ = n.(int64)
	return st, nil
}

// KeyBytes returns the mean MEMORY USAGE (every nested value counted) of
// up to n keys drawn with RANDOMKEY, and how many it measured; 0, 0 for an
// empty dataset.
func (s *Server) KeyBytes(ctx context.Context, n int) (float64, int, error) {
	var total int64
	seen := map[string]bool{}
	for range n {
		k, err := s.do(ctx, "RANDOMKEY")
		if err != nil {
			return 0, 0, err
		}
		key, ok := k.(string)
		if !ok || seen[key] {
			continue
		}
		v, err := s.do(ctx, "MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil {
			return 0, 0, err
		}
		if b, ok := v.(int64); ok { // nil: the key expired meanwhile
			seen[key] = true
			total += b
		}
	}
	if len(seen) == 0 {
		return 0, 0, nil
	}
	return float64(total) / float64(len(seen)), len(seen), nil
}

// info returns INFO section as name → value.
func (s *Server) info(ctx context.Context, section string) (map[string]string, error) {
	v, err := s.do(ctx, "INFO", section)
	if err != nil {
		return nil, err
	}
	text, _ := v.(string)
	out := map[string]string{}
	for line := range strings.SplitSeq(text, "\r\n") {
		if k, val, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			out[k] = val
		}
	}
	return out, nil
}

// field reads name=123 from a commandstats value
// ("calls=3,usec=12,usec_per_call=4.00,...").
func field(v, name string) int64 {
	for kv := range strings.SplitSeq(v, ",") {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			n, _ := strconv.ParseInt(val, 10, 64)
			return n
		}
	}
	return 0
}

// harnessTB lends the test harness to a program. redistest's constructors
// take a testing.TB and use it for four things only: Helper, TempDir,
// Cleanup, and Errorf/Fatalf to report failures. testing.TB cannot be
// implemented outside package testing except by embedding it; the
// embedded interface stays nil, so a harness that began to call anything
// else would panic here at once rather than misbehave.
type harnessTB struct {
	testing.TB
	dirs     []string
	cleanups []func()
	errs     []string
}

// fatal carries a Fatalf out of the harness to Start, as runtime.Goexit
// carries it out of a test.
type fatal struct{ err error }

func (h *harnessTB) Helper() {}

func (h *harnessTB) TempDir() string {
	dir, err := os.MkdirTemp("", "sluicebench-")
	if err != nil {
		h.Fatalf("temporary directory: %v", err)
	}
	h.dirs = append(h.dirs, dir)
	return dir
}

func (h *harnessTB) Cleanup(f func()) { h.cleanups = append(h.cleanups, f) }

func (h *harnessTB) Errorf(format string, args ...any) {
	h.errs = append(h.errs, fmt.Sprintf(format, args...))
}

func (h *harnessTB) Fatalf(format string, args ...any) {
	panic(fatal{fmt.Errorf(format, args...)})
}

// cleanup runs the cleanups, last registered first as testing does,
// removes the temporary directories and returns what the cleanups
// reported.
func (h *harnessTB) cleanup() error {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	h.cleanups = nil
	for _, d := range h.dirs {
		_ = os.RemoveAll(d)
	}
	h.dirs = nil
	if len(h.errs) > 0 {
		return fmt.Errorf("stopping redis: %s", strings.Join(h.errs, "; "))
	}
	return nil
}

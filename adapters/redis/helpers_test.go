package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/internal/redistest"
)

// testTimeout replaces the 50 ms production deadline in tests that check
// behaviour rather than speed: the test machine is small and shared, and a
// correctness test must not fail because another process took the CPU.
// The timeout tests set their own.
const testTimeout = 2 * time.Second

// topology is one way of reaching Redis that every Redis test runs on.
type topology struct {
	name string
	cfg  func(t testing.TB) redis.Config
}

var topologies = []topology{
	{"standalone", func(t testing.TB) redis.Config {
		return redis.Config{URL: redistest.StandaloneURL(t), Timeout: testTimeout, Time: redis.CallerTime}
	}},
	{"cluster", func(t testing.TB) redis.Config {
		return redis.Config{Addrs: redistest.Cluster(t), Mode: redis.ModeCluster, Timeout: testTimeout, Time: redis.CallerTime}
	}},
}

// newStore returns a store on cfg, closed on t.Cleanup.
func newStore(t testing.TB, cfg redis.Config, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newDedicated starts a dedicated server and a store on it that runs on the
// caller's clock, as the tests script time (TestServerTime makes its own).
func newDedicated(t testing.TB, cfg redis.Config, args ...string) (*redistest.Server, *redis.Store) {
	t.Helper()
	srv := redistest.NewServer(t, args...)
	cfg.Addrs = []string{srv.Addr()}
	cfg.Time = redis.CallerTime
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	return srv, newStore(t, cfg)
}

// tag returns a hash tag unique to the test run, so that tests sharing a
// server never share keys.
func tag(t testing.TB) string {
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

// do runs an administrative command through the harness' own client.
func do(t testing.TB, addr string, args ...string) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := redistest.Do(ctx, addr, args...)
	require.NoError(t, err, "%v", args)
	return v
}

// compactUnits decodes a compact sliding log (see lua/rate_limit_v5.lua):
// "\x01", then the instant of each unit, unix microseconds in 7 bytes,
// big-endian.
func compactUnits(t testing.TB, v string) []int64 {
	t.Helper()
	require.NotEmpty(t, v)
	require.Equal(t, byte(1), v[0], "not a compact log")
	require.Zero(t, (len(v)-1)%7, "compact log of %d bytes", len(v))
	var units []int64
	for i := 1; i < len(v); i += 7 {
		var b [8]byte
		copy(b[1:], v[i:i+7])
		units = append(units, int64(binary.BigEndian.Uint64(b[:])))
	}
	return units
}

// gcraValue decodes a GCRA value of rate_limit_v5 ("\x02", i8 TAT, i8
// emission interval) into its TAT and interval.
func gcraValue(t testing.TB, v string) (tat, interval int64) {
	t.Helper()
	require.Len(t, v, 17, "not a v3 GCRA value: %q", v)
	require.Equal(t, byte(2), v[0], "not a v3 GCRA value: %q", v)
	return int64(binary.BigEndian.Uint64([]byte(v[1:9]))), int64(binary.BigEndian.Uint64([]byte(v[9:17])))
}

package redis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBootsDuringAnOutage: in every mode, New on a Redis that is not up
// yet returns a store (a service that restarts during an outage must not
// crash-loop), whose calls fail as an outage, whose Ready says why, and
// which connects, mode found then, once Redis answers: at a probe, or by
// itself at a call.
func TestBootsDuringAnOutage(t *testing.T) {
	cases := []struct {
		name    string
		mode    redis.Mode
		cluster bool // the server, started later, is a Redis Cluster node
		byProbe bool // a probe connects it, else calls do
	}{
		{"standalone, by a probe", redis.ModeStandalone, false, true},
		{"auto on a standalone server, by calls", redis.ModeAuto, false, false},
		{"auto on a cluster, by a probe", redis.ModeAuto, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			var srv *redistest.Server
			if c.cluster {
				srv = redistest.NewCluster(t, redistest.ClusterConfig{Masters: 1}).Nodes()[0]
				require.NoError(t, srv.Kill())
			} else {
				srv = redistest.NewServerWith(t, redistest.Config{Stopped: true})
			}
			s := newStore(t, redis.Config{Addrs: []string{srv.Addr()}, Mode: c.mode, Timeout: testTimeout, Time: redis.CallerTime})
			require.ErrorIs(t, s.Ready(), domain.ErrStoreUnavailable)
			assert.Nil(t, s.Client(), "no client before it connects")
			limits := []domain.Limit{{Key: "boot:{" + tag(t) + "}", Window: sliding(10, time.Minute), Cost: 1}}
			_, err := s.Evaluate(ctx, time.Now(), limits)
			require.ErrorIs(t, err, domain.ErrStoreUnavailable)
			require.NotErrorIs(t, err, domain.ErrStoreTimeout, "a store not connected fails at once, it waits for no deadline")
			p := s.Prober()
			require.ErrorIs(t, p.Probe(ctx), domain.ErrStoreUnavailable)
			_, partitioned := s.Partition(limits[0].Key)
			require.False(t, partitioned, "no mode before it connects")

			require.NoError(t, srv.Start())
			if c.byProbe {
				require.Eventually(t, func() bool { return p.Probe(ctx) == nil }, 10*time.Second, 10*time.Millisecond)
				require.NoError(t, s.Ready())
			}
			require.Eventually(t, func() bool {
				r, err := s.Evaluate(ctx, time.Now(), limits)
				return err == nil && r.Allowed
			}, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, s.Ready())
			require.NotNil(t, s.Client())
			_, partitioned = s.Partition(limits[0].Key)
			assert.Equal(t, c.cluster, partitioned, "the mode found when it connected")
			require.NoError(t, p.Probe(ctx))
			assert.NotEmpty(t, p.NodeOf(limits[0].Key), "the probe that connected it read the topology")
		})
	}
}

// TestACallNeverWaitsForADial: while an attempt to connect hangs in its
// dial (a black-holed address), a call fails at once as an outage: it
// does not wait for the dial, whose deadline is far away. Once the dial
// goes through, the store serves.
func TestACallNeverWaitsForADial(t *testing.T) {
	srv := redistest.Standalone(t)
	const (
		refuse int32 = iota
		hold
		pass
	)
	var phase atomic.Int32
	release := make(chan struct{})
	dial := func(ctx context.Context, dst string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
		switch phase.Load() {
		case refuse:
			return nil, errors.New("connection refused (the test's)")
		case hold:
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nd.DialContext(ctx, "tcp", dst)
	}
	s := newStore(t, redis.Config{Addrs: []string{srv}, Timeout: time.Hour, DialTimeout: time.Hour},
		redis.WithClientOption(func(o *rueidis.ClientOption) { o.DialCtxFn = dial }))
	require.ErrorIs(t, s.Ready(), domain.ErrStoreUnavailable)

	phase.Store(hold)
	probed := make(chan error, 1)
	go func() { probed <- s.Prober().Probe(context.Background()) }() // no deadline: it waits for the attempt
	limits := []domain.Limit{{Key: "dial:{" + tag(t) + "}", Window: sliding(10, time.Minute), Cost: 1}}
	// Until the probe's attempt is in flight, a call may start its own;
	// either way the calls return while the dial is held.
	for range 3 {
		_, err := s.Evaluate(context.Background(), time.Now(), limits)
		require.ErrorIs(t, err, domain.ErrStoreUnavailable)
	}
	close(release)
	require.NoError(t, <-probed)
	r, err := s.Evaluate(t.Context(), time.Now(), limits)
	require.NoError(t, err)
	require.True(t, r.Allowed)
}

// TestCloseEndsAnAttempt: Close while an attempt to connect hangs in its
// dial ends the attempt (the leak check of TestMain sees no goroutine
// left) and closes nothing twice.
func TestCloseEndsAnAttempt(t *testing.T) {
	held := make(chan struct{}, 1)
	dial := func(ctx context.Context, _ string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
		select {
		case held <- struct{}{}:
		default:
		}
		// A black hole: no answer before the dialer's own timeout.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(nd.Timeout):
			return nil, errors.New("i/o timeout (the test's)")
		}
	}
	var first atomic.Bool
	s, err := redis.New(redis.Config{Addrs: []string{"127.0.0.1:1"}, DialTimeout: 50 * time.Millisecond, Mode: redis.ModeStandalone},
		redis.WithClientOption(func(o *rueidis.ClientOption) {
			if first.Swap(true) {
				o.Dialer.Timeout = time.Hour // the later attempts hang until Close
			}
			o.DialCtxFn = dial
		}))
	<-held // New's own attempt
	require.NoError(t, err, "an address that does not answer is an outage, not an error")
	done := make(chan error, 1)
	go func() { done <- s.LoadScript(context.Background()) }()
	<-held
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-done, domain.ErrStoreClosed)
	require.ErrorIs(t, s.Ready(), domain.ErrStoreClosed)
}

// TestRefusedCredentialsAreNoOutage: a server that refuses the
// credentials fails New, whatever the mode: restarting would not help.
func TestRefusedCredentialsAreNoOutage(t *testing.T) {
	srv := redistest.NewServerWith(t, redistest.Config{Password: "right-one"})
	for _, mode := range []redis.Mode{redis.ModeAuto, redis.ModeStandalone} {
		_, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Password: "wrong-one", Mode: mode})
		require.ErrorIs(t, err, domain.ErrInvalidConfig, "mode %s", mode)
		assert.NotContains(t, err.Error(), "wrong-one")
	}
}

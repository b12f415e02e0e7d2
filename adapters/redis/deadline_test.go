package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
)

// TestCallersDeadlineIsTheOnlyOne: a context with a deadline is a call's
// only deadline, even when it is longer than Config.Timeout (app.Limiter's
// StoreTimeout is the one a user sets; the store's own timeout used to cut
// it short). The server is paused far past the store's 20 ms timeout; every
// call, each with a 10 s deadline of its own, waits for the pause and
// succeeds. The probe follows the same rule past DefaultProbeTimeout.
func TestCallersDeadlineIsTheOnlyOne(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{Timeout: 20 * time.Millisecond})
	limits := []domain.Limit{{Key: "dl:{x}", Window: sliding(10, time.Minute), Cost: 1}}
	require.Eventually(t, func() bool {
		_, err := s.Evaluate(t.Context(), time.Now(), limits)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)

	// The pause outlasts DefaultProbeTimeout by a second, slack for a
	// loaded machine to start the calls.
	pause := redis.DefaultProbeTimeout + time.Second
	do(t, srv.Addr(), "CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
	calls := map[string]func(ctx context.Context) error{
		"Evaluate": func(ctx context.Context) error { _, err := s.Evaluate(ctx, time.Now(), limits); return err },
		"Peek":     func(ctx context.Context) error { _, err := s.Peek(ctx, time.Now(), limits); return err },
		"Reset":    func(ctx context.Context) error { return s.Reset(ctx, "dl:{x}:other") },
		"Probe":    func(ctx context.Context) error { return s.Prober().Probe(ctx) },
	}
	type outcome struct {
		err  error
		took time.Duration
	}
	out := make(map[string]chan outcome, len(calls))
	for name, call := range calls {
		out[name] = make(chan outcome, 1)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			out[name] <- outcome{err, time.Since(start)}
		}()
	}
	for name := range calls {
		o := <-out[name]
		assert.NoError(t, o.err, name)
		// Proof that the pause held the call past the store's own
		// timeouts: a lower bound the server sets, not a speed check.
		assert.Greater(t, o.took, redis.DefaultProbeTimeout, "%s was not held by the pause: the test proved nothing", name)
	}
}

// TestTimeoutsAndCancellationsAreClassified: every missed deadline is a
// store timeout (domain.ErrStoreTimeout, code ERR-STORE-02, and still
// context.DeadlineExceeded), whether it was the caller's deadline or the
// store's own timeout, and whether it passed in flight or before the
// call; a cancellation stays a cancellation: neither a timeout nor an
// outage, and no code. The server is paused for the whole test, so no
// call can succeed.
func TestTimeoutsAndCancellationsAreClassified(t *testing.T) {
	// The store's own timeout is far from the cancellations at 20 ms: a
	// loaded machine fires a timer late, and at 30 ms a cancellation in
	// flight lost the race to the timeout in CI.
	srv, s := newDedicated(t, redis.Config{Timeout: 500 * time.Millisecond})
	limits := []domain.Limit{{Key: "cls:{x}", Window: gcra(10, time.Minute), Cost: 1}}
	require.Eventually(t, func() bool {
		_, err := s.Evaluate(t.Context(), time.Now(), limits)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	// A stopped process (SIGSTOP) holds every call until its deadline for
	// as long as the test needs, however slow the machine; CLIENT PAUSE
	// would end after a fixed time.
	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })

	ops := map[string]func(ctx context.Context) error{
		"Evaluate": func(ctx context.Context) error { _, err := s.Evaluate(ctx, time.Now(), limits); return err },
		"Peek":     func(ctx context.Context) error { _, err := s.Peek(ctx, time.Now(), limits); return err },
		"Reset":    func(ctx context.Context) error { return s.Reset(ctx, "cls:{x}") },
		"Probe":    func(ctx context.Context) error { return s.Prober().Probe(ctx) },
	}
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	contexts := []struct {
		name    string
		timeout bool // else a cancellation
		ctx     func() (context.Context, context.CancelFunc)
	}{
		{"CallersDeadline", true, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 30*time.Millisecond)
		}},
		{"StoresOwnTimeout", true, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background()) // no deadline
		}},
		{"DeadlinePassedBeforeTheCall", true, func() (context.Context, context.CancelFunc) { return expired, func() {} }},
		{"CancelledInFlight", false, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}},
		{"CancelledBeforeItsDeadline", false, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}},
		{"CancelledBeforeTheCall", false, func() (context.Context, context.CancelFunc) { return cancelled, func() {} }},
	}
	for _, c := range contexts {
		t.Run(c.name, func(t *testing.T) {
			for name, op := range ops {
				t.Run(name, func(t *testing.T) {
					t.Parallel() // all within the pause
					ctx, cancel := c.ctx()
					defer cancel()
					err := op(ctx)
					require.Error(t, err)
					assert.NotErrorIs(t, err, domain.ErrStoreUnavailable, "%v", err)
					if c.timeout {
						assert.ErrorIs(t, err, domain.ErrStoreTimeout)
						assert.ErrorIs(t, err, context.DeadlineExceeded)
						assert.Equal(t, domain.CodeStoreTimeout, domain.CodeOf(err), "%v", err)
					} else {
						assert.ErrorIs(t, err, context.Canceled)
						assert.NotErrorIs(t, err, domain.ErrStoreTimeout)
						assert.Equal(t, domain.Code(""), domain.CodeOf(err), "%v", err)
					}
				})
			}
		})
	}
}

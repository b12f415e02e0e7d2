package app_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// routeQuota is a costly route with one ip window of 3 per second: the
// shared quota the Wait tests queue on.
const routeQuota = "/partner/quota"

// withQuota adds the quota profile to a config, its window under alg.
func withQuota(alg domain.Algorithm) func(*app.Config) {
	return func(cfg *app.Config) {
		cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{
			Name: "partner", Family: domain.FamilyCostly, Routes: []string{routeQuota},
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "quota", Limit: 3, Period: time.Second, Algorithm: alg}}},
		})
	}
}

func quotaRequest() app.Request { return app.Request{Route: routeQuota, ClientIP: rawIP} }

// newWaitRig is newRig with the fake clock at start: a test whose context
// carries a deadline on the Limiter's clock needs a start in the wall
// clock's future, or the context would already have expired.
func newWaitRig(t *testing.T, start time.Time, mutate func(*app.Config)) *rig {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	primary := newFaulty(conformance.NewReferenceStore())
	r := &rig{clock: fakeclock.New(start), store: primary, local: conformance.NewReferenceStore(), rec: &recorder{}}
	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: r.local, Clock: r.clock, Prober: primary, Recorder: r.rec})
	require.NoError(t, err)
	r.l = l
	t.Cleanup(func() { assert.NoError(t, l.Close()) })
	return r
}

// waiter is one Wait in its own goroutine.
type waiter struct {
	done chan struct{}
	d    domain.Decision
	err  error
	at   time.Time // the Limiter's clock when Wait returned
}

func startWait(ctx context.Context, r *rig, req app.Request) *waiter {
	w := &waiter{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.d, w.err = r.l.Wait(ctx, req)
		w.at = r.clock.Now()
	}()
	return w
}

// await waits for Wait to return; the wall-clock bound turns a waiter
// that sleeps past its instant into a failure rather than a hang.
func (w *waiter) await(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
	}
}

func (w *waiter) returned() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// settle waits until every waiter has either returned or fallen asleep on
// the fake clock, so that the test may move the clock: nothing is in
// flight. It yields the processor while it waits and never sleeps; the
// wall-clock bound only turns a hang into a failure.
func settle(t *testing.T, r *rig, ws []*waiter) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		running := 0
		for _, w := range ws {
			if !w.returned() {
				running++
			}
		}
		if r.clock.Timers() == running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters did not settle: %d running, %d asleep", running, r.clock.Timers())
		}
		runtime.Gosched()
	}
}

// TestWaitExactness: N waiters on a quota of L per period, the clock
// stepped one period at a time: exactly L pass at each step (the instant
// the window's units leave), none over, none early, and every waiter
// passes.
func TestWaitExactness(t *testing.T) {
	const n, limit = 10, 3
	r := newRig(t, withQuota(domain.SlidingLog))
	ws := make([]*waiter, n)
	for i := range ws {
		ws[i] = startWait(context.Background(), r, quotaRequest())
	}
	passedAt := map[time.Duration]int{}
	for step := time.Duration(0); ; step += time.Second {
		if step > 0 {
			r.clock.Advance(time.Second)
		}
		settle(t, r, ws)
		total := 0
		for _, w := range ws {
			if w.returned() {
				total++
				if w.at.Equal(t0.Add(step)) {
					passedAt[step]++
				}
			}
		}
		if total == n {
			break
		}
		require.Less(t, step, 10*time.Second, "the waiters never all passed")
	}
	for _, w := range ws {
		require.NoError(t, w.err)
		assert.Equal(t, domain.Allowed, w.d.State)
	}
	assert.Equal(t, map[time.Duration]int{0: limit, time.Second: limit, 2 * time.Second: limit, 3 * time.Second: n - 3*limit}, passedAt,
		"passes per instant: L at each period, none over")
	// The store agrees: at the last instant the quota has what is left.
	d := r.eval(t, quotaRequest())
	assert.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, int64(limit-(n-3*limit)-1), d.Remaining)
}

// TestWaitLateness: a waiter passes at the very instant the store admits
// it, under each algorithm: still asleep a microsecond before, through at
// the instant, and decided at that instant (the store call's start).
func TestWaitLateness(t *testing.T) {
	for _, alg := range []domain.Algorithm{domain.SlidingLog, domain.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			r := newRig(t, withQuota(alg))
			for range 3 {
				require.Equal(t, domain.Allowed, r.eval(t, quotaRequest()).State)
			}
			refused := r.eval(t, quotaRequest())
			require.Equal(t, domain.Throttled, refused.State)
			require.Positive(t, refused.RetryAfter)

			w := startWait(context.Background(), r, quotaRequest())
			ws := []*waiter{w}
			settle(t, r, ws)
			require.False(t, w.returned())
			r.clock.Advance(refused.RetryAfter - time.Microsecond)
			settle(t, r, ws)
			require.False(t, w.returned(), "passed before the store's retry instant")
			r.clock.Advance(time.Microsecond)
			w.await(t)
			require.NoError(t, w.err)
			assert.Equal(t, domain.Allowed, w.d.State)
			calls := r.rec.StoreCalls()
			assert.Equal(t, t0.Add(refused.RetryAfter), calls[len(calls)-1].Start, "decided at the retry instant exactly")
		})
	}
}

// TestWaitContext: a context that ends while Wait sleeps, one that had
// ended before, and a deadline the retry instant would outlast. Each
// returns the last decision and an error wrapping the context's error,
// and consumes nothing (the whole quota is there afterwards).
func TestWaitContext(t *testing.T) {
	start := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC) // deadlines on the fake clock must lie in the wall clock's future
	exhaust := func(t *testing.T, r *rig) {
		for range 3 {
			require.Equal(t, domain.Allowed, r.eval(t, quotaRequest()).State)
		}
	}
	quotaIntact := func(t *testing.T, r *rig) {
		r.clock.Set(start.Add(time.Second))
		for range 3 {
			assert.Equal(t, domain.Allowed, r.eval(t, quotaRequest()).State, "the waiter consumed a unit")
		}
		assert.Equal(t, domain.Throttled, r.eval(t, quotaRequest()).State)
	}

	t.Run("cancelled while asleep", func(t *testing.T) {
		r := newWaitRig(t, start, withQuota(domain.SlidingLog))
		exhaust(t, r)
		ctx, cancel := context.WithCancel(context.Background())
		w := startWait(ctx, r, quotaRequest())
		settle(t, r, []*waiter{w})
		require.Equal(t, 1, r.clock.Timers())
		cancel()
		w.await(t)
		assert.ErrorIs(t, w.err, context.Canceled)
		assert.Equal(t, domain.Throttled, w.d.State, "the last decision")
		assert.Equal(t, 0, r.clock.Timers(), "the timer is stopped")
		quotaIntact(t, r)
	})
	t.Run("ended before", func(t *testing.T) {
		r := newWaitRig(t, start, withQuota(domain.SlidingLog))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d, err := r.l.Wait(ctx, quotaRequest())
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, domain.Decision{}, d, "no attempt was made")
		assert.Equal(t, 0, r.rec.count())
	})
	t.Run("deadline before the retry instant", func(t *testing.T) {
		r := newWaitRig(t, start, withQuota(domain.SlidingLog))
		exhaust(t, r)
		// The retry instant is start+1s; the deadline, on the Limiter's
		// clock, comes a microsecond earlier: no attempt could pass.
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Second-time.Microsecond))
		defer cancel()
		w := startWait(ctx, r, quotaRequest())
		w.await(t) // it must not sleep: nothing moves the clock
		assert.ErrorIs(t, w.err, context.DeadlineExceeded)
		assert.Equal(t, domain.Throttled, w.d.State)
		assert.Equal(t, time.Second, w.d.RetryAfter)
		assert.Equal(t, start, w.at, "returned without sleeping")
		quotaIntact(t, r)
	})
	t.Run("deadline after the retry instant", func(t *testing.T) {
		r := newWaitRig(t, start, withQuota(domain.SlidingLog))
		exhaust(t, r)
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Second+time.Microsecond))
		defer cancel()
		w := startWait(ctx, r, quotaRequest())
		settle(t, r, []*waiter{w})
		r.clock.Advance(time.Second)
		w.await(t)
		require.NoError(t, w.err)
		assert.Equal(t, domain.Allowed, w.d.State)
	})
}

// TestWaitTerminalStates: what Wait does with each terminal state that is
// not a plain pass or refusal.
func TestWaitTerminalStates(t *testing.T) {
	t.Run("invalid context returns at once", func(t *testing.T) {
		r := newRig(t, withQuota(domain.SlidingLog))
		d, err := r.l.Wait(context.Background(), app.Request{Route: "not a route", ClientIP: rawIP})
		assert.ErrorIs(t, err, domain.ErrInvalidContext)
		assert.Equal(t, domain.RejectedInvalidContext, d.State)
		assert.Equal(t, 1, r.rec.count())
	})
	t.Run("denied degraded is waited out, then decided again", func(t *testing.T) {
		r := newRig(t, withQuota(domain.SlidingLog))
		r.store.mode.Store(unavailable)
		w := startWait(context.Background(), r, quotaRequest())
		settle(t, r, []*waiter{w})
		require.False(t, w.returned())
		first := r.rec.last().Decision
		require.Equal(t, domain.DeniedDegraded, first.State)
		require.Equal(t, domain.DeniedRetryAfter, first.RetryAfter)
		r.store.mode.Store(healthy)
		r.clock.Advance(domain.DeniedRetryAfter - time.Microsecond)
		settle(t, r, []*waiter{w})
		require.False(t, w.returned(), "retried before the Retry-After of the denial")
		r.clock.Advance(time.Microsecond)
		w.await(t)
		require.NoError(t, w.err)
		assert.Equal(t, domain.Allowed, w.d.State)
		assert.False(t, w.d.Degraded)
		assert.Equal(t, 2, r.rec.count(), "two attempts, each recorded")
	})
	t.Run("bypass degraded passes", func(t *testing.T) {
		r := newRig(t, nil)
		r.store.mode.Store(unavailable)
		d, err := r.l.Wait(context.Background(), fullRequest(routeRead))
		require.NoError(t, err)
		assert.Equal(t, domain.BypassDegraded, d.State)
	})
	t.Run("shadow mode never waits", func(t *testing.T) {
		r := newRig(t, func(cfg *app.Config) { withQuota(domain.SlidingLog)(cfg); cfg.ShadowMode = true })
		for range 3 {
			r.eval(t, quotaRequest())
		}
		d, err := r.l.Wait(context.Background(), quotaRequest())
		require.NoError(t, err)
		assert.Equal(t, domain.Throttled, d.State)
		assert.True(t, d.Shadow)
	})
	t.Run("a recording failure returns at once", func(t *testing.T) {
		r := newRig(t, withQuota(domain.SlidingLog))
		for range 3 {
			r.eval(t, quotaRequest())
		}
		r.rec.setFail(errRecorder, nil)
		d, err := r.l.Wait(context.Background(), quotaRequest())
		assert.ErrorIs(t, err, errRecorder)
		assert.Equal(t, domain.Throttled, d.State)
		assert.Equal(t, 0, r.clock.Timers())
	})
}

// TestWaitCompetingWaitersNoLock: waiters on one key set and plain
// Evaluate calls on another proceed while the waiters sleep: Wait holds
// nothing across its sleep.
func TestWaitCompetingWaitersNoLock(t *testing.T) {
	r := newRig(t, withQuota(domain.SlidingLog))
	var ws []*waiter
	for range 6 {
		ws = append(ws, startWait(context.Background(), r, quotaRequest()))
	}
	settle(t, r, ws)
	require.Equal(t, 3, r.clock.Timers())
	other := app.Request{Route: routeQuota, ClientIP: rawIP.Next()}
	var passed atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if d, err := r.l.Evaluate(context.Background(), other); err == nil && d.State == domain.Allowed {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(3), passed.Load(), "another key set is decided while waiters sleep")
	r.clock.Advance(time.Second)
	settle(t, r, ws)
	for _, w := range ws {
		require.True(t, w.returned())
		require.NoError(t, w.err)
	}
}

package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpclient"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

// start is the fake clock's first instant: in the wall clock's future, so
// that a context deadline set on the fake clock has not passed already.
var start = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

const route = "/outbound/partner"

// newLimiter returns a Limiter on the in-process store whose profile for
// route is one sliding-log ip window of limit per period, on clock.
func newLimiter(t *testing.T, clock *fakeclock.Clock, limit int64, period time.Duration) *app.Limiter {
	t.Helper()
	stores := make([]*local.Store, 2)
	for i := range stores {
		s, err := local.New(local.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	lim, err := app.New(app.Config{
		HMACSecret: app.Secret(strings.Repeat("5e", 32)),
		Profiles: []app.ProfileConfig{{
			Name: "partner", Family: domain.FamilyCostly, Routes: []string{route},
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "quota", Limit: limit, Period: period}}},
		}},
	}, app.Deps{Store: stores[0], Fallback: stores[1], Clock: clock, Recorder: recordertest.Discard{}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lim.Close()) })
	return lim
}

// upstream is a real HTTP server that records the fake clock's instant of
// every arrival and answers with answer(n) for the n-th (from 1).
type upstream struct {
	srv    *httptest.Server
	mu     sync.Mutex
	at     []time.Time
	bodies []string
	answer func(n int, w http.ResponseWriter)
}

func newUpstream(t *testing.T, clock *fakeclock.Clock, answer func(n int, w http.ResponseWriter)) *upstream {
	u := &upstream{answer: answer}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.at = append(u.at, clock.Now())
		u.bodies = append(u.bodies, string(body))
		n := len(u.at)
		u.mu.Unlock()
		if u.answer != nil {
			u.answer(n, w)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// arrivals counts the arrivals per instant, as offsets from start.
func (u *upstream) arrivals() map[time.Duration]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := map[time.Duration]int{}
	for _, at := range u.at {
		m[at.Sub(start)]++
	}
	return m
}

// caller runs calls GETs one after the other through a client.
type caller struct {
	done  chan struct{}
	codes []int
	errs  []error
}

func call(ctx context.Context, c *http.Client, url string, calls int) *caller {
	cl := &caller{done: make(chan struct{})}
	go func() {
		defer close(cl.done)
		for range calls {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := c.Do(req)
			cl.errs = append(cl.errs, err)
			if err == nil {
				resp.Body.Close()
				cl.codes = append(cl.codes, resp.StatusCode)
			}
		}
	}()
	return cl
}

// await waits for the caller to finish; the wall-clock bound turns a
// caller held past its instant into a failure rather than a hang.
func (c *caller) await(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the caller did not finish")
	}
}

func (c *caller) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// settle waits until every caller has finished or is asleep on the fake
// clock: no request is in flight, so the test may move the clock. It
// yields and never sleeps; the wall-clock bound turns a hang into a
// failure.
func settle(t *testing.T, clock *fakeclock.Clock, cs []*caller) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		running := 0
		for _, c := range cs {
			if !c.finished() {
				running++
			}
		}
		if clock.Timers() == running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("callers did not settle: %d running, %d asleep", running, clock.Timers())
		}
		runtime.Gosched()
	}
}

func newClient(t *testing.T, lim *app.Limiter, clock *fakeclock.Clock, mutate func(*httpclient.Config)) *http.Client {
	t.Helper()
	// No margin unless the test sets one: the hold tests step the fake
	// clock by whole Retry-Afters.
	cfg := httpclient.Config{Route: route, Clock: clock, Margin: -1}
	if mutate != nil {
		mutate(&cfg)
	}
	tr, err := httpclient.New(lim, cfg)
	require.NoError(t, err)
	return &http.Client{Transport: tr}
}

// TestQuotaPerPeriod: callers on two replicas (two Transports on one
// store) send 18 requests through a quota of 3 per second; stepped one
// second at a time, the upstream sees exactly 3 at each step, never more.
func TestQuotaPerPeriod(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 3, time.Second)
	up := newUpstream(t, clock, nil)
	replicas := []*http.Client{newClient(t, lim, clock, nil), newClient(t, lim, clock, nil)}
	var cs []*caller
	for i := range 6 {
		cs = append(cs, call(context.Background(), replicas[i%2], up.srv.URL, 3))
	}
	for step := 0; step < 10; step++ {
		if step > 0 {
			clock.Advance(time.Second)
		}
		settle(t, clock, cs)
	}
	want := map[time.Duration]int{}
	for s := range 6 {
		want[time.Duration(s)*time.Second] = 3
	}
	assert.Equal(t, want, up.arrivals())
	for _, c := range cs {
		require.True(t, c.finished())
		assert.Equal(t, []int{200, 200, 200}, c.codes)
	}
}

// TestUpstreamHold: an upstream 429 with Retry-After holds back every
// caller of the Transport that received it for the Retry-After, and the
// other replica until the drained quota's units leave their window (its
// period, here 2 s). The 429 is returned as is.
func TestUpstreamHold(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter string
		maxHold    time.Duration
		// firstA and firstB are when the first held-back request of the
		// receiving replica (A) and of the other one (B) reach the
		// upstream.
		firstA, firstB time.Duration
	}{
		{name: "retry-after equal to the period", retryAfter: "2", firstA: 2 * time.Second, firstB: 2 * time.Second},
		{name: "retry-after beyond the period", retryAfter: "5", firstA: 5 * time.Second, firstB: 2 * time.Second},
		{name: "retry-after as an HTTP date", retryAfter: start.Add(4 * time.Second).Format(http.TimeFormat), firstA: 4 * time.Second, firstB: 2 * time.Second},
		{name: "retry-after bounded by MaxHold", retryAfter: "3600", maxHold: 3 * time.Second, firstA: 3 * time.Second, firstB: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := fakeclock.New(start)
			lim := newLimiter(t, clock, 3, 2*time.Second)
			up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
				if n == 1 {
					w.Header().Set("Retry-After", tt.retryAfter)
					w.WriteHeader(http.StatusTooManyRequests)
				}
			})
			a := newClient(t, lim, clock, func(cfg *httpclient.Config) { cfg.MaxHold = tt.maxHold })
			b := newClient(t, lim, clock, nil)
			first := call(context.Background(), a, up.srv.URL, 1)
			first.await(t)
			require.NoError(t, first.errs[0])
			assert.Equal(t, []int{http.StatusTooManyRequests}, first.codes, "the 429 is returned as is")

			ca := call(context.Background(), a, up.srv.URL, 1)
			cb := call(context.Background(), b, up.srv.URL, 1)
			cs := []*caller{ca, cb}
			firstOf := map[*caller]time.Duration{}
			for now := time.Duration(0); now <= 6*time.Second; now += 500 * time.Millisecond {
				if now > 0 {
					clock.Advance(500 * time.Millisecond)
				}
				settle(t, clock, cs)
				for _, c := range cs {
					if _, ok := firstOf[c]; !ok && c.finished() {
						firstOf[c] = now
					}
				}
			}
			assert.Equal(t, tt.firstA, firstOf[ca], "the receiving replica waits out the Retry-After")
			assert.Equal(t, tt.firstB, firstOf[cb], "the other replica waits for the drained units")
			got := up.arrivals()
			assert.Equal(t, 1, got[0], "nothing reaches the upstream at the refusal's instant but the refused request")
		})
	}
}

// TestRetries: with Retries set, a request the upstream holds back is
// sent again once the hold is over, its body replayed, and the caller
// sees the second answer.
func TestRetries(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 3, time.Second)
	up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	c := newClient(t, lim, clock, func(cfg *httpclient.Config) { cfg.Retries = 1 })
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, up.srv.URL, strings.NewReader("payload"))
		resp, err := c.Do(req)
		assert.NoError(t, err)
		done <- resp
	}()
	deadline := time.Now().Add(10 * time.Second)
	for clock.Timers() != 1 {
		require.True(t, time.Now().Before(deadline), "the retry never waited")
		runtime.Gosched()
	}
	clock.Advance(2 * time.Second)
	var resp *http.Response
	select {
	case resp = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the retried request did not finish")
	}
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, map[time.Duration]int{0: 1, 2 * time.Second: 1}, up.arrivals())
	assert.Equal(t, []string{"payload", "payload"}, up.bodies)
}

// TestWaitFails: a request the quota does not let go in time is never
// sent; the error is a *WaitError wrapping the context's error.
func TestWaitFails(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 1, time.Second)
	up := newUpstream(t, clock, nil)
	c := newClient(t, lim, clock, nil)
	first := call(context.Background(), c, up.srv.URL, 1)
	first.await(t)
	require.NoError(t, first.errs[0])

	ctx, cancel := context.WithDeadline(context.Background(), start.Add(500*time.Millisecond))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.srv.URL, nil)
	_, err := c.Do(req)
	var we *httpclient.WaitError
	require.ErrorAs(t, err, &we)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, domain.Throttled, we.Decision.State)
	assert.Equal(t, time.Second, we.Decision.RetryAfter)
	assert.Equal(t, map[time.Duration]int{0: 1}, up.arrivals(), "the refused request was not sent")
}

// TestHoldFails: a request whose deadline comes before this Transport's
// hold ends fails at once, unsent, before any decision.
func TestHoldFails(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 3, time.Second)
	up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	c := newClient(t, lim, clock, nil)
	first := call(context.Background(), c, up.srv.URL, 1)
	first.await(t)
	require.NoError(t, first.errs[0])

	ctx, cancel := context.WithDeadline(context.Background(), start.Add(5*time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.srv.URL, nil)
	_, err := c.Do(req)
	var we *httpclient.WaitError
	require.ErrorAs(t, err, &we)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, domain.Decision{}, we.Decision)
	assert.Equal(t, map[time.Duration]int{0: 1}, up.arrivals())
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		cfg   httpclient.Config
		field string
	}{
		{name: "route required", cfg: httpclient.Config{}, field: "httpclient.route"},
		{name: "negative hold", cfg: httpclient.Config{Route: route, MaxHold: -1}, field: "httpclient.max_hold"},
		{name: "negative retries", cfg: httpclient.Config{Route: route, Retries: -1}, field: "httpclient.retries"},
		{name: "bad status", cfg: httpclient.Config{Route: route, HoldStatuses: []int{42}}, field: "httpclient.hold_statuses"},
		{name: "valid", cfg: httpclient.Config{Route: route}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var ce *domain.ConfigError
			require.True(t, errors.As(err, &ce), "got %v", err)
			assert.Equal(t, tt.field, ce.Field)
		})
	}
	_, err := httpclient.New(nil, httpclient.Config{Route: route})
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
}

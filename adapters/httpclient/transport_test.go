package httpclient_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpclient"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
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
	return newReplicas(t, clock, ipWindow(limit, period), newLocal(t))[0]
}

// ipWindow is a profile's one ip window, limit per period.
func ipWindow(limit int64, period time.Duration) app.WindowsConfig {
	return app.WindowsConfig{IP: []app.WindowConfig{{Name: "quota", Limit: limit, Period: period}}}
}

func newLocal(t *testing.T) *local.Store {
	t.Helper()
	s, err := local.New(local.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// newReplicas returns one Limiter per primary store, each with its own
// fallback, whose profile for route has windows ws, on clock: the
// replicas of a fleet. Given one store twice, or two clients of one
// Redis, what one replica learns reaches the others through the store
// only.
func newReplicas(t *testing.T, clock *fakeclock.Clock, ws app.WindowsConfig, primaries ...ports.Store) []*app.Limiter {
	t.Helper()
	lims := make([]*app.Limiter, len(primaries))
	for i, primary := range primaries {
		lim, err := app.New(app.Config{
			HMACSecret: app.Secret(strings.Repeat("5e", 32)),
			Profiles: []app.ProfileConfig{{
				Name: "partner", Family: domain.FamilyCostly, Routes: []string{route},
				Windows: ws,
			}},
		}, app.Deps{Store: primary, Fallback: newLocal(t), Clock: clock, Recorder: recordertest.Discard{}})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, lim.Close()) })
		lims[i] = lim
	}
	return lims
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

// holdCase is one upstream refusal of TestUpstreamHold.
type holdCase struct {
	name       string
	status     int
	retryAfter string // "" sends none
	// window is the quota; the zero value means 3 per 2 s.
	window  app.WindowConfig
	margin  time.Duration // 0: none
	maxHold time.Duration // on the replica that receives the refusal
	// resume is when the next request of each replica reaches the
	// upstream.
	resume time.Duration
}

// TestUpstreamHold (issue 37 item 2): an upstream's refusal with a
// Retry-After holds both replicas (two Limiters on one store, the
// in-process one or a real Redis through two clients: the hold reaches
// the second through the store only) for exactly the Retry-After plus
// the margin, bounded by MaxHold, and no longer, whatever the quota's
// period: a Retry-After of 1 s on a quota of 10 000 a day holds both for
// 1 s. Retry-After: 0, or none, holds nothing. The refusal is returned
// as is.
func TestUpstreamHold(t *testing.T) {
	day := app.WindowConfig{Name: "quota", Limit: 10_000, Period: 24 * time.Hour}
	tests := []holdCase{
		{name: "retry-after equal to the period", status: 429, retryAfter: "2", resume: 2 * time.Second},
		{name: "retry-after beyond the period", status: 429, retryAfter: "5", resume: 5 * time.Second},
		{name: "retry-after within a day's quota", status: 503, retryAfter: "1", window: day, resume: time.Second},
		{name: "retry-after plus the margin", status: 503, retryAfter: "1", window: day, margin: 300 * time.Millisecond, resume: 1300 * time.Millisecond},
		{name: "retry-after as an HTTP date", status: 429, retryAfter: start.Add(4 * time.Second).Format(http.TimeFormat), resume: 4 * time.Second},
		{name: "retry-after bounded by MaxHold", status: 429, retryAfter: "3600", window: day, maxHold: 3 * time.Second, resume: 3 * time.Second},
		{name: "the margin bounded by MaxHold", status: 429, retryAfter: "3", margin: 500 * time.Millisecond, maxHold: 3 * time.Second, resume: 3 * time.Second},
		{name: "retry-after zero holds nothing", status: 429, retryAfter: "0", margin: 300 * time.Millisecond, resume: 0},
		{name: "an HTTP date past holds nothing", status: 429, retryAfter: start.Add(-time.Minute).Format(http.TimeFormat), resume: 0},
		{name: "no retry-after holds nothing", status: 429, resume: 0},
		{name: "another status holds nothing", status: 500, retryAfter: "5", resume: 0},
	}
	srv := redistest.NewServer(t)
	backends := []struct {
		name   string
		stores func(t *testing.T) []ports.Store
	}{
		{name: "local", stores: func(t *testing.T) []ports.Store {
			s := newLocal(t)
			return []ports.Store{s, s}
		}},
		{name: "redis", stores: func(t *testing.T) []ports.Store {
			_, err := srv.Do(context.Background(), "FLUSHALL")
			require.NoError(t, err)
			ss := make([]ports.Store, 2)
			for i := range ss {
				s, err := redis.New(redis.Config{Mode: redis.ModeStandalone, Addrs: []string{srv.Addr()}, Time: redis.CallerTime})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				ss[i] = s
			}
			return ss
		}},
	}
	for _, be := range backends {
		for _, tt := range tests {
			t.Run(be.name+"/"+tt.name, func(t *testing.T) { testUpstreamHold(t, be.stores(t), tt) })
		}
	}
}

func testUpstreamHold(t *testing.T, stores []ports.Store, tt holdCase) {
	clock := fakeclock.New(start)
	w := tt.window
	if w.Name == "" {
		w = app.WindowConfig{Name: "quota", Limit: 3, Period: 2 * time.Second}
	}
	replicas := newReplicas(t, clock, app.WindowsConfig{IP: []app.WindowConfig{w}}, stores...)
	up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
		if n == 1 {
			if tt.retryAfter != "" {
				w.Header().Set("Retry-After", tt.retryAfter)
			}
			w.WriteHeader(tt.status)
		}
	})
	margin := cmp.Or(tt.margin, -1)
	a := newClient(t, replicas[0], clock, func(cfg *httpclient.Config) { cfg.MaxHold, cfg.Margin = tt.maxHold, margin })
	b := newClient(t, replicas[1], clock, func(cfg *httpclient.Config) { cfg.Margin = margin })
	first := call(context.Background(), a, up.srv.URL, 1)
	first.await(t)
	require.NoError(t, first.errs[0])
	assert.Equal(t, []int{tt.status}, first.codes, "the refusal is returned as is")

	cs := []*caller{call(context.Background(), a, up.srv.URL, 1), call(context.Background(), b, up.srv.URL, 1)}
	settle(t, clock, cs)
	// Stepped to the hold's end (a request sent before it would arrive
	// at an earlier step), its first microsecond, then on.
	for now := time.Duration(0); now < tt.resume; now += 100 * time.Millisecond {
		clock.Advance(100 * time.Millisecond)
		settle(t, clock, cs)
	}
	clock.Advance(time.Microsecond)
	settle(t, clock, cs)
	clock.Advance(10 * time.Second)
	settle(t, clock, cs)
	for _, c := range cs {
		require.True(t, c.finished())
		assert.Equal(t, []int{http.StatusOK}, c.codes)
	}
	want := map[time.Duration]int{0: 1}
	if tt.resume > 0 {
		// The hold key lets one request pass per microsecond.
		want[tt.resume], want[tt.resume+time.Microsecond] = 1, 1
	} else {
		want[0] += 2
	}
	assert.Equal(t, want, up.arrivals(), "both replicas resume at the hold's end, not before, not later")
}

// TestRetries (issue 37 item 3): with Retries set, a request the upstream
// refused with a Retry-After is sent again once the hold is over, its
// body replayed, when it may be sent twice: an idempotent method, or a
// request marked with an Idempotency-Key (or X-Idempotency-Key) header.
// Any other request (a POST, a body that cannot be read again) gets the
// refusal, sent once.
func TestRetries(t *testing.T) {
	payload := func() io.Reader { return strings.NewReader("payload") }
	tests := []struct {
		name   string
		method string
		body   func() io.Reader // nil: no body
		header string           // a header set, empty-valued
		retry  bool
	}{
		{name: "GET", method: http.MethodGet, retry: true},
		{name: "HEAD", method: http.MethodHead, retry: true},
		{name: "PUT", method: http.MethodPut, body: payload, retry: true},
		{name: "DELETE", method: http.MethodDelete, retry: true},
		{name: "POST", method: http.MethodPost, body: payload},
		{name: "PATCH", method: http.MethodPatch, body: payload},
		{name: "POST with an Idempotency-Key", method: http.MethodPost, body: payload, header: "Idempotency-Key", retry: true},
		{name: "POST with an X-Idempotency-Key", method: http.MethodPost, body: payload, header: "X-Idempotency-Key", retry: true},
		{name: "PUT whose body cannot be read again", method: http.MethodPut, body: func() io.Reader { return io.MultiReader(payload()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
				var body io.Reader
				if tt.body != nil {
					body = tt.body()
				}
				req, _ := http.NewRequest(tt.method, up.srv.URL, body)
				if tt.header != "" {
					req.Header.Set(tt.header, "k-1")
				}
				resp, err := c.Do(req)
				assert.NoError(t, err)
				done <- resp
			}()
			if tt.retry {
				deadline := time.Now().Add(10 * time.Second)
				for clock.Timers() != 1 {
					require.True(t, time.Now().Before(deadline), "the retry never waited")
					runtime.Gosched()
				}
				clock.Advance(2 * time.Second)
			}
			var resp *http.Response
			select {
			case resp = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the request did not finish")
			}
			require.NotNil(t, resp)
			resp.Body.Close()
			want, codes := map[time.Duration]int{0: 1}, http.StatusServiceUnavailable
			if tt.retry {
				want[2*time.Second], codes = 1, http.StatusOK
			}
			assert.Equal(t, codes, resp.StatusCode)
			assert.Equal(t, want, up.arrivals())
			if tt.body != nil && tt.retry {
				assert.Equal(t, []string{"payload", "payload"}, up.bodies, "the body is replayed")
			}
		})
	}
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
		{name: "hold above the ceiling", cfg: httpclient.Config{Route: route, MaxHold: httpclient.HoldCeiling + time.Second}, field: "httpclient.max_hold"},
		{name: "hold at the ceiling", cfg: httpclient.Config{Route: route, MaxHold: httpclient.HoldCeiling}},
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
	lim := newLimiter(t, fakeclock.New(start), 1, time.Second)
	_, err = httpclient.New(lim, httpclient.Config{Route: "/outbound/unknown"})
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce, "a route without a profile")
	assert.Equal(t, "httpclient.route", ce.Field)
}

// TestQuota: the Transport's windows are the profile's widened by the
// margin, with the hold's check; Limiter.PeekWindows reads what they
// have left.
func TestQuota(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 5, time.Second)
	up := newUpstream(t, clock, nil)
	tr, err := httpclient.New(lim, httpclient.Config{Route: route, Clock: clock})
	require.NoError(t, err)
	c := call(context.Background(), &http.Client{Transport: tr}, up.srv.URL, 2)
	c.await(t)
	require.Equal(t, []int{http.StatusOK, http.StatusOK}, c.codes)

	req, _ := http.NewRequest(http.MethodGet, up.srv.URL, nil)
	q, err := tr.Quota(req)
	require.NoError(t, err)
	d, err := lim.PeekWindows(context.Background(), q)
	require.NoError(t, err)
	ws := d.Windows.All()
	require.Len(t, ws, 2)
	assert.Equal(t, domain.Window{Name: "quota", Limit: 5, Period: time.Second + httpclient.DefaultMargin}, ws[0].Window,
		"5 per 1 s as configured, counted over the period plus the margin")
	assert.Equal(t, int64(3), ws[0].Remaining)
	assert.Equal(t, "upstream_hold", ws[1].Window.Name)
	assert.True(t, ws[1].Allowed, "no hold")
}

// TestInvalidIdentity: a request whose identity the Limiter refuses (an
// api key longer than domain.MaxIdentifierLen) is not sent; the error is a
// *WaitError wrapping domain.ErrInvalidContext, with the Limiter's
// recorded decision.
func TestInvalidIdentity(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 3, time.Second)
	up := newUpstream(t, clock, nil)
	c := newClient(t, lim, clock, func(cfg *httpclient.Config) {
		cfg.Identity = func(*http.Request) httpclient.Identity {
			return httpclient.Identity{APIKey: strings.Repeat("k", domain.MaxIdentifierLen+1)}
		}
	})
	req, _ := http.NewRequest(http.MethodGet, up.srv.URL, nil)
	_, err := c.Do(req)
	var we *httpclient.WaitError
	require.ErrorAs(t, err, &we)
	assert.ErrorIs(t, err, domain.ErrInvalidContext)
	assert.Equal(t, domain.RejectedInvalidContext, we.Decision.State)
	assert.Empty(t, up.arrivals(), "the request was not sent")
}

// TestHoldPerIdentity: a hold holds the requests that spend the refused
// request's quota (its identities), on every replica, and no other:
// with api-key windows, the upstream's 429 to key a holds key a on both
// replicas for the Retry-After; key b goes at once on both.
func TestHoldPerIdentity(t *testing.T) {
	clock := fakeclock.New(start)
	s := newLocal(t)
	ws := app.WindowsConfig{APIKey: []app.WindowConfig{{Name: "quota", Limit: 3, Period: time.Second}}}
	replicas := newReplicas(t, clock, ws, s, s)
	up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	byKey := func(cfg *httpclient.Config) {
		cfg.Identity = func(r *http.Request) httpclient.Identity {
			return httpclient.Identity{APIKey: r.URL.Query().Get("key")}
		}
	}
	a, b := newClient(t, replicas[0], clock, byKey), newClient(t, replicas[1], clock, byKey)
	first := call(context.Background(), a, up.srv.URL+"?key=a", 1)
	first.await(t)
	require.Equal(t, []int{http.StatusTooManyRequests}, first.codes)

	held := []*caller{call(context.Background(), a, up.srv.URL+"?key=a", 1), call(context.Background(), b, up.srv.URL+"?key=a", 1)}
	free := []*caller{call(context.Background(), a, up.srv.URL+"?key=b", 1), call(context.Background(), b, up.srv.URL+"?key=b", 1)}
	cs := append(slices.Clone(held), free...)
	settle(t, clock, cs)
	for _, c := range free {
		assert.True(t, c.finished(), "key b is not held")
	}
	for _, c := range held {
		assert.False(t, c.finished(), "key a is held on both replicas")
	}
	clock.Advance(2 * time.Second)
	settle(t, clock, cs)
	clock.Advance(time.Microsecond)
	settle(t, clock, cs)
	assert.Equal(t, map[time.Duration]int{0: 3, 2 * time.Second: 1, 2*time.Second + time.Microsecond: 1}, up.arrivals())
}

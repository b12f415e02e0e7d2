package httpmw_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// Routes of testdata/reserve.yaml.
const (
	meteredRoute = "POST /api/v1/metered"
	slowRoute    = "GET /api/v1/slow"
	singleRoute  = "GET /api/v1/single"
	plainRoute   = "GET /api/v1/plain"
)

// reserveConfig loads testdata/reserve.yaml with a fresh secret.
func reserveConfig(t testing.TB) app.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/reserve.yaml")
	require.NoError(t, err)
	secret := freshSecret(t)
	cfg, err := app.ParseConfig(data, func(k string) (string, bool) { return secret, k == app.EnvHMACSecret })
	require.NoError(t, err)
	return cfg
}

// signals is a Recorder that tells a test when a settlement or a renewal
// reached the store: the middleware settles after the response may
// already be with the client.
type signals struct {
	recordertest.Memory
	settles, renews chan ports.StoreCall
}

func newSignals() *signals {
	return &signals{settles: make(chan ports.StoreCall, 256), renews: make(chan ports.StoreCall, 256)}
}

func (s *signals) RecordStoreCall(ctx context.Context, call ports.StoreCall) {
	s.Memory.RecordStoreCall(ctx, call)
	switch call.Op {
	case ports.OpSettle:
		s.settles <- call
	case ports.OpRenew:
		s.renews <- call
	}
}

// await receives one call from ch, failing the test after 10 s.
func await(t *testing.T, ch <-chan ports.StoreCall, what string) ports.StoreCall {
	t.Helper()
	select {
	case c := <-ch:
		require.NoError(t, c.Err, what)
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
	return ports.StoreCall{}
}

// reserveService serves handlers (route pattern → handler) behind the
// middleware on a real loopback server.
func reserveService(t *testing.T, lim httpmw.Evaluator, cfg httpmw.Config, handlers map[string]http.HandlerFunc, opts ...httpmw.Option) *httptest.Server {
	t.Helper()
	mux := httpmw.NewServeMux()
	for pattern, h := range handlers {
		mux.HandleFunc(pattern, h)
	}
	cfg.Route = mux.Route()
	cfg.Identity = identityFromHeaders
	mw, err := httpmw.New(lim, cfg, opts...)
	require.NoError(t, err)
	srv := httptest.NewServer(mw(mux))
	t.Cleanup(srv.Close)
	return srv
}

// send sends one request as user alice; a transport error (the handler
// aborted the response) is returned, not fatal.
func send(ctx context.Context, srv *httptest.Server, method, path string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set(headerUser, "alice@example.org")
	resp, err := srv.Client().Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// remaining peeks alice's quota on route (nothing consumed).
func remaining(t *testing.T, lim *app.Limiter, route string) int64 {
	t.Helper()
	d, err := lim.Peek(t.Context(), app.Request{Route: route, ClientIP: netip.MustParseAddr("127.0.0.1"), User: "alice@example.org"})
	require.NoError(t, err)
	return d.Remaining
}

// TestReservedRouteSettlesByWhatTheHandlerReports: the metered route
// reserves 5 of alice's 20 and settles, after the handler returns, at the
// cost it reports in the X-Cost header or trailer; a 5xx refunds (the
// profile refunds failures) unless the handler reported a cost; a report
// that is not one non-negative integer is ignored and audited.
func TestReservedRouteSettlesByWhatTheHandlerReports(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		left    int64
		audited bool
	}{
		{"cost header", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "2")
			_, _ = io.WriteString(w, "ok")
		}, 18, false},
		{"declared trailer", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Trailer", "X-Cost")
			_, _ = io.WriteString(w, "ok")
			w.Header().Set("X-Cost", "3")
		}, 17, false},
		{"trailer prefix", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
			w.Header().Set(http.TrailerPrefix+"x-cost", "1")
		}, 19, false},
		{"charge past the cost reserved", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "12")
		}, 8, false},
		{"zero", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", " 0 ")
		}, 20, false},
		{"nothing reported keeps the cost reserved", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}, 15, false},
		{"5xx refunds", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}, 20, false},
		{"5xx after a 103 refunds", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusInternalServerError)
		}, 20, false},
		{"5xx with a report charges the report", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "4")
			w.WriteHeader(http.StatusInternalServerError)
		}, 16, false},
		{"4xx keeps the cost reserved", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
		}, 15, false},
		{"a status of refund_statuses refunds", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusConflict)
		}, 20, false},
		{"negative ignored", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "-1")
		}, 15, true},
		{"fraction ignored", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "2.5")
		}, 15, true},
		{"two values ignored", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Add("X-Cost", "1")
			w.Header().Add("X-Cost", "2")
		}, 15, true},
		{"above the largest limit ignored", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", strconv.FormatInt(domain.MaxLimit+1, 10))
		}, 15, true},
		{"too many digits ignored", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cost", "99999999999999999999")
		}, 15, true},
		{"a panic refunds", func(http.ResponseWriter, *http.Request) {
			panic(http.ErrAbortHandler)
		}, 20, false},
	}
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					rec := newSignals()
					lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
					audit := &lockedWriter{}
					srv := reserveService(t, lim, httpmw.Config{AuditLog: slog.New(slog.NewTextHandler(audit, nil))},
						map[string]http.HandlerFunc{meteredRoute: tc.handler})
					resp, _, err := send(t.Context(), srv, "POST", "/api/v1/metered")
					if err == nil {
						assert.Equal(t, "15", resp.Header.Get(httpmw.HeaderRemaining), "the decision reserved 5")
					}
					await(t, rec.settles, "settlement")
					assert.Equal(t, tc.left, remaining(t, lim, meteredRoute))
					if tc.audited {
						assert.Contains(t, audit.String(), "cost report ignored")
						assert.Contains(t, audit.String(), "source=X-Cost")
					} else {
						assert.Empty(t, audit.String())
					}
				})
			}
		})
	}
}

// TestWithCostReportsByFunction: WithCost makes a route without settle
// rules reserve, and settles at what the function returns.
func TestWithCostReportsByFunction(t *testing.T) {
	rows := func(_ *http.Request, status int, h http.Header) (int64, bool) {
		if status != http.StatusOK {
			return 0, false
		}
		n, err := strconv.ParseInt(h.Get("X-Rows"), 10, 64)
		return n, err == nil
	}
	cases := []struct {
		name    string
		rows    string
		status  int
		left    int64
		audited bool
	}{
		{"reported", "4", http.StatusOK, 6, false},
		{"not reported", "", http.StatusOK, 9, false},
		// The profile has no settle rules: a failure keeps the cost.
		{"failed, not reported", "4", http.StatusBadGateway, 9, false},
		{"negative ignored", "-3", http.StatusOK, 9, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), newLocal(t), rec)
			audit := &lockedWriter{}
			srv := reserveService(t, lim, httpmw.Config{AuditLog: slog.New(slog.NewTextHandler(audit, nil))},
				map[string]http.HandlerFunc{plainRoute: func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("X-Rows", tc.rows)
					w.WriteHeader(tc.status)
				}}, httpmw.WithCost(rows))
			resp, _, err := send(t.Context(), srv, "GET", "/api/v1/plain")
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode)
			await(t, rec.settles, "settlement")
			assert.Equal(t, tc.left, remaining(t, lim, plainRoute))
			assert.Equal(t, tc.audited, len(audit.String()) > 0, audit.String())
		})
	}
}

// TestWithCostNeedsAReserver: a cost function on an Evaluator that cannot
// reserve is a configuration error.
func TestWithCostNeedsAReserver(t *testing.T) {
	_, err := httpmw.New(evaluateOnly{}, httpmw.Config{}, httpmw.WithCost(func(*http.Request, int, http.Header) (int64, bool) { return 0, false }))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "httpmw.cost")
}

type evaluateOnly struct{ httpmw.Evaluator }

// blocking is a handler that signals when it runs and returns when told
// (or when its request's context ends, if untilGone).
type blocking struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
	// first, when set, is how many calls block; later calls return at once.
	first int64
}

func newBlocking(first int64) *blocking {
	return &blocking{entered: make(chan struct{}, 16), release: make(chan struct{}, 16), first: first}
}

func (b *blocking) serve(w http.ResponseWriter, r *http.Request) {
	if n := b.calls.Add(1); b.first > 0 && n > b.first {
		_, _ = io.WriteString(w, "quick")
		return
	}
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-r.Context().Done():
	}
	_, _ = io.WriteString(w, "done")
}

func (b *blocking) awaitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run within 10 s")
	}
}

type result struct {
	resp *http.Response
	err  error
}

func sendAsync(ctx context.Context, srv *httptest.Server, path string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, _, err := send(ctx, srv, "GET", path)
		ch <- result{resp, err}
	}()
	return ch
}

func awaitResult(t *testing.T, ch <-chan result) *http.Response {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.resp
	case <-time.After(10 * time.Second):
		t.Fatal("no response within 10 s")
	}
	return nil
}

// TestConcurrencyWindowHoldsUntilTheHandlerReturns: with at most 2 in
// flight, the third concurrent request is refused while two handlers
// run, and one passes again as soon as one of them has returned.
func TestConcurrencyWindowHoldsUntilTheHandlerReturns(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
			h := newBlocking(0)
			srv := reserveService(t, lim, httpmw.Config{}, map[string]http.HandlerFunc{slowRoute: h.serve})
			first, second := sendAsync(t.Context(), srv, "/api/v1/slow"), sendAsync(t.Context(), srv, "/api/v1/slow")
			h.awaitEntered(t)
			h.awaitEntered(t)
			assert.Equal(t, int64(0), remaining(t, lim, slowRoute), "two slots held")

			resp, body, err := send(t.Context(), srv, "GET", "/api/v1/slow")
			require.NoError(t, err)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
			assert.Contains(t, body, "user-inflight")
			assert.NotEmpty(t, resp.Header.Get(httpmw.HeaderRetryAfter))
			assert.Equal(t, int64(2), h.calls.Load(), "the refused request never reached the handler")

			h.release <- struct{}{}
			done := first
			select {
			case r := <-first:
				require.NoError(t, r.err)
				done = second
			case r := <-second:
				require.NoError(t, r.err)
			case <-time.After(10 * time.Second):
				t.Fatal("no handler returned within 10 s")
			}
			await(t, rec.settles, "settlement")
			assert.Equal(t, int64(1), remaining(t, lim, slowRoute), "one slot back")

			fourth := sendAsync(t.Context(), srv, "/api/v1/slow")
			h.awaitEntered(t)
			h.release <- struct{}{}
			h.release <- struct{}{}
			assert.Equal(t, http.StatusOK, awaitResult(t, done).StatusCode)
			assert.Equal(t, http.StatusOK, awaitResult(t, fourth).StatusCode)
			await(t, rec.settles, "settlement")
			await(t, rec.settles, "settlement")
			assert.Equal(t, int64(2), remaining(t, lim, slowRoute), "every slot back")
		})
	}
}

// TestAPanicSettles: a handler that panics gives its slot back before the
// panic goes on to the server.
func TestAPanicSettles(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
			var calls atomic.Int64
			srv := reserveService(t, lim, httpmw.Config{}, map[string]http.HandlerFunc{singleRoute: func(w http.ResponseWriter, _ *http.Request) {
				if calls.Add(1) == 1 {
					panic(http.ErrAbortHandler)
				}
				_, _ = io.WriteString(w, "ok")
			}})
			_, _, err := send(t.Context(), srv, "GET", "/api/v1/single")
			require.Error(t, err, "the server aborts the response of a panicking handler")
			await(t, rec.settles, "settlement")
			resp, body, err := send(t.Context(), srv, "GET", "/api/v1/single")
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode, body, "the panicking request's slot came back")
		})
	}
}

// TestAClientGoneStillSettles: a client that disconnects while its
// request is served has the reservation settled all the same (the
// settlement does not run on the request's context).
func TestAClientGoneStillSettles(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
			h := newBlocking(1)
			srv := reserveService(t, lim, httpmw.Config{}, map[string]http.HandlerFunc{singleRoute: h.serve})
			ctx, cancel := context.WithCancel(t.Context())
			gone := sendAsync(ctx, srv, "/api/v1/single")
			h.awaitEntered(t)
			cancel()
			select {
			case r := <-gone:
				require.Error(t, r.err)
			case <-time.After(10 * time.Second):
				t.Fatal("the cancelled request did not end within 10 s")
			}
			await(t, rec.settles, "settlement")
			resp, body, err := send(t.Context(), srv, "GET", "/api/v1/single")
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode, body)
		})
	}
}

// TestRenewalKeepsALongRequestsSlot: the single route's lease lives 3 s.
// A request that runs 5 s keeps its slot while the middleware renews the
// lease every second; without the renewals (the middleware's clock never
// fires) the slot comes back at 3 s. Both on a fake clock.
func TestRenewalKeepsALongRequestsSlot(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, b := range fakeClockBackends {
		for _, renewed := range []bool{true, false} {
			t.Run(b.Name+"/renewed="+strconv.FormatBool(renewed), func(t *testing.T) {
				clock := fakeclock.New(start)
				rec := newSignals()
				lim, err := app.New(reserveConfig(t), app.Deps{Store: b.Primary(t), Fallback: newLocal(t), Clock: clock, Recorder: rec})
				require.NoError(t, err)
				t.Cleanup(func() { _ = lim.Close() })
				mwClock := clock
				if !renewed {
					mwClock = fakeclock.New(start)
				}
				h := newBlocking(1)
				srv := reserveService(t, lim, httpmw.Config{Clock: mwClock}, map[string]http.HandlerFunc{singleRoute: h.serve})
				long := sendAsync(t.Context(), srv, "/api/v1/single")
				h.awaitEntered(t)
				if renewed {
					for range 5 {
						awaitTimer(t, clock)
						clock.Advance(time.Second)
						await(t, rec.renews, "renewal")
					}
				} else {
					clock.Advance(5 * time.Second)
				}
				resp, body, err := send(t.Context(), srv, "GET", "/api/v1/single")
				require.NoError(t, err)
				if renewed {
					assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the renewed lease still holds the slot: %s", body)
				} else {
					assert.Equal(t, http.StatusOK, resp.StatusCode, "the lease expired at 3 s: %s", body)
				}
				h.release <- struct{}{}
				assert.Equal(t, http.StatusOK, awaitResult(t, long).StatusCode)
			})
		}
	}
}

// awaitTimer waits until a goroutine sleeps on clock (the renewal loop).
func awaitTimer(t *testing.T, clock *fakeclock.Clock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clock.Timers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the renewal loop did not wait on the clock within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReservedWriterKeepsTheServersInterfaces: the handler of a reserving
// route sees the same optional interfaces as the handler of a route that
// only evaluates (HTTP/1.1: Flusher, Hijacker, ReaderFrom; HTTP/2:
// Flusher, Pusher), and http.ResponseController reaches the server's
// writer.
func TestReservedWriterKeepsTheServersInterfaces(t *testing.T) {
	type ifaces struct{ flusher, hijacker, readerFrom, pusher, deadline bool }
	// probe reports what its handler's writer has on seen: the channel
	// orders the handler's findings before the test reads them.
	probe := func(seen chan<- ifaces) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			var got ifaces
			_, got.flusher = w.(http.Flusher)
			_, got.hijacker = w.(http.Hijacker)
			_, got.readerFrom = w.(io.ReaderFrom)
			_, got.pusher = w.(http.Pusher)
			got.deadline = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)) == nil
			seen <- got
			w.Header().Set("X-Cost", "1")
			_, _ = io.WriteString(w, "ok")
		}
	}
	for _, h2 := range []bool{false, true} {
		t.Run("http2="+strconv.FormatBool(h2), func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), newLocal(t), rec)
			reservedSeen, plainSeen := make(chan ifaces, 1), make(chan ifaces, 1)
			mux := httpmw.NewServeMux()
			mux.HandleFunc(meteredRoute, probe(reservedSeen))
			mux.HandleFunc(plainRoute, probe(plainSeen))
			mw, err := httpmw.New(lim, httpmw.Config{Route: mux.Route(), Identity: identityFromHeaders})
			require.NoError(t, err)
			srv := httptest.NewUnstartedServer(mw(mux))
			if h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			for _, r := range []struct{ method, path string }{{"POST", "/api/v1/metered"}, {"GET", "/api/v1/plain"}} {
				resp, body, err := send(t.Context(), srv, r.method, r.path)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, body)
				assert.Equal(t, h2, resp.ProtoMajor == 2)
			}
			await(t, rec.settles, "settlement")
			reserved, plain := <-reservedSeen, <-plainSeen
			assert.Equal(t, plain, reserved)
			assert.Equal(t, ifaces{flusher: true, hijacker: !h2, readerFrom: !h2, pusher: h2, deadline: true}, reserved)
			assert.Equal(t, int64(19), remaining(t, lim, meteredRoute), "settled at the reported 1")
		})
	}
}

// TestReservedHandlerCanHijack: a hijacked connection is the handler's;
// the reservation still settles.
func TestReservedHandlerCanHijack(t *testing.T) {
	rec := newSignals()
	lim := newLimiter(t, reserveConfig(t), newLocal(t), rec)
	srv := reserveService(t, lim, httpmw.Config{}, map[string]http.HandlerFunc{meteredRoute: func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = buf.Flush()
	}})
	resp, body, err := send(t.Context(), srv, "POST", "/api/v1/metered")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "hijacked", body)
	await(t, rec.settles, "settlement")
	assert.Equal(t, int64(15), remaining(t, lim, meteredRoute), "nothing reported: the cost reserved")
}

// fakeClockBackends are the stores of the fake-clock tests: the local
// store, and Redis on the caller's clock (by default it reads its own,
// which a fake clock does not move).
var fakeClockBackends = []limitertest.Backend{
	{Name: "local", Primary: func(t testing.TB) ports.Store { return newLocal(t) }},
	{Name: "redis", Primary: func(t testing.TB) ports.Store {
		s, err := redis.New(redis.Config{URL: redistest.StandaloneURL(t), Mode: redis.ModeStandalone, Timeout: limitertest.StoreTimeout, Time: redis.CallerTime})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

// settleDown is the local store whose Settle fails as a store that went
// down after the decision would.
type settleDown struct{ *local.Store }

func (settleDown) Settle(context.Context, time.Time, domain.Lease, []domain.Limit, int64) (domain.Settlement, error) {
	return 0, domain.ErrStoreUnavailable
}

// TestAFailedSettlementLeavesTheResponseAlone: a settlement the store
// cannot take is recorded (a settle store call with its error), the
// response is the handler's, and the lease is left to expire at the
// cost reserved.
func TestAFailedSettlementLeavesTheResponseAlone(t *testing.T) {
	rec := newSignals()
	lim := newLimiter(t, reserveConfig(t), settleDown{newLocal(t)}, rec)
	srv := reserveService(t, lim, httpmw.Config{}, map[string]http.HandlerFunc{meteredRoute: func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Cost", "1")
		_, _ = io.WriteString(w, "served")
	}})
	resp, body, err := send(t.Context(), srv, "POST", "/api/v1/metered")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "served", body)
	select {
	case c := <-rec.settles:
		require.ErrorIs(t, c.Err, domain.ErrStoreUnavailable)
	case <-time.After(10 * time.Second):
		t.Fatal("no settlement within 10 s")
	}
	assert.Equal(t, int64(15), remaining(t, lim, meteredRoute), "unsettled: the cost reserved stays until the lease expires")
}

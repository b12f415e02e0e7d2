package httpmw_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// user returns the stand-in authentication headers of a user of a tenant.
func user(name, tenant string) http.Header {
	return http.Header{headerUser: {name}, headerTenant: {tenant}}
}

// policy is one parsed member of RateLimit-Policy or RateLimit.
type policy struct {
	name   string
	params map[string]int64
}

// parseField parses a RateLimit-Policy or RateLimit field with httpsfv,
// an RFC 9651 parser sluice does not use to write them, and checks the
// draft's typing: Items whose value is a String, integer parameters.
func parseField(t *testing.T, h http.Header, field string) []policy {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	require.NoError(t, err, "%s: %q", field, h.Values(field))
	var out []policy
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok, "%s: member %v is not an Item", field, m)
		name, ok := item.Value.(string)
		require.True(t, ok, "%s: %v is not a String", field, item.Value)
		p := policy{name: name, params: map[string]int64{}}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			require.True(t, ok, "%s: parameter %s=%v is not an Integer", field, k, v)
			p.params[k] = n
		}
		out = append(out, p)
	}
	return out
}

func names(ps []policy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "%q is not an integer", s)
	return n
}

const itemsRoute = "GET /api/v1/items/{id}"

func TestAllowedRequestCarriesHeaders(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), nil), httpmw.Config{})
			resp, body := svc.do(t, "GET", "/api/v1/items/42", user("alice@example.org", "acme"))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			assert.Equal(t, "ok", body)
			assert.Equal(t, int64(1), svc.callsOf(itemsRoute))

			// ip burst 6 → 5 left, user burst 3 → 2, user sustained 50 → 49,
			// tenant burst 4 → 3: the user's burst limits.
			h := resp.Header
			assert.Equal(t, "3", h.Get(httpmw.HeaderLimit))
			assert.Equal(t, "2", h.Get(httpmw.HeaderRemaining))
			reset := atoi(t, h.Get(httpmw.HeaderReset))
			assert.True(t, reset >= 1 && reset <= 60, "reset %d", reset)
			assert.Empty(t, h.Get(httpmw.HeaderRetryAfter))

			pol := parseField(t, h, httpmw.HeaderPolicy)
			require.Equal(t, []string{"ip-burst", "user-burst", "user-sustained", "tenant-burst"}, names(pol))
			assert.Equal(t, map[string]int64{"q": 3, "w": 60}, pol[1].params)
			assert.Equal(t, map[string]int64{"q": 50, "w": 3600}, pol[2].params)

			rl := parseField(t, h, httpmw.HeaderRateLimit)
			require.Len(t, rl, 1)
			assert.Equal(t, "user-burst", rl[0].name)
			assert.Equal(t, int64(2), rl[0].params["r"])
			assert.Equal(t, reset, rl[0].params["t"])
		})
	}
}

func TestAnonymousRequestTakesTheIPPath(t *testing.T) {
	svc := newService(t, newLimiter(t, testConfig(t), newLocal(t), nil), httpmw.Config{})
	resp, _ := svc.do(t, "GET", "/api/v1/items/1", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"ip-burst"}, names(parseField(t, resp.Header, httpmw.HeaderPolicy)))
	assert.Equal(t, "5", resp.Header.Get(httpmw.HeaderRemaining))
}

func TestThrottledRequestNeverReachesTheHandler(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), nil), httpmw.Config{})
			alice := user("alice@example.org", "acme")
			for i := range 3 {
				resp, body := svc.do(t, "GET", "/api/v1/items/"+strconv.Itoa(i), alice)
				require.Equal(t, http.StatusOK, resp.StatusCode, body)
			}
			resp, body := svc.do(t, "GET", "/api/v1/items/9", alice)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
			assert.Equal(t, int64(3), svc.callsOf(itemsRoute), "the handler is not called on a refusal")

			p := problemOf(t, resp, body)
			assert.Equal(t, httpmw.ProblemQuotaExceeded, p.Type)
			assert.Equal(t, []string{"user-burst"}, p.Violated)

			rl := parseField(t, resp.Header, httpmw.HeaderRateLimit)
			require.Len(t, rl, 1)
			assert.Equal(t, "user-burst", rl[0].name)
			assert.Equal(t, int64(0), rl[0].params["r"])
			retry := atoi(t, resp.Header.Get(httpmw.HeaderRetryAfter))
			assert.GreaterOrEqual(t, retry, rl[0].params["t"], "Retry-After is never earlier than t")
			assert.True(t, retry >= 1 && retry <= 60, "retry-after %d within the minute window", retry)
			assert.Equal(t, "0", resp.Header.Get(httpmw.HeaderRemaining))

			// Another user of the same tenant still has the tenant's last unit.
			resp, body = svc.do(t, "GET", "/api/v1/items/1", user("bob@example.org", "acme"))
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			resp, body = svc.do(t, "GET", "/api/v1/items/1", user("bob@example.org", "acme"))
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, []string{"tenant-burst"}, problemOf(t, resp, body).Violated)
		})
	}
}

// problemBody is the RFC 9457 body of a 429 or 503.
type problemBody struct {
	Type     string   `json:"type"`
	Status   int      `json:"status"`
	Title    string   `json:"title"`
	Violated []string `json:"violated-policies"`
}

func problemOf(t *testing.T, resp *http.Response, body string) problemBody {
	t.Helper()
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p problemBody
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	assert.Equal(t, resp.StatusCode, p.Status)
	assert.NotEmpty(t, p.Title)
	return p
}

// TestInvalidContextIsUniform: every cause of invalid context gets the
// same status, headers and body; only the Recorder tells them apart.
func TestInvalidContextIsUniform(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := &recordertest.Memory{}
			lim := newLimiter(t, testConfig(t), b.Primary(t), rec)
			// Trusting loopback makes an unresolvable forwarded hop reachable.
			svc := newService(t, lim, httpmw.Config{TrustedProxies: []netip.Prefix{loopback}})
			svc.mux.HandleFunc("GET /api/v1/unprofiled", func(http.ResponseWriter, *http.Request) { t.Error("handler called") })
			cases := []struct {
				cause        domain.Cause
				method, path string
				header       http.Header
			}{
				{domain.CauseRouteInvalid, "GET", "/api/v1/nowhere", nil},
				{domain.CauseRouteInvalid, "DELETE", "/api/v1/items/1", nil}, // 405 for the mux: no pattern
				{domain.CauseProfileMissing, "GET", "/api/v1/unprofiled", nil},
				{domain.CauseIPUnresolved, "GET", "/api/v1/items/1", http.Header{"X-Forwarded-For": {"unknown"}}},
				{domain.CauseDimensionInvalid, "GET", "/api/v1/items/1", user(strings.Repeat("u", domain.MaxIdentifierLen+1), "acme")},
				{domain.CauseDimensionInvalid, "GET", "/api/v1/items/1", user("al\tice", "acme")}, // a control character
			}
			var first *http.Response
			for _, c := range cases {
				resp, body := svc.do(t, c.method, c.path, c.header)
				assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s", c.method, c.path)
				assert.Equal(t, httpmw.InvalidContextBody, body)
				assert.Equal(t, `{"error":"invalid_context"}`, body)
				last, ok := rec.LastDecision()
				require.True(t, ok)
				assert.Equal(t, domain.RejectedInvalidContext, last.Decision.State)
				assert.Equal(t, c.cause, last.Decision.Cause, "%s %s", c.method, c.path)
				// What was asked for reaches the record, for the audit channel
				// (issue 15 item 2); the client's answer stays the same.
				assert.Equal(t, c.method, last.Method)
				assert.Equal(t, c.path, last.Path)
				resp.Header.Del("Date")
				if first == nil {
					first = resp
					continue
				}
				assert.Equal(t, first.Header, resp.Header, "headers tell no cause apart")
			}
			assert.Equal(t, "application/json", first.Header.Get("Content-Type"))
			assert.Empty(t, first.Header.Get(httpmw.HeaderPolicy))
			for r, n := range svc.calls {
				assert.Zero(t, n.Load(), "handler of %s called", r)
			}
		})
	}
}

// TestSpoofedForwardingHeaderChangesNothing: a client that is not a
// trusted proxy cannot choose the address it is counted by.
func TestSpoofedForwardingHeaderChangesNothing(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			for _, cfg := range []httpmw.Config{
				{},
				{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
				{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ProxyHeader: httpmw.Forwarded},
			} {
				rec := &recordertest.Memory{}
				svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), rec), cfg)
				var codes []int
				for i := range 4 {
					spoof := fmt.Sprintf("198.51.100.%d", i+1)
					resp, _ := svc.do(t, "POST", "/api/v1/login", http.Header{
						"X-Forwarded-For": {spoof},
						"Forwarded":       {"for=" + spoof},
						"X-Real-Ip":       {spoof},
					})
					codes = append(codes, resp.StatusCode)
					last, _ := rec.LastDecision()
					assert.Equal(t, "127.0.0.1", last.ClientIP.String())
				}
				assert.Equal(t, []int{200, 200, 429, 429}, codes, "login ip burst is 2, whatever the headers say")
			}
		})
	}
}

// TestTrustedProxyForwardsClients: behind a trusted proxy, clients are
// counted apart by the right-most untrusted hop.
func TestTrustedProxyForwardsClients(t *testing.T) {
	rec := &recordertest.Memory{}
	svc := newService(t, newLimiter(t, testConfig(t), newLocal(t), rec), httpmw.Config{TrustedProxies: []netip.Prefix{loopback}})
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		var codes []int
		for range 3 {
			// A spoofed hop on the left, the proxy's own hop on the right.
			resp, _ := svc.do(t, "POST", "/api/v1/login", http.Header{"X-Forwarded-For": {"6.6.6.6, " + client + ", 127.0.0.2"}})
			codes = append(codes, resp.StatusCode)
			last, _ := rec.LastDecision()
			assert.Equal(t, client, last.ClientIP.String())
		}
		assert.Equal(t, []int{200, 200, 429}, codes, client)
	}
}

// TestRedisOutage: with Redis stopped, an auth route fails closed (503,
// its own problem type) and a read route bypasses under the per-instance
// cap; the handler runs only for the bypass.
func TestRedisOutage(t *testing.T) {
	srv := redistest.NewServer(t)
	store := newRedis(t, srv.URL())
	svc := newService(t, newLimiter(t, testConfig(t), store, nil), httpmw.Config{})
	resp, _ := svc.do(t, "POST", "/api/v1/login", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "healthy before the outage")
	require.NoError(t, srv.Stop())

	resp, body := svc.do(t, "POST", "/api/v1/login", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "1", resp.Header.Get(httpmw.HeaderRetryAfter))
	p := problemOf(t, resp, body)
	assert.Equal(t, httpmw.ProblemTemporaryReducedCapacity, p.Type)
	assert.Equal(t, int64(1), svc.callsOf("POST /api/v1/login"), "the handler is not called on a 503")

	resp, body = svc.do(t, "GET", "/api/v1/items/7", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, int64(1), svc.callsOf(itemsRoute), "a read route bypasses")
	rl := parseField(t, resp.Header, httpmw.HeaderRateLimit)
	require.Len(t, rl, 1)
	assert.Equal(t, "ip-degraded_cap", rl[0].name, "the headers describe the per-instance cap")
	assert.Equal(t, int64(5), rl[0].params["r"], "2 × the smallest burst (3), one used")

	// A costly route on the local action keeps its limits, per instance.
	var codes []int
	for range 3 {
		resp, _ := svc.do(t, "POST", "/api/v1/exports", user("carol", "acme"))
		codes = append(codes, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429}, codes)
}

// TestBootCheck: every route of the mux needs a profile.
func TestBootCheck(t *testing.T) {
	lim := newLimiter(t, testConfig(t), newLocal(t), nil)
	mux := httpmw.NewServeMux()
	for _, r := range routes {
		mux.HandleFunc(r, func(http.ResponseWriter, *http.Request) {})
	}
	mux.Handle("/{path...}", http.NotFoundHandler())
	require.NoError(t, lim.CheckRoutes(mux.Patterns()))
	assert.Equal(t, append(append([]string(nil), routes...), "/{path...}"), mux.Patterns())

	mux.HandleFunc("PUT /api/v1/items/{id}", func(http.ResponseWriter, *http.Request) {})
	err := lim.CheckRoutes(mux.Patterns())
	require.ErrorIs(t, err, app.ErrRouteWithoutProfile)
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
	assert.Contains(t, err.Error(), `"PUT /api/v1/items/{id}"`)
}

// TestCatchAll documents the answer for catch-all patterns: "/" cannot be
// limited (boot check fails, requests it catches get the uniform 400);
// "/{path...}" can, and every unmatched request counts there.
func TestCatchAll(t *testing.T) {
	rec := &recordertest.Memory{}
	lim := newLimiter(t, testConfig(t), newLocal(t), rec)
	for _, c := range []struct {
		pattern string
		status  int
	}{{"/", http.StatusBadRequest}, {"/{$}", http.StatusBadRequest}, {"/{path...}", http.StatusOK}} {
		mux := httpmw.NewServeMux()
		mux.HandleFunc("GET /api/v1/items/{id}", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc(c.pattern, func(http.ResponseWriter, *http.Request) {})
		if c.status == http.StatusOK {
			assert.NoError(t, lim.CheckRoutes(mux.Patterns()), c.pattern)
		} else {
			err := lim.CheckRoutes(mux.Patterns())
			assert.ErrorIs(t, err, app.ErrRouteWithoutProfile, c.pattern)
			assert.Contains(t, err.Error(), strconv.Quote(c.pattern))
		}
		mw, err := httpmw.New(lim, httpmw.Config{Route: mux.Route()})
		require.NoError(t, err)
		srv := httptest.NewServer(mw(mux))
		path := "/"
		if c.pattern == "/{path...}" {
			path = "/no/such/page"
		}
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		srv.Close()
		assert.Equal(t, c.status, resp.StatusCode, c.pattern)
		last, _ := rec.LastDecision()
		if c.status == http.StatusOK {
			assert.Equal(t, "catchall", last.Decision.Profile)
		} else {
			assert.Equal(t, domain.CauseRouteInvalid, last.Decision.Cause)
		}
	}
}

// TestMiddlewareInsideTheMux: wrapping each handler, the default route
// function reads the pattern the mux matched.
func TestMiddlewareInsideTheMux(t *testing.T) {
	rec := &recordertest.Memory{}
	mw, err := httpmw.New(newLimiter(t, testConfig(t), newLocal(t), rec), httpmw.Config{})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/items/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/api/v1/items/3")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	last, _ := rec.LastDecision()
	assert.Equal(t, "items", last.Decision.Profile)
	assert.Equal(t, "GET /api/v1/items/{id}", last.Route)
}

// TestPanickingHandlerKeepsItsDecision: the decision is recorded before
// the handler runs, so a panic loses nothing; net/http still recovers it.
func TestPanickingHandlerKeepsItsDecision(t *testing.T) {
	rec := &recordertest.Memory{}
	mw, err := httpmw.New(newLimiter(t, testConfig(t), newLocal(t), rec), httpmw.Config{})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/items/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	})))
	srv := httptest.NewUnstartedServer(mux)
	logged := &lockedWriter{}
	srv.Config.ErrorLog = log.New(logged, "", 0)
	srv.Start()
	defer srv.Close()

	_, err = srv.Client().Get(srv.URL + "/api/v1/items/3")
	require.Error(t, err, "net/http aborts the response of a panicking handler")
	srv.Close()
	assert.Contains(t, logged.String(), "handler bug", "the panic reached net/http's recovery")
	recs := rec.Decisions()
	require.Len(t, recs, 1)
	assert.Equal(t, domain.Allowed, recs[0].Decision.State)
	assert.Equal(t, "items", recs[0].Decision.Profile)
}

// TestRecordingFailureFailsClosed: a decision that cannot be recorded is
// not served.
func TestRecordingFailureFailsClosed(t *testing.T) {
	rec := &recordertest.Memory{}
	svc := newService(t, newLimiter(t, testConfig(t), newLocal(t), rec), httpmw.Config{})
	rec.FailDecisions(errors.New("metrics pipeline down"))
	resp, _ := svc.do(t, "GET", "/api/v1/items/1", nil)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Zero(t, svc.callsOf(itemsRoute))

	var got error
	svc2 := newService(t, newLimiter(t, testConfig(t), newLocal(t), rec), httpmw.Config{
		OnError: func(w http.ResponseWriter, _ *http.Request, err error) { got = err; w.WriteHeader(http.StatusTeapot) },
	})
	resp, _ = svc2.do(t, "GET", "/api/v1/items/1", nil)
	assert.Equal(t, http.StatusTeapot, resp.StatusCode)
	assert.ErrorContains(t, got, "metrics pipeline down")
}

// TestShadowModeNeverBlocks: in shadow mode every request is served; the
// headers still tell what would have been enforced.
func TestShadowModeNeverBlocks(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShadowMode = true
	svc := newService(t, newLimiter(t, cfg, newLocal(t), nil), httpmw.Config{})
	var last *http.Response
	for range 4 {
		resp, _ := svc.do(t, "POST", "/api/v1/login", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		last = resp
	}
	assert.Equal(t, int64(4), svc.callsOf("POST /api/v1/login"))
	rl := parseField(t, last.Header, httpmw.HeaderRateLimit)
	assert.Equal(t, int64(0), rl[0].params["r"])
	assert.Empty(t, last.Header.Get(httpmw.HeaderRetryAfter))
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := httpmw.New(nil, httpmw.Config{})
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
	_, err = httpmw.New(newLimiter(t, testConfig(t), newLocal(t), nil), httpmw.Config{ProxyHeader: 9})
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
}

// TestNestedMuxes: behind an outer mux (metrics, admin routes), the
// route is the inner mux's pattern, not the outer one's.
func TestNestedMuxes(t *testing.T) {
	rec := &recordertest.Memory{}
	lim := newLimiter(t, testConfig(t), newLocal(t), rec)
	inner := httpmw.NewServeMux()
	inner.HandleFunc("GET /api/v1/items/{id}", func(http.ResponseWriter, *http.Request) {})
	mw, err := httpmw.New(lim, httpmw.Config{Route: inner.Route()})
	require.NoError(t, err)
	outer := http.NewServeMux()
	outer.Handle("GET /metrics", http.NotFoundHandler())
	outer.Handle("/", mw(inner))
	srv := httptest.NewServer(outer)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/api/v1/items/5")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	last, _ := rec.LastDecision()
	assert.Equal(t, "GET /api/v1/items/{id}", last.Route)
}

package httpmw_test

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

// The stores and Limiters of these tests.
var (
	newLocal   = limitertest.Local
	newRedis   = limitertest.Redis
	newLimiter = limitertest.Limiter
	backends   = limitertest.Backends()
)

// freshSecret returns a random HMAC secret: every Limiter of these tests
// counts on keys of its own, even on a Redis server shared by the binary.
func freshSecret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// testConfig loads testdata/sluice.yaml with a fresh secret.
func testConfig(t testing.TB) app.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/sluice.yaml")
	require.NoError(t, err)
	secret := freshSecret(t)
	cfg, err := app.ParseConfig(data, func(k string) (string, bool) {
		if k == app.EnvHMACSecret {
			return secret, true
		}
		return "", false
	})
	require.NoError(t, err)
	return cfg
}

// service is an HTTP server on a real loopback port with sluice in front
// of its routes, counting the calls each handler receives.
type service struct {
	srv   *httptest.Server
	mux   *httpmw.ServeMux
	calls map[string]*atomic.Int64
}

// routes of the test service, one per profile of testdata/sluice.yaml.
var routes = []string{"GET /api/v1/items/{id}", "POST /api/v1/login", "POST /api/v1/exports", "GET /api/v1/five"}

// Headers of the stand-in authentication.
const (
	headerUser   = "X-Test-User"
	headerTenant = "X-Test-Tenant"
)

// identityFromHeaders is the tests' stand-in for a real authenticator.
func identityFromHeaders(r *http.Request) httpmw.Identity {
	return httpmw.Identity{User: r.Header.Get(headerUser), Tenant: r.Header.Get(headerTenant)}
}

// newService starts the test service: the middleware wraps the whole mux.
func newService(t testing.TB, lim httpmw.Evaluator, cfg httpmw.Config) *service {
	t.Helper()
	s := &service{mux: httpmw.NewServeMux(), calls: map[string]*atomic.Int64{}}
	for _, r := range routes {
		n := &atomic.Int64{}
		s.calls[r] = n
		s.mux.HandleFunc(r, func(w http.ResponseWriter, _ *http.Request) {
			n.Add(1)
			_, _ = io.WriteString(w, "ok")
		})
	}
	if cfg.Route == nil {
		cfg.Route = s.mux.Route()
	}
	if cfg.Identity == nil {
		cfg.Identity = identityFromHeaders
	}
	mw, err := httpmw.New(lim, cfg)
	require.NoError(t, err)
	s.srv = httptest.NewServer(mw(s.mux))
	t.Cleanup(s.srv.Close)
	return s
}

// do sends one request and returns the response with its body read.
func (s *service) do(t testing.TB, method, path string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, nil)
	require.NoError(t, err)
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func (s *service) callsOf(route string) int64 { return s.calls[route].Load() }

// loopback is where the test clients come from.
var loopback = netip.MustParsePrefix("127.0.0.0/8")

// lockedWriter collects what the server's goroutines log.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

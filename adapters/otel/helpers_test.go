package otel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// testSecret is 32 bytes as 64 hex characters.
const testSecret = "6f1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff0"

// t0 is the instant every fake clock starts at.
var t0 = time.Date(2026, 5, 7, 12, 0, 0, 0, time.UTC)

// Raw identities: none may reach a metric label or the application log.
const (
	rawUser   = "Alice.Martin@Example.ORG"
	rawTenant = "acme-corp"
	rawAPIKey = "sk_live_0123456789"
)

var rawIP = netip.MustParseAddr("203.0.113.77")

// Routes of testConfig.
const (
	routeRead   = "GET /api/v1/users/{id}"
	routeLogin  = "POST /api/v1/login"
	routeExport = "/api/v1/exports"
)

// testConfig has one profile per family, with small limits so that a few
// requests reach a refusal.
func testConfig() app.Config {
	return app.Config{
		HMACSecret:      testSecret,
		InstanceID:      "test-1",
		BreakerFailures: 2,
		ProbeInterval:   time.Hour,
		Profiles: []app.ProfileConfig{
			{Name: "users_read", Family: domain.FamilyRead, Routes: []string{routeRead}, Windows: app.WindowsConfig{
				User:   []app.WindowConfig{{Name: "burst", Limit: 3, Period: time.Second}},
				Tenant: []app.WindowConfig{{Name: "burst", Limit: 100, Period: time.Second}},
			}},
			{Name: "login", Family: domain.FamilyAuth, Routes: []string{routeLogin}, Windows: app.WindowsConfig{
				IP: []app.WindowConfig{{Name: "burst", Limit: 2, Period: time.Second}},
			}},
			{Name: "exports", Family: domain.FamilyCostly, Routes: []string{routeExport}, Windows: app.WindowsConfig{
				Tenant: []app.WindowConfig{{Name: "burst", Limit: 1, Period: time.Minute}},
			}},
		},
	}
}

// logSink is a log channel's output: JSON lines, kept for the test, and a
// write that fails on demand.
type logSink struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	fail error
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return 0, s.fail
	}
	return s.buf.Write(p)
}

func (s *logSink) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *logSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// records decodes every line.
func (s *logSink) records(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.text()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	return out
}

func (s *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// switchStore is a primary store that an outage switch turns off: every
// call then fails with domain.ErrStoreUnavailable, as a Redis that went
// away does. It is also the Limiter's Prober.
type switchStore struct {
	ports.Store
	down atomic.Bool
}

var errOutage = fmt.Errorf("%w: test outage", domain.ErrStoreUnavailable)

func (s *switchStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, errOutage
	}
	return s.Store.Evaluate(ctx, now, limits)
}

func (s *switchStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, errOutage
	}
	return s.Store.Peek(ctx, now, limits)
}

// Forget passes the store's ports.Forgetter through, so that a reset
// reports what it deleted.
func (s *switchStore) Forget(ctx context.Context, key string) (bool, error) {
	return s.Store.(ports.Forgetter).Forget(ctx, key)
}

func (s *switchStore) Probe(context.Context) error {
	if s.down.Load() {
		return errOutage
	}
	return nil
}

// env is a Limiter wired to a real Recorder on a private registry, served
// over loopback HTTP.
type env struct {
	rec        *otel.Recorder
	reg        *prometheus.Registry
	clock      *fakeclock.Clock
	app, audit *logSink
	primary    *switchStore
	lim        *app.Limiter
	srv        *httptest.Server
}

func newEnv(t testing.TB, cfg app.Config, mutate func(*otel.Config)) *env {
	t.Helper()
	e := &env{reg: prometheus.NewRegistry(), clock: fakeclock.New(t0), app: &logSink{}, audit: &logSink{}}
	oc := otel.Config{
		InstanceID:    cfg.InstanceID,
		StoreDeadline: cfg.StoreTimeout,
		Registry:      e.reg,
		AppLog:        e.app.logger(),
		AuditLog:      e.audit.logger(),
		Clock:         e.clock,
	}
	if mutate != nil {
		mutate(&oc)
	}
	var err error
	e.rec, err = otel.New(oc)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.rec.Close()) })
	e.primary = &switchStore{Store: newLocal(t)}
	e.lim, err = app.New(cfg, app.Deps{
		Store: e.primary, Fallback: newLocal(t), Clock: e.clock, Prober: e.primary, Recorder: e.rec,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.lim.Close()) })
	e.srv = httptest.NewServer(e.rec.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

func newLocal(t testing.TB) *local.Store {
	t.Helper()
	s, err := local.New(local.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// decide evaluates one request and fails the test on a recorder error.
func (e *env) decide(t testing.TB, req app.Request) domain.Decision {
	t.Helper()
	d, err := e.lim.Evaluate(context.Background(), req)
	require.NoError(t, err)
	return d
}

// scrape fetches the metrics over HTTP in the format the server picks
// for accept ("" for the plain text format) and decodes them.
func scrape(t testing.TB, url, accept string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return fams
		}
		require.NoError(t, err)
		fams[mf.GetName()] = &mf
	}
}

// series flattens a family into "label=value,…" → value (counter, gauge,
// or a histogram's count), label names sorted.
func series(mf *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		var v float64
		switch {
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			v = m.GetUntyped().GetValue()
		}
		out[labelKey(m.GetLabel())] = v
	}
	return out
}

func labelKey(pairs []*dto.LabelPair) string {
	parts := make([]string, 0, len(pairs))
	for _, lp := range pairs {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

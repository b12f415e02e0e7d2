package drills

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adapters/otel"
)

// observability is the production recorder, its metrics served over HTTP
// and its two log channels captured.
type observability struct {
	rec        *otel.Recorder
	app, audit *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the recorder's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

func newObservability(t *testing.T) *observability {
	t.Helper()
	o := &observability{app: &syncBuffer{}, audit: &syncBuffer{}}
	debug := &slog.HandlerOptions{Level: slog.LevelDebug}
	rec, err := otel.New(otel.Config{
		InstanceID: "drill-1",
		Registry:   prometheus.NewRegistry(),
		AppLog:     slog.New(slog.NewJSONHandler(o.app, debug)),
		AuditLog:   slog.New(slog.NewJSONHandler(o.audit, debug)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	o.rec = rec
	return o
}

// check scrapes the metrics over HTTP and scans them and the application
// log for every raw form, and the audit log for every raw form outside
// its route and client_ip fields, client_ip being allowed on refusals and
// resets only. It returns the sizes scanned.
func (o *observability) check(t *testing.T, scan *rawScan) (metricBytes, appLines, auditLines int) {
	t.Helper()
	srv := httptest.NewServer(o.rec.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if !strings.Contains(string(body), "sluice_decisions_total") {
		t.Fatalf("the metrics hold no decisions_total: %.300s", body)
	}
	local := newRawScan(nil, nil)
	local.raws = scan.raws
	local.look("metrics", string(body))
	app := o.app.lines()
	for _, l := range app {
		local.look("application log", l)
	}
	audit := o.audit.lines()
	for _, l := range audit {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		if _, ok := rec["client_ip"]; ok && rec["msg"] != otel.MsgRefusal && rec["msg"] != otel.MsgReset {
			t.Errorf("an audit record other than a refusal or a reset holds the raw ip: %s", l)
		}
		if _, ok := rec["client_prefix"]; ok && rec["msg"] != otel.MsgReset {
			t.Errorf("an audit record other than a reset holds an ip's prefix: %s", l)
		}
		delete(rec, "client_ip")
		delete(rec, "client_prefix")
		delete(rec, "route")
		rest, _ := json.Marshal(rec)
		local.look("audit log", string(rest))
	}
	_, found := local.result()
	for _, f := range found {
		t.Error(f)
	}
	if len(app) < 100 || len(audit) < 10 {
		t.Errorf("only %d application and %d audit log lines", len(app), len(audit))
	}
	return len(body), len(app), len(audit)
}

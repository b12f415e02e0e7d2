//go:build !race

package otel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/ports"
)

// TestRecordAllocs pins the hot paths: an allowed decision (not written
// at info level), the metrics of a refusal (both channels set above warn
// here: writing a record is slog's cost), and a store call allocate
// nothing once their series exist. It runs without the race detector only (which allocates
// on its own); `make test` runs the allocation tests in a pass without
// -race.
func TestRecordAllocs(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	rec := benchRecorder(t, nil)
	quietRec := benchRecorder(t, func(c *otel.Config) { c.AppLog, c.AuditLog = quiet, quiet })
	call := ports.StoreCall{Op: ports.OpEvaluate, Start: t0, Latency: 700 * time.Microsecond, Keys: 9}
	for name, f := range map[string]func(){
		"allowed":    func() { _ = rec.RecordDecision(ctx, allowedRecord) },
		"throttled":  func() { _ = quietRec.RecordDecision(ctx, throttledRecord) },
		"store call": func() { rec.RecordStoreCall(ctx, call) },
	} {
		f() // the series exists from here on
		assert.Zero(t, testing.AllocsPerRun(1000, f), name)
	}
}

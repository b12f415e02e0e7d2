package otel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// benchRecorder is a Recorder as a service runs it: JSON log channels at
// info level (allowed decisions are not written), written to io.Discard.
func benchRecorder(b testing.TB, mutate func(*otel.Config)) *otel.Recorder {
	b.Helper()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	cfg := otel.Config{Registry: prometheus.NewRegistry(), AppLog: log, AuditLog: log, InstanceID: "bench"}
	if mutate != nil {
		mutate(&cfg)
	}
	rec, err := otel.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rec.Close() })
	return rec
}

var (
	allowedRecord = ports.DecisionRecord{
		Decision: domain.Decision{
			State: domain.Allowed, Cause: domain.CauseNone, Profile: "users_read", Family: domain.FamilyRead,
			LimitingDimension: domain.DimensionUser, LimitingWindow: "burst", Source: domain.SourcePrimary,
		},
		TenantID: "7e4a9c", ClientIP: rawIP, Route: routeRead, StoreLatency: time.Millisecond,
	}
	throttledRecord = func() ports.DecisionRecord {
		r := allowedRecord
		r.Decision.State, r.Decision.Cause, r.Decision.Layer = domain.Throttled, domain.CauseLimitExceeded, domain.LayerUser
		return r
	}()
)

// BenchmarkRecordDecision is the recorder's cost per decision beside the
// do-nothing recorder, in one run:
//
//	go test -run '^$' -bench 'RecordDecision' -benchmem ./adapters/otel/
//
// allowed: metrics only (not logged at info); throttled: metrics, the
// rejected series, and a record on each log channel; traced: a decision
// span opened and ended too.
func BenchmarkRecordDecision(b *testing.B) {
	ctx := context.Background()
	run := func(name string, r ports.Recorder, rec ports.DecisionRecord) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := r.RecordDecision(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("discard/allowed", recordertest.Discard{}, allowedRecord)
	run("otel/allowed", benchRecorder(b, nil), allowedRecord)
	run("otel/throttled", benchRecorder(b, nil), throttledRecord)
	b.Run("otel-traced/allowed", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		b.Cleanup(func() { _ = tp.Shutdown(ctx) })
		r := benchRecorder(b, func(c *otel.Config) { c.TracerProvider = tp })
		b.ReportAllocs()
		for b.Loop() {
			if err := r.RecordDecision(r.StartDecision(ctx), allowedRecord); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRecordDecisionParallel is the allowed path under contention.
func BenchmarkRecordDecisionParallel(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		r    ports.Recorder
	}{{"discard", recordertest.Discard{}}, {"otel", benchRecorder(b, nil)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.r.RecordDecision(ctx, allowedRecord); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRecordStoreCall is one latency observation.
func BenchmarkRecordStoreCall(b *testing.B) {
	ctx := context.Background()
	call := ports.StoreCall{Op: ports.OpEvaluate, Start: t0, Latency: 700 * time.Microsecond, Keys: 9}
	for _, c := range []struct {
		name string
		r    ports.Recorder
	}{{"discard", recordertest.Discard{}}, {"otel", benchRecorder(b, nil)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.r.RecordStoreCall(ctx, call)
			}
		})
	}
}

// BenchmarkLimiterEvaluate is a whole decision on the local store with
// each recorder: what the recorder adds to Evaluate, as a ratio.
func BenchmarkLimiterEvaluate(b *testing.B) {
	for _, c := range []struct {
		name string
		r    ports.Recorder
	}{{"discard", recordertest.Discard{}}, {"otel", benchRecorder(b, nil)}} {
		b.Run(c.name, func(b *testing.B) {
			clock := fakeclock.New(t0)
			lim, err := app.New(testConfig(), app.Deps{Store: newLocal(b), Fallback: newLocal(b), Clock: clock, Recorder: c.r})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = lim.Close() })
			req := app.Request{Route: routeRead, ClientIP: rawIP, User: rawUser, Tenant: rawTenant}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(time.Second) // a fresh burst window: every decision is allowed
				if _, err := lim.Evaluate(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

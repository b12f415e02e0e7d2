package load

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestRunCountsOutcomesOfTheMeasurementOnly(t *testing.T) {
	var issued, atSwitch, atEnd atomic.Int64
	boom := errors.New("boom")
	newOp := func(w, c int) Op {
		n := 0
		return func(context.Context) (Outcome, error) {
			issued.Add(1)
			n++
			switch {
			case n%10 == 0:
				return Allowed, boom
			case n%2 == 0:
				return Refused, nil
			}
			return Allowed, nil
		}
	}
	cfg := Config{
		Concurrency: 4,
		Ops:         1000,
		BetweenPhases: func(context.Context) error {
			atSwitch.Store(issued.Load())
			return nil
		},
		AtEnd: func(context.Context) error {
			atEnd.Store(issued.Load())
			return nil
		},
	}
	res, err := Run(context.Background(), cfg, newOp)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops < cfg.Ops || res.Ops > issued.Load()-atSwitch.Load() {
		t.Errorf("Ops = %d, want at least %d and at most the %d issued after the warm-up", res.Ops, cfg.Ops, issued.Load()-atSwitch.Load())
	}
	if atEnd.Load()-atSwitch.Load() < cfg.Ops {
		t.Errorf("AtEnd ran after %d requests of the measurement, want at least %d", atEnd.Load()-atSwitch.Load(), cfg.Ops)
	}
	if res.Allowed+res.Refused+res.Errors != res.Ops {
		t.Errorf("allowed %d + refused %d + errors %d != ops %d", res.Allowed, res.Refused, res.Errors, res.Ops)
	}
	if res.Refused == 0 || res.Errors == 0 || res.FirstError != "boom" {
		t.Errorf("refused %d, errors %d, first error %q: want some of each and \"boom\"", res.Refused, res.Errors, res.FirstError)
	}
	if res.Latency.Count() != uint64(res.Ops) {
		t.Errorf("%d latencies for %d ops", res.Latency.Count(), res.Ops)
	}
	if res.Elapsed <= 0 || res.PerSecond() <= 0 {
		t.Errorf("elapsed %v, %v/s: want positive", res.Elapsed, res.PerSecond())
	}
}

func TestRunRefusesBadConfigAndReportsPhaseErrors(t *testing.T) {
	op := func(w, c int) Op { return func(context.Context) (Outcome, error) { return Allowed, nil } }
	for _, cfg := range []Config{
		{Concurrency: 0, Ops: 1},
		{Concurrency: 1},
		{Concurrency: 1, Ops: 1, Warmup: -1},
	} {
		if _, err := Run(context.Background(), cfg, op); err == nil {
			t.Errorf("Run(%+v) = nil error", cfg)
		}
	}
	stop := errors.New("stats unavailable")
	_, err := Run(context.Background(), Config{Concurrency: 2, Ops: 10, BetweenPhases: func(context.Context) error { return stop }}, op)
	if !errors.Is(err, stop) {
		t.Errorf("Run with a failing BetweenPhases = %v, want %v", err, stop)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Config{Concurrency: 2, Ops: 10}, op); !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a cancelled context = %v, want context.Canceled", err)
	}
}

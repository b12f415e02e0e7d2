// Package load drives a closed loop: c goroutines, each issuing its next
// request as soon as the previous one answers, first for a warm-up whose
// results are dropped, then for a measured period. Each goroutine records
// its latencies in its own histogram, merged at the end, so that measuring
// costs the loop nothing but two clock reads.
package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/internal/hist"
)

// Outcome is what one request was answered.
type Outcome uint8

// Outcomes.
const (
	Allowed Outcome = iota
	Refused
)

// Op issues one request and reports its outcome. A refusal is an outcome,
// not an error; an error is a request that got no decision.
type Op func(ctx context.Context) (Outcome, error)

// Worker makes the Op of worker w of c: each worker owns its Op, so an
// Op may keep state (buffers, a position in the key population) without
// locking.
type Worker func(w, c int) Op

// Config says how long and how hard to drive.
type Config struct {
	// Concurrency is the number of goroutines in the loop (at least 1).
	Concurrency int
	// Warmup runs before measuring; its requests are not counted.
	Warmup time.Duration
	// Duration is how long the measurement lasts, unless Ops is set.
	Duration time.Duration
	// Ops, when positive, ends the measurement after this many requests
	// instead of after Duration (smoke tests).
	Ops int64
	// BetweenPhases, when set, runs once after the warm-up and before the
	// measurement starts (e.g. resetting the server's statistics); the
	// workers keep running meanwhile, uncounted.
	BetweenPhases func(ctx context.Context) error
	// AtEnd, when set, runs as the measurement ends, before the workers
	// are stopped (e.g. reading CPU counters).
	AtEnd func(ctx context.Context) error
}

// Result is one measurement.
type Result struct {
	Concurrency int
	// Ops counts the requests started during the measurement that
	// completed, Allowed and Refused their outcomes, Errors those that
	// failed; FirstError is the first failure's message.
	Ops, Allowed, Refused, Errors int64
	FirstError                    string
	// Elapsed is the measured period.
	Elapsed time.Duration
	// Latency holds every measured request's latency, errors included.
	Latency hist.Histogram
}

// PerSecond is the throughput: requests completed per second of the
// measured period.
func (r *Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Phases of a run, read by every worker before each request.
const (
	warming int32 = iota
	measuring
	stopping
)

// worker is the private state of one goroutine.
type worker struct {
	lat                           hist.Histogram
	ops, allowed, refused, errors int64
	firstErr                      error
}

// Run drives newOp's Ops as cfg says and returns the measurement. It
// returns an error for a bad Config, a failing BetweenPhases or a
// cancelled ctx; failed requests are counted in the Result, not returned.
func Run(ctx context.Context, cfg Config, newOp Worker) (*Result, error) {
	switch {
	case cfg.Concurrency < 1:
		return nil, fmt.Errorf("load: concurrency %d, want at least 1", cfg.Concurrency)
	case cfg.Ops <= 0 && cfg.Duration <= 0:
		return nil, errors.New("load: give a duration or a number of requests")
	case cfg.Warmup < 0:
		return nil, errors.New("load: negative warm-up")
	}
	c := cfg.Concurrency
	var phase atomic.Int32
	var measured atomic.Int64
	reached := make(chan struct{})
	var reachedOnce sync.Once
	workers := make([]*worker, c)
	ops := make([]Op, c)
	for w := range c {
		workers[w], ops[w] = &worker{}, newOp(w, c)
	}

	var wg sync.WaitGroup
	for w := range c {
		wg.Go(func() {
			st, op := workers[w], ops[w]
			for {
				p := phase.Load()
				if p == stopping || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				out, err := op(ctx)
				lat := time.Since(t0)
				if p != measuring {
					continue
				}
				st.lat.Record(lat)
				st.ops++
				switch {
				case err != nil:
					st.errors++
					if st.firstErr == nil {
						st.firstErr = err
					}
				case out == Refused:
					st.refused++
				default:
					st.allowed++
				}
				if cfg.Ops > 0 && measured.Add(1) == cfg.Ops {
					reachedOnce.Do(func() { close(reached) })
				}
			}
		})
	}

	res := &Result{Concurrency: c}
	err := drive(ctx, cfg, &phase, reached, &res.Elapsed)
	phase.Store(stopping)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	for _, st := range workers {
		res.Latency.Merge(&st.lat)
		res.Ops += st.ops
		res.Allowed += st.allowed
		res.Refused += st.refused
		res.Errors += st.errors
		if st.firstErr != nil && res.FirstError == "" {
			res.FirstError = st.firstErr.Error()
		}
	}
	return res, nil
}

// drive moves the phases: warm-up, BetweenPhases, then the measurement,
// whose length it stores in elapsed.
func drive(ctx context.Context, cfg Config, phase *atomic.Int32, reached <-chan struct{}, elapsed *time.Duration) error {
	if err := sleep(ctx, cfg.Warmup); err != nil {
		return err
	}
	if cfg.BetweenPhases != nil {
		if err := cfg.BetweenPhases(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	phase.Store(measuring)
	var end <-chan time.Time
	if cfg.Ops <= 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		end = t.C
	}
	select {
	case <-end:
	case <-reached:
	case <-ctx.Done():
		return ctx.Err()
	}
	*elapsed = time.Since(start)
	if cfg.AtEnd != nil {
		return cfg.AtEnd(ctx)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

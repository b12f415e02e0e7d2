// Package httpload is the HTTP load test: the demo service
// (examples/demo, built from the tree and started as its own process) on
// Redis, its search route under the bench's nine-window profile, driven
// over real HTTP on loopback by vegeta at fixed rates (open loop: a
// request leaves at its time whatever the earlier ones are waiting for),
// one rising step per rate until the service no longer keeps up.
package httpload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/bench/internal/cputime"
	"github.com/sluicehq/sluice/bench/internal/hist"
	"github.com/sluicehq/sluice/bench/internal/report"
	"github.com/sluicehq/sluice/bench/internal/server"
	"github.com/sluicehq/sluice/bench/internal/suite"
)

// Headers of the demo's stand-in authentication (examples/demo).
const (
	headerUser   = "X-Demo-User"
	headerTenant = "X-Demo-Tenant"
	headerAPIKey = "X-Demo-API-Key"
)

// route is the request every client sends: the demo's search.
const route = "GET /api/v1/search"

// requestTimeout bounds one request: a request still unanswered then
// counts as an error, not as a latency.
const requestTimeout = 10 * time.Second

// Config says what to drive and how.
type Config struct {
	// Root is sluice's module root, where the demo is built from.
	Root string
	// Server is the Redis the demo counts on; it is flushed before each
	// step.
	Server *server.Server
	// Population is the clients the requests cycle through, each with its
	// user, tenant and api key.
	Population *suite.Population
	// Rates are the steps, in requests per second, driven in rising order
	// until one is not held (see report.HTTPStep.Problem) or its p99
	// exceeds StopP99.
	Rates []float64
	// Warmup runs each rate before its measurement; Duration is the
	// measurement.
	Warmup, Duration time.Duration
	// TargetRate is the rate the report's target reads.
	TargetRate float64
	// StoreTimeout, when positive, replaces the demo's store deadline
	// (store_timeout, 50 ms): on a machine too busy to answer within it,
	// the breaker opens and decisions degrade, which a longer deadline
	// tells apart from the service's own saturation.
	StoreTimeout time.Duration
	// Log receives one line per step.
	Log io.Writer
}

// StopP99 ends the ladder: a step whose p99 exceeds it, in microseconds,
// is past saturation (requests queue), and the higher rates would only
// queue longer.
const StopP99 = 100_000

// Run builds and starts the demo, drives every rate and stops the demo.
// On an error it returns the steps measured so far with the error.
func Run(ctx context.Context, cfg Config) (_ *report.HTTPRun, err error) {
	if len(cfg.Rates) == 0 || cfg.Duration <= 0 || cfg.Warmup < 0 {
		return nil, errors.New("httpload: want rates, a positive duration and a warm-up of 0 or more")
	}
	dir, err := os.MkdirTemp("", "sluicebench-http-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, err := build(ctx, cfg.Root, dir)
	if err != nil {
		return nil, err
	}
	config, err := writeConfig(cfg.Root, dir, cfg.StoreTimeout)
	if err != nil {
		return nil, err
	}
	d, err := start(ctx, bin, config, cfg.Server.Addr(), dir)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.stop()) }()

	run := &report.HTTPRun{
		Route:      route,
		Profile:    "the nine-window profile (ip, user, api key and tenant × burst 1000 per 1 s and sustained 1000 per 10 s, sliding logs, and the tenant-global window; the rest of examples/demo/sluice.yaml as it is)",
		Population: len(cfg.Population.Clients),
		Warmup:     report.Duration(cfg.Warmup), Duration: report.Duration(cfg.Duration),
		TargetRate: cfg.TargetRate,
		Generator:  generator(),
	}
	if cfg.StoreTimeout > 0 {
		run.StoreTimeout = cfg.StoreTimeout.String()
	}
	targets := targetsFor(d.base, cfg.Population)
	for _, r := range cfg.Rates {
		st, err := step(ctx, cfg, d, targets, r)
		if err != nil {
			return run, fmt.Errorf("httpload: %v requests/s: %w", r, err)
		}
		run.Steps = append(run.Steps, *st)
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "http    %6.0f/s asked  %8.0f/s answered  p50 %8.0fµs  p99 %8.0fµs  p999 %8.0fµs  ok %d/%d  windows %d  cpu/request client %5.1fµs demo %5.1fµs redis %5.1fµs%s\n",
				r, st.Throughput(), st.P50, st.P99, st.P999, st.OK, st.Requests, st.Windows,
				perRequest(st.ClientCPU, st), perRequest(st.DemoCPU, st), perRequest(st.RedisCPU, st), st.Problem())
		}
		if st.Problem() != "" || st.P99 > StopP99 {
			break
		}
	}
	return run, nil
}

func perRequest(us float64, st *report.HTTPStep) float64 {
	if st.Requests == 0 {
		return 0
	}
	return us / float64(st.Requests)
}

// targetsFor builds one search per client, with its identity headers.
func targetsFor(base string, p *suite.Population) []vegeta.Target {
	out := make([]vegeta.Target, len(p.Clients))
	for i, c := range p.Clients {
		out[i] = vegeta.Target{
			Method: http.MethodGet,
			URL:    base + "/api/v1/search?q=sluice",
			Header: http.Header{headerUser: {c.User}, headerTenant: {c.Tenant}, headerAPIKey: {c.APIKey}, "X-Forwarded-For": {c.IP.String()}},
		}
	}
	return out
}

// step drives one rate: Redis flushed, a warm-up at the rate, then the
// measurement, with the processor time of the three processes and the
// demo's decisions by state read around it.
func step(ctx context.Context, cfg Config, d *demo, targets []vegeta.Target, r float64) (*report.HTTPStep, error) {
	if err := cfg.Server.Flush(ctx); err != nil {
		return nil, err
	}
	pace := vegeta.ConstantPacer{Freq: int(r), Per: time.Second}
	if cfg.Warmup > 0 {
		if err := drain(ctx, newAttacker().Attack(vegeta.NewStaticTargeter(targets...), pace, cfg.Warmup, "warm-up")); err != nil {
			return nil, err
		}
	}
	before, err := decisions(ctx, d.base)
	if err != nil {
		return nil, err
	}
	selfStart := cputime.Self()
	demoStart, err := cputime.Process(d.pid())
	if err != nil {
		return nil, err
	}
	redisStart, err := cfg.Server.CPU(ctx)
	if err != nil {
		return nil, err
	}
	st := &report.HTTPStep{Rate: r, Codes: map[string]int64{}}
	var lat hist.Histogram
	var first, last time.Time
	atk := newAttacker()
	results := atk.Attack(vegeta.NewStaticTargeter(targets...), pace, cfg.Duration, "measure")
	for res := range results {
		if ctx.Err() != nil {
			atk.Stop()
			continue
		}
		st.Requests++
		st.Codes[strconv.Itoa(int(res.Code))]++
		lat.Record(res.Latency)
		if first.IsZero() || res.Timestamp.Before(first) {
			first = res.Timestamp
		}
		if end := res.End(); end.After(last) {
			last = end
		}
		switch {
		case res.Code == http.StatusOK:
			st.OK++
			if st.Windows == 0 {
				st.Windows = windows(res.Headers.Get("RateLimit-Policy"))
			}
		default:
			st.Errors++
			if st.FirstError == "" {
				st.FirstError = cmpOr(res.Error, fmt.Sprintf("status %d", res.Code))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	selfEnd := cputime.Self()
	demoEnd, err := cputime.Process(d.pid())
	if err != nil {
		return nil, err
	}
	redisEnd, err := cfg.Server.CPU(ctx)
	if err != nil {
		return nil, err
	}
	after, err := decisions(ctx, d.base)
	if err != nil {
		return nil, err
	}
	us := func(x time.Duration) float64 { return float64(x) / float64(time.Microsecond) }
	st.Seconds = last.Sub(first).Seconds()
	st.P50, st.P99, st.P999, st.Max = us(lat.Quantile(0.5)), us(lat.Quantile(0.99)), us(lat.Quantile(0.999)), us(lat.Max())
	st.ClientCPU, st.DemoCPU, st.RedisCPU = us(selfEnd-selfStart), us(demoEnd-demoStart), us(redisEnd-redisStart)
	st.Decisions = map[string]int64{}
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			st.Decisions[k.state] += n
			if !k.shared() {
				st.Degraded += n
			}
		}
	}
	return st, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// newAttacker is vegeta's attacker as the load test uses it: keep-alive
// connections (as a service's clients and proxies keep them), as many
// workers as the rate needs, the body read and dropped.
func newAttacker() *vegeta.Attacker {
	return vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(requestTimeout), vegeta.MaxBody(0), vegeta.HTTP2(false))
}

func drain(ctx context.Context, results <-chan *vegeta.Result) error {
	for range results {
	}
	return ctx.Err()
}

// windows counts the policies of a RateLimit-Policy field: one per window
// the decision checked.
func windows(policy string) int {
	if policy == "" {
		return 0
	}
	return strings.Count(policy, ",") + 1
}

// decisionKey is one series of the demo's decision counter.
type decisionKey struct{ state, cause string }

// shared tells a decision of the shared store (admitted, or refused by a
// limit) from any other (degraded, invalid context...).
func (k decisionKey) shared() bool {
	return (k.state == "ALLOWED" && k.cause == "none") || (k.state == "THROTTLED" && k.cause == "limit_exceeded")
}

// decisions reads the demo's decision counter (sluice_decisions_total on
// its /metrics) by state and cause.
func decisions(ctx context.Context, base string) (map[decisionKey]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[decisionKey]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "sluice_decisions_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("GET /metrics: %q: %w", line, err)
		}
		out[decisionKey{label(labels, "decision_state"), label(labels, "cause")}] += int64(n)
	}
	return out, sc.Err()
}

// label reads name="value" from a Prometheus series' labels.
func label(labels, name string) string {
	_, v, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// generator names vegeta with the version this binary was built with.
func generator() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/tsenart/vegeta/v12" {
				return "vegeta " + m.Version
			}
		}
	}
	return "vegeta v12"
}

package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// HTTPRun is the HTTP load test: the demo service on Redis, driven over
// real HTTP at fixed rates (open loop), one step per rate, in rising
// order, until the service saturates.
type HTTPRun struct {
	// Route is the request sent; Profile says which windows it checks.
	Route   string `json:"route"`
	Profile string `json:"profile"`
	// Population is the number of clients the requests cycle through.
	Population int `json:"population"`
	// Warmup and Duration are per step.
	Warmup   Duration `json:"warmup"`
	Duration Duration `json:"duration"`
	// TargetRate is the rate, in requests per second, at which the target
	// wants the p99 within HTTPP99.
	TargetRate float64 `json:"target_rate"`
	// StoreTimeout is the demo's store deadline when the run replaced the
	// demo's own ("" when it kept it).
	StoreTimeout string `json:"store_timeout,omitempty"`
	// Generator names the load generator and its version.
	Generator string     `json:"generator"`
	Steps     []HTTPStep `json:"steps"`
}

// HTTPStep is one rate of the HTTP load test.
type HTTPStep struct {
	// Rate is the rate asked for, in requests per second.
	Rate float64 `json:"rate"`
	// Requests counts the requests sent during the measured period, OK
	// those answered 200, Codes every answer by status ("0": no answer,
	// a transport error), Errors the requests that got no answer or an
	// unexpected status; FirstError is the first one's message.
	Requests   int64            `json:"requests"`
	OK         int64            `json:"ok"`
	Codes      map[string]int64 `json:"codes"`
	Errors     int64            `json:"errors"`
	FirstError string           `json:"first_error,omitempty"`
	// Seconds is the measured period: from the first request sent to the
	// last answer.
	Seconds float64 `json:"seconds"`
	// Latencies, in microseconds, of every measured request.
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
	// Windows is the number of windows an answer's RateLimit-Policy
	// lists: the windows each decision checked.
	Windows int `json:"windows"`
	// Decisions counts the demo's decisions by state over the step (its
	// /metrics); Degraded those that did not come from the shared store.
	Decisions map[string]int64 `json:"decisions,omitempty"`
	Degraded  int64            `json:"degraded"`
	// ClientCPU, DemoCPU and RedisCPU are the processor time, in
	// microseconds, the load generator, the demo and Redis used over the
	// measured period.
	ClientCPU float64 `json:"client_cpu_us"`
	DemoCPU   float64 `json:"demo_cpu_us"`
	RedisCPU  float64 `json:"redis_cpu_us"`
}

// Throughput is the rate held: requests answered per second, from the
// first request sent to the last answer (a service that falls behind
// answers the last requests late, and this drops below Rate).
func (s *HTTPStep) Throughput() float64 {
	if s.Seconds <= 0 {
		return 0
	}
	return float64(s.Requests) / s.Seconds
}

// MinHeldShare is the share of the asked rate a step must answer for the
// rate to count as held: below it the load generator or the service
// could not keep up.
const MinHeldShare = 0.95

// Problem says why a step does not count ("" when it does): an answer
// other than 200 from the shared store, or a rate not held.
func (s *HTTPStep) Problem() string {
	var p []string
	if s.Errors > 0 || s.OK != s.Requests {
		p = append(p, fmt.Sprintf("%d of %d requests not answered 200", s.Requests-s.OK, s.Requests))
	}
	if s.Degraded > 0 {
		p = append(p, fmt.Sprintf("%d degraded decisions", s.Degraded))
	}
	if s.Throughput() < MinHeldShare*s.Rate {
		p = append(p, fmt.Sprintf("answered %s/s of %s/s", rate(s.Throughput()), rate(s.Rate)))
	}
	if len(p) == 0 {
		return ""
	}
	return "; " + strings.Join(p, "; ")
}

// HighestRate is the highest rate up to which every step held its rate,
// answered every request 200 from the shared store and kept its p99 within
// p99 microseconds; 0 when the lowest step did not.
func (h *HTTPRun) HighestRate(p99 float64) float64 {
	steps := slices.Clone(h.Steps)
	slices.SortFunc(steps, func(a, b HTTPStep) int { return cmp.Compare(a.Rate, b.Rate) })
	best := 0.0
	for _, s := range steps {
		if s.Problem() != "" || s.P99 > p99 {
			break
		}
		best = s.Rate
	}
	return best
}

// step returns the step at rate, if one ran.
func (h *HTTPRun) step(rate float64) *HTTPStep {
	for i := range h.Steps {
		if h.Steps[i].Rate == rate {
			return &h.Steps[i]
		}
	}
	return nil
}

func (r *Run) writeHTTP(b *strings.Builder) {
	h := r.HTTP
	if h == nil {
		return
	}
	b.WriteString("\n#### HTTP load test: the demo on Redis, open loop\n\n")
	deadline := "the demo's own store deadline"
	if h.StoreTimeout != "" {
		deadline = "a store deadline of " + h.StoreTimeout + " instead of the demo's"
	}
	fmt.Fprintf(b, "`%s` under %s, with %s, over real HTTP on loopback, from %d clients; %s sends the requests at a fixed rate (open loop: a slow answer does not delay the next request); each rate: %s of warm-up, then %s measured.\n\n",
		h.Route, h.Profile, deadline, h.Population, h.Generator, h.Warmup, h.Duration)
	fmt.Fprintf(b, "p99 ≤ %s up to **%s** requests/s; p99 ≤ %s up to **%s** requests/s (a rate counts when it was held, every answer was a 200 from the shared store's decision, and every lower rate counted too).\n\n",
		micros(HTTPP99), rateOrNone(h.HighestRate(HTTPP99)), micros(HTTPRelaxedP99), rateOrNone(h.HighestRate(HTTPRelaxedP99)))
	b.WriteString("| rate asked | answered | p50 | p99 | p999 | max | answers | windows per decision | CPU µs per request: load generator + demo + Redis | held |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range h.Steps {
		held := "yes"
		if p := s.Problem(); p != "" {
			held = "no: " + strings.TrimPrefix(p, "; ")
		}
		if s.FirstError != "" {
			held += " (first error: " + strings.ReplaceAll(s.FirstError, "|", "/") + ")"
		}
		per := func(us float64) float64 {
			if s.Requests == 0 {
				return 0
			}
			return us / float64(s.Requests)
		}
		fmt.Fprintf(b, "| %s/s | %s/s | %s | %s | %s | %s | %s | %d | %.1f + %.1f + %.1f | %s |\n",
			rate(s.Rate), rate(s.Throughput()), micros(s.P50), micros(s.P99), micros(s.P999), micros(s.Max),
			codes(s.Codes), s.Windows, per(s.ClientCPU), per(s.DemoCPU), per(s.RedisCPU), held)
	}
}

// codes formats the answers by status: "200 × 9 998, 503 × 2".
func codes(c map[string]int64) string {
	if len(c) == 0 {
		return "–"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		name := k
		if k == "0" {
			name = "no answer"
		}
		out = append(out, fmt.Sprintf("%s × %d", name, c[k]))
	}
	return strings.Join(out, ", ")
}

package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
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
	// Error says why the load test stopped short (the demo did not build
	// or start, a step could not be measured); the steps measured before
	// are kept.
	Error string `json:"error,omitempty"`
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

func (r *Run) writeHTTP(b *strings.Builder, chart string) {
	h := r.HTTP
	if h == nil {
		return
	}
	b.WriteString("\n#### HTTP load test: the demo on Redis, open loop\n\n")
	if h.Error != "" {
		fmt.Fprintf(b, "**The load test failed**: %s\n\n", strings.ReplaceAll(h.Error, "\n", " "))
	}
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
	if chart != "" {
		fmt.Fprintf(b, "\n![p50, p99 and p99.9 against the rate asked](%s)\n", chart)
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

// HTTP chart geometry, in SVG user units.
const (
	httpW, httpH = 720, 330
)

// HTTPChart writes an SVG of the HTTP load test: p50, p99 and p99.9
// (logarithmic) against the rate asked, with the 5 ms and 10 ms bounds.
func (r *Run) HTTPChart(w io.Writer) error {
	h := r.HTTP
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", httpW, httpH, httpW, httpH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", httpW, httpH)
	left, top := float64(padL), float64(headerH)
	pw, ph := float64(httpW-padL-padR), float64(httpH-headerH-padB)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">HTTP load test: the demo on Redis %s, %s (open loop)</text>`+"\n",
		padL, esc(r.Machine.Redis), esc(r.Date.UTC().Format("2006-01-02")))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, top, pw, ph)
	var steps []HTTPStep
	if h != nil {
		steps = h.Steps
	}
	series := []struct {
		name, colour string
		v            func(HTTPStep) float64
	}{
		{"p50", "#1f77b4", func(s HTTPStep) float64 { return s.P50 }},
		{"p99", "#d62728", func(s HTTPStep) float64 { return s.P99 }},
		{"p99.9", "#ff7f0e", func(s HTTPStep) float64 { return s.P999 }},
	}
	x0 := padL
	for _, s := range series {
		fmt.Fprintf(&b, `<line x1="%d" y1="44" x2="%d" y2="44" stroke="%s" stroke-width="2.5"/><text x="%d" y="48">%s</text>`+"\n", x0, x0+28, s.colour, x0+34, s.name)
		x0 += 90
	}
	if len(steps) > 0 {
		lo, hi := float64(HTTPP99), float64(HTTPRelaxedP99)
		for _, st := range steps {
			for _, s := range series {
				if v := s.v(st); v > 0 {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		a, z := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if z == a {
			z++
		}
		y := func(v float64) float64 { return top + ph - ph*(math.Log10(v)-a)/(z-a) }
		x := func(i int) float64 {
			if len(steps) == 1 {
				return left + pw/2
			}
			return left + 14 + (pw-28)*float64(i)/float64(len(steps)-1)
		}
		for e := a; e <= z; e++ {
			v := math.Pow(10, e)
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e5e5e5"/><text x="%.0f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left, y(v), left+pw, y(v), left-6, y(v)+4, esc(micros(v)))
		}
		for _, bound := range []float64{HTTPP99, HTTPRelaxedP99} {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#555" stroke-dasharray="3 3"/><text x="%.0f" y="%.1f" fill="#555">%s</text>`+"\n", left, y(bound), left+pw, y(bound), left+4, y(bound)-3, esc(micros(bound)))
		}
		for i, st := range steps {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`, x(i), top+ph+16, esc(rate(st.Rate)))
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">requests/s asked</text>`+"\n", left+pw/2, top+ph+31)
		for _, s := range series {
			var path strings.Builder
			for i, st := range steps {
				cmd := "L"
				if i == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, x(i), y(max(s.v(st), math.Pow(10, a))))
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", strings.TrimSpace(path.String()), s.colour)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// In-process shapes and contenders the targets read (see package inproc).
const (
	inprocOne       = "1 key of 10k"
	inprocNine      = "9 windows"
	inprocHTTP      = "HTTP middleware"
	httpOtel        = "sluice httpmw (otel Recorder)"
	localGCRA       = "sluice local (GCRA)"
	localLog        = "sluice local (sliding log)"
	goLimiter       = "go-limiter"
	redisRateName   = "redis_rate"
	plainScriptName = "plain script"
	sluiceStore     = "sluice store"
	sluiceLimiter   = "sluice Limiter"
	floorName       = "floor script"
	envoyShape      = "envoy"
	sluiceRLS       = "sluice RLS"
	fixedWindowName = "fixed-window INCR"
	hotAdmitShape   = "hot-admit"
	// floorPerWindowName is the floor script on one key per window, in
	// the shapes whose sluice contenders share logs (docs/adr/015).
	floorPerWindowName = "floor script, one key per window"
)

// FloorRatio is the most Redis time per call sluice's store may take,
// as a multiple of the floor script's on the same keys.
const FloorRatio = 1.3

// HTTPP99 and HTTPRelaxedP99 are the HTTP load test's p99 bounds, in
// microseconds: the seed's 5 ms (prod-like) and 10 ms (shared CI).
const (
	HTTPP99        = 5000
	HTTPRelaxedP99 = 10000
)

// MaxHotCalls is the most Redis commands per decision the Limiter may
// send on a hot key far from its limit, with allotments (issue 36).
const MaxHotCalls = 0.05

// AlmostNone is the largest share of hot-key decisions that may reach Redis
// for the hot-key target: one in fifty.
const AlmostNone = 0.02

// Target is one of the targets, read from the run.
type Target struct {
	// Name says what is compared; Want the threshold.
	Name, Want string
	// Got is what the run measured.
	Got string
	// Met is true when every condition holds; Measured is false when the
	// run lacks a measurement the target needs.
	Met, Measured bool
	// Miss says by how much the target is missed ("" when met).
	Miss string
}

// Verdict is "met", "missed: …" or "not measured".
func (t Target) Verdict() string {
	switch {
	case !t.Measured:
		return "not measured"
	case t.Met:
		return "**met**"
	}
	return "**missed**: " + t.Miss
}

// Targets evaluates the targets at RefConcurrency (c=1 for the serial
// one) and on the in-process benchmarks. A comparison with "redis_rate on
// 1 key" reads redis_rate as measured within the same shape, next to
// sluice.
func (r *Run) Targets() []Target {
	c := RefConcurrency
	return []Target{
		r.ratioTarget("9 windows, sliding log (5 shared logs): sluice store vs the plain script (9 keys)",
			r.find("log-9", sluiceStore, c), r.find("log-9", plainScriptName, c), 2, 5000),
		r.ratioTarget("9 windows, sliding log above the compact bound (ZSETs, 5 shared logs), one big tenant: sluice store vs the plain script (9 keys)",
			r.find("log-9-large", sluiceStore, c), r.find("log-9-large", plainScriptName, c), 1, 0),
		r.ratioTarget("9 keys, GCRA: sluice store vs redis_rate on 1 key",
			r.find("gcra-9", sluiceStore, c), r.find("gcra-9", redisRateName, c), 1, 0),
		r.ratioTarget("2 keys, sliding log: AllowDual (sluice Limiter) vs redis_rate on 1 key",
			r.find("log-2", sluiceLimiter, c), r.find("log-2", redisRateName, c), 1.2, 0),
		r.floorTarget(),
		r.clientCPUTarget(r.find("log-9", sluiceStore, c), r.find("log-9", plainScriptName, c)),
		r.serialTarget(r.find("gcra-1", sluiceStore, 1), r.find("gcra-1", redisRateName, 1)),
		r.httpLoadTarget(),
		r.hotTarget(r.find("hot", sluiceLimiter, c), r.find("hot", redisRateName, c)),
		r.ratioTarget("Envoy ShouldRateLimit, 2 descriptors: sluice RLS (allotments on) vs envoyproxy/ratelimit's fixed window",
			r.find(envoyShape, sluiceRLS, c), r.find(envoyShape, fixedWindowName, c), 2, 0),
		r.ratioTarget("1 hot tenant-global key far from its limit, all admitted: sluice Limiter (allotments on) vs redis_rate on that key",
			r.find(hotAdmitShape, sluiceLimiter, c), r.find(hotAdmitShape, redisRateName, c), 20, 0),
		r.hotCallsTarget(r.find(hotAdmitShape, sluiceLimiter, c), r.find(hotAdmitShape, sluiceLimiter+NoAllotmentsSuffix, c)),
		r.localOneTarget(),
		r.localNineTarget(),
		r.httpTarget(),
	}
}

// FloorShapes are the shapes the floor target reads: the multi-key
// decisions issue 17 and script v3 aim at (the floor table of the report
// gives every shape's ratio; on one key the fixed cost of calling a
// script weighs more than any command).
var FloorShapes = []string{"log-9", "gcra-9", "log-9-large", "log-2", "demo"}

// floorTarget: on each of FloorShapes, Redis' time per call of sluice's
// store at most FloorRatio × the floor script's (c=RefConcurrency): the
// floor of the layout sluice runs, never the per-window floor of a shape
// that shares logs. It lists every such shape's ratio, the worst first.
func (r *Run) floorTarget() Target {
	t := Target{
		Name: "Redis time per call: sluice store vs the floor script (the same commands, no logic), on " + strings.Join(FloorShapes, ", "),
		Want: fmt.Sprintf("≤ %s the floor's µs per call on each (c=%d)", times(FloorRatio), RefConcurrency),
	}
	type ratio struct {
		shape      string
		got, s, fl float64
	}
	var rs []ratio
	for _, name := range FloorShapes {
		s, fl := r.find(name, sluiceStore, RefConcurrency), r.find(name, floorName, RefConcurrency)
		if s == nil || fl == nil || fl.MicrosPerCall() == 0 {
			continue
		}
		rs = append(rs, ratio{name, s.MicrosPerCall() / fl.MicrosPerCall(), s.MicrosPerCall(), fl.MicrosPerCall()})
	}
	if len(rs) == 0 {
		return t
	}
	t.Measured, t.Met = true, true
	slices.SortStableFunc(rs, func(a, b ratio) int { return cmp.Compare(b.got, a.got) })
	var got, miss []string
	for _, x := range rs {
		got = append(got, fmt.Sprintf("%s %s (%.1f vs %.1f µs)", x.shape, times(x.got), x.s, x.fl))
		if x.got > FloorRatio {
			t.Met = false
			miss = append(miss, fmt.Sprintf("%s %s", x.shape, times(x.got)))
		}
	}
	t.Got = strings.Join(got, "; ")
	if !t.Met {
		t.Miss = strings.Join(miss, ", ") + " over " + times(FloorRatio)
	}
	return t
}

// clientCPUTarget: the client CPU per decision of sluice's store no more
// than the plain script's on the same client (c=RefConcurrency).
func (r *Run) clientCPUTarget(s, p *Measurement) Target {
	t := Target{
		Name: "9 windows, sliding log: client CPU per decision, sluice store vs the plain script on the same client",
		Want: fmt.Sprintf("≤ the peer's µs per decision (c=%d)", RefConcurrency),
	}
	if s == nil || p == nil || s.ClientCPU <= 0 || p.ClientCPU <= 0 {
		return t
	}
	t.Measured = true
	sc, pc := s.ClientCPUPerDecision(), p.ClientCPUPerDecision()
	t.Got = fmt.Sprintf("%.1f vs %.1f µs", sc, pc)
	t.Met = sc <= pc
	if !t.Met {
		t.Miss = fmt.Sprintf("%.1f µs more (%s)", sc-pc, times(sc/pc))
	}
	return t
}

// httpLoadTarget: the HTTP load test's p99 at most HTTPP99 at the stated
// rate, every answer a 200 from the shared store's decision.
func (r *Run) httpLoadTarget() Target {
	h := r.HTTP
	t := Target{Name: "HTTP load test: the demo on Redis, nine windows, open loop", Want: "p99 ≤ " + micros(HTTPP99)}
	if h == nil || len(h.Steps) == 0 {
		return t
	}
	t.Want += fmt.Sprintf(" at %s requests/s", rate(h.TargetRate))
	t.Measured = true
	best5, best10 := h.HighestRate(HTTPP99), h.HighestRate(HTTPRelaxedP99)
	t.Got = fmt.Sprintf("p99 ≤ %s up to %s, ≤ %s up to %s requests/s", micros(HTTPP99), rateOrNone(best5), micros(HTTPRelaxedP99), rateOrNone(best10))
	t.Met = best5 >= h.TargetRate && h.TargetRate > 0
	if !t.Met {
		t.Miss = fmt.Sprintf("held up to %s/s only", rateOrNone(best5))
		if st := h.step(h.TargetRate); st != nil {
			t.Miss += fmt.Sprintf("; at %s/s: p99 %s%s", rate(h.TargetRate), micros(st.P99), st.Problem())
		} else if h.TargetRate > 0 {
			t.Miss += fmt.Sprintf("; %s/s was not driven", rate(h.TargetRate))
		}
	}
	return t
}

func rateOrNone(v float64) string {
	if v == 0 {
		return "no rate driven"
	}
	return rate(v)
}

// ratioTarget: sluice's decisions/s at least ratio × the peer's, and, when
// p99Micros > 0, sluice's p99 at most that.
func (r *Run) ratioTarget(name string, s, p *Measurement, ratio, p99Micros float64) Target {
	t := Target{Name: name, Want: fmt.Sprintf("≥ %s the peer's decisions/s (c=%d)", times(ratio), RefConcurrency)}
	if p99Micros > 0 {
		t.Want += ", p99 ≤ " + micros(p99Micros)
	}
	if s == nil || p == nil || p.PerSecond == 0 {
		return t
	}
	t.Measured = true
	got := s.PerSecond / p.PerSecond
	t.Got = fmt.Sprintf("%s (%s vs %s/s), p99 %s vs %s", times(got), rate(s.PerSecond), rate(p.PerSecond), micros(s.P99), micros(p.P99))
	var miss []string
	if got < ratio {
		miss = append(miss, fmt.Sprintf("%s short of %s (sluice would need %s/s)", times(ratio/got), times(ratio), rate(ratio*p.PerSecond)))
	}
	if p99Micros > 0 && s.P99 > p99Micros {
		miss = append(miss, fmt.Sprintf("p99 %s over %s", micros(s.P99-p99Micros), micros(p99Micros)))
	}
	t.Met = len(miss) == 0
	t.Miss = strings.Join(miss, "; ")
	return t
}

// hotTarget: the Limiter on the hot key at least 10 × redis_rate's refused
// path, both at least 99 % refused, and at most AlmostNone of the
// Limiter's decisions reaching Redis.
func (r *Run) hotTarget(s, p *Measurement) Target {
	t := Target{
		Name: "1 hot key, ≥ 99 % refused: sluice Limiter vs redis_rate's refused path",
		Want: fmt.Sprintf("≥ 10× the peer's decisions/s (c=%d), Redis sees ≤ %.0f %% of the decisions", RefConcurrency, 100*AlmostNone),
	}
	if s == nil || p == nil || p.PerSecond == 0 {
		return t
	}
	t.Measured = true
	got := s.PerSecond / p.PerSecond
	t.Got = fmt.Sprintf("%s (%s vs %s/s), %.2f %% vs %.2f %% refused, Redis calls per decision %.4f",
		times(got), rate(s.PerSecond), rate(p.PerSecond), 100*s.RefusedShare(), 100*p.RefusedShare(), s.CallsPerDecision())
	var miss []string
	if got < 10 {
		miss = append(miss, fmt.Sprintf("%s short of 10×", times(10/got)))
	}
	if s.RefusedShare() < 0.99 || p.RefusedShare() < 0.99 {
		miss = append(miss, "fewer than 99 % refused: the shape did not hold")
	}
	if s.CallsPerDecision() > AlmostNone {
		miss = append(miss, fmt.Sprintf("Redis saw %.1f %% of the decisions", 100*s.CallsPerDecision()))
	}
	t.Met = len(miss) == 0
	t.Miss = strings.Join(miss, "; ")
	return t
}

// hotCallsTarget: on the hot key far from its limit, the Limiter with
// allotments sends Redis at most MaxHotCalls commands per decision (INFO
// commandstats); its store calls, and the twin's without allotments, are
// given beside.
func (r *Run) hotCallsTarget(s, off *Measurement) Target {
	t := Target{
		Name: "1 hot tenant-global key far from its limit: Redis calls per decision, sluice Limiter (allotments on)",
		Want: fmt.Sprintf("≤ %.2f (c=%d)", MaxHotCalls, RefConcurrency),
	}
	if s == nil || s.Ops == 0 {
		return t
	}
	t.Measured = true
	t.Got = fmt.Sprintf("%.5f Redis commands, %.5f store calls (%s)", s.CallsPerDecision(), s.StoreCallsPerDecision(""), s.storeCallsText())
	if off != nil && off.Ops > 0 {
		t.Got += fmt.Sprintf("; without allotments %.4f and %.4f", off.CallsPerDecision(), off.StoreCallsPerDecision(""))
	}
	t.Met = s.CallsPerDecision() <= MaxHotCalls
	if !t.Met {
		t.Miss = fmt.Sprintf("%s over %.2f", times(s.CallsPerDecision()/MaxHotCalls), MaxHotCalls)
	}
	return t
}

// serialTarget: at c=1, sluice's p50 no worse than redis_rate's.
func (r *Run) serialTarget(s, p *Measurement) Target {
	t := Target{Name: "1 key, GCRA, serial (c=1): sluice store p50 vs redis_rate p50", Want: "≤ the peer's p50"}
	if s == nil || p == nil {
		return t
	}
	t.Measured = true
	t.Got = fmt.Sprintf("%s vs %s (%s vs %s decisions/s)", micros(s.P50), micros(p.P50), rate(s.PerSecond), rate(p.PerSecond))
	t.Met = s.P50 <= p.P50
	if !t.Met {
		t.Miss = fmt.Sprintf("%s slower (%s)", micros(s.P50-p.P50), times(s.P50/p.P50))
	}
	return t
}

// localOneTarget: the local store on one key no slower than go-limiter,
// with no allocation, serial.
func (r *Run) localOneTarget() Target {
	t := Target{Name: "in process, 1 key of 10k: sluice local (GCRA) vs go-limiter, one goroutine", Want: "≤ the peer's ns/op, 0 allocs/op"}
	s, p := r.findInProcess(inprocOne, localGCRA, false), r.findInProcess(inprocOne, goLimiter, false)
	if s == nil || p == nil {
		return t
	}
	t.Measured = true
	t.Got = fmt.Sprintf("%s vs %s, %d allocs/op", nanos(s.NsPerOp), nanos(p.NsPerOp), s.AllocsPerOp)
	var miss []string
	if s.NsPerOp > p.NsPerOp {
		miss = append(miss, fmt.Sprintf("%s slower (%s)", nanos(s.NsPerOp-p.NsPerOp), times(s.NsPerOp/p.NsPerOp)))
	}
	if s.AllocsPerOp > 0 {
		miss = append(miss, fmt.Sprintf("%d allocs/op", s.AllocsPerOp))
	}
	t.Met = len(miss) == 0
	t.Miss = strings.Join(miss, "; ")
	return t
}

// localNineTarget: the local store under 1 µs on nine keys, both
// algorithms, serial.
func (r *Run) localNineTarget() Target {
	t := Target{Name: "in process, 9 windows: sluice local, one goroutine (GCRA on 9 keys, sliding log on 5 shared logs)", Want: "< 1 µs per decision, both algorithms"}
	g, l := r.findInProcess(inprocNine, localGCRA, false), r.findInProcess(inprocNine, localLog, false)
	if g == nil || l == nil {
		return t
	}
	t.Measured = true
	t.Got = fmt.Sprintf("GCRA %s, sliding log %s", nanos(g.NsPerOp), nanos(l.NsPerOp))
	worst := max(g.NsPerOp, l.NsPerOp)
	t.Met = worst < 1000
	if !t.Met {
		t.Miss = fmt.Sprintf("%s over 1 µs (%s)", nanos(worst-1000), times(worst/1000))
	}
	return t
}

// httpTarget: the whole HTTP middleware pipeline on the local store under
// 3 µs per request.
func (r *Run) httpTarget() Target {
	t := Target{Name: "HTTP middleware on the local store, whole pipeline (otel Recorder), one goroutine", Want: "< 3 µs per request"}
	h := r.findInProcess(inprocHTTP, httpOtel, false)
	if h == nil {
		return t
	}
	t.Measured = true
	t.Got = fmt.Sprintf("%s, %d allocs/op", nanos(h.NsPerOp), h.AllocsPerOp)
	t.Met = h.NsPerOp < 3000
	if !t.Met {
		t.Miss = fmt.Sprintf("%s over 3 µs (%s)", nanos(h.NsPerOp-3000), times(h.NsPerOp/3000))
	}
	return t
}

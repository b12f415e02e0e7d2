package report

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sampleRun is a run with the measurements the targets read, sluice at ratio ×
// each peer.
func sampleRun(ratio float64) *Run {
	m := func(shape, contender string, sluice bool, c int, perSec, p99 float64) Measurement {
		return Measurement{Shape: shape, ShapeTitle: shape, Contender: contender, Sluice: sluice, Concurrency: c,
			Ops: 1000, Allowed: 1000, PerSecond: perSec, P50: p99 / 4, P99: p99, P999: p99 * 2, Max: p99 * 3,
			ScriptCalls: 1000, ScriptMicros: 50_000, ClientCPU: 20_000}
	}
	// Redis time per call: sluice's store at FloorRatio / ratio × the
	// floor's; client CPU per decision: at 1 / ratio × the plain script's.
	withCalls := func(x Measurement, micros float64) Measurement {
		x.ScriptMicros = int64(micros * float64(x.ScriptCalls))
		return x
	}
	withCPU := func(x Measurement, perDecision float64) Measurement {
		x.ClientCPU = perDecision * float64(x.Ops)
		return x
	}
	hot := func(contender string, sluice bool, perSec float64, calls int64) Measurement {
		x := m("hot", contender, sluice, 64, perSec, 100)
		x.Hot, x.Allowed, x.Refused, x.ScriptCalls = true, 5, 995, calls
		return x
	}
	// Allotments: the Limiter at ratio × each allotment target, its Redis
	// calls per decision at MaxHotCalls / ratio.
	allot := func(x Measurement, calls int64, storeCalls map[string]int64) Measurement {
		x.ScriptCalls, x.StoreCalls, x.StoreMicros = calls, storeCalls, map[string]float64{}
		for op, n := range storeCalls {
			x.StoreMicros[op] = 100 * float64(n)
		}
		return x
	}
	hotCalls := int64(MaxHotCalls * 1000 / ratio)
	http := &HTTPRun{TargetRate: 2000, Steps: []HTTPStep{
		{Rate: 1000, Requests: 10_000, OK: 10_000, Seconds: 10, P99: 2000},
		{Rate: 2000, Requests: 20_000, OK: 20_000, Seconds: 10, P99: 4000 / ratio},
		{Rate: 4000, Requests: 40_000, OK: 40_000, Seconds: 10, P99: 9000},
		{Rate: 8000, Requests: 60_000, OK: 60_000, Seconds: 10, P99: 30_000},
	}}
	return &Run{
		HTTP:        http,
		Concurrency: []int{1, 64},
		Redis: []Measurement{
			m("gcra-1", sluiceStore, true, 1, 10_000, 300),
			m("gcra-1", redisRateName, false, 1, 10_000*ratio, 300),
			m("gcra-1", redisRateName, false, 64, 40_000, 3000),
			withCPU(withCalls(m("log-9", sluiceStore, true, 64, 30_000*ratio, 4000), 26/ratio), 20/ratio),
			withCPU(m("log-9", plainScriptName, false, 64, 15_000, 6000), 20),
			withCalls(m("log-9", floorName, false, 64, 20_000, 3000), 20),
			m("log-9-large", sluiceStore, true, 64, 15_000*ratio, 4000),
			m("log-9-large", plainScriptName, false, 64, 15_000, 6000),
			m("gcra-9", sluiceStore, true, 64, 40_000*ratio, 3000),
			m("gcra-9", redisRateName, false, 64, 40_000, 3000),
			m("log-2", sluiceLimiter, true, 64, 48_000*ratio, 3000),
			m("log-2", redisRateName, false, 64, 40_000, 3000),
			hot(sluiceLimiter, true, 400_000*ratio, 10),
			hot(redisRateName, false, 40_000, 1000),
			allot(m(envoyShape, sluiceRLS, true, 64, 160_000*ratio, 3000), 20, map[string]int64{"allot": 10, "settle": 5, "evaluate": 10}),
			allot(m(envoyShape, sluiceRLS+NoAllotmentsSuffix, true, 64, 40_000, 3000), 500, map[string]int64{"evaluate": 1000}),
			m(envoyShape, fixedWindowName, false, 64, 80_000, 3000),
			allot(m(hotAdmitShape, sluiceLimiter, true, 64, 800_000*ratio, 10), hotCalls, map[string]int64{"allot": hotCalls}),
			allot(m(hotAdmitShape, sluiceLimiter+NoAllotmentsSuffix, true, 64, 160_000, 3000), 40, map[string]int64{"evaluate": 40}),
			m(hotAdmitShape, redisRateName, false, 64, 40_000, 3000),
		},
		InProcess: []InProcess{
			{Shape: inprocOne, Contender: localGCRA, Sluice: true, N: 1, NsPerOp: 200 / ratio},
			{Shape: inprocOne, Contender: goLimiter, N: 1, NsPerOp: 200},
			{Shape: inprocNine, Contender: localGCRA, Sluice: true, N: 1, NsPerOp: 900 / ratio},
			{Shape: inprocNine, Contender: localLog, Sluice: true, N: 1, NsPerOp: 950 / ratio},
		},
	}
}

func TestTargetsMetAndMissed(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		met   bool
	}{{1, true}, {0.5, false}} {
		targets := sampleRun(tc.ratio).Targets()
		if len(targets) != 15 {
			t.Fatalf("%d targets, want 15", len(targets))
		}
		for _, tg := range targets {
			if strings.HasPrefix(tg.Name, "HTTP middleware") {
				if tg.Measured || tg.Verdict() != "not measured" {
					t.Errorf("the HTTP target is %q without its benchmark", tg.Verdict())
				}
				continue
			}
			if !tg.Measured {
				t.Errorf("ratio %v: %s not measured", tc.ratio, tg.Name)
				continue
			}
			// At ratio 1 sluice is exactly at every threshold but the
			// serial one, where 0.5 makes redis_rate's p50 equal.
			wantMet := tc.met
			if strings.HasPrefix(tg.Name, "1 key, GCRA, serial") {
				wantMet = true
			}
			if tg.Met != wantMet {
				t.Errorf("ratio %v: %s: met %t, want %t (got %s; %s)", tc.ratio, tg.Name, tg.Met, wantMet, tg.Got, tg.Miss)
			}
			if !tg.Met && tg.Miss == "" {
				t.Errorf("ratio %v: %s missed without saying by how much", tc.ratio, tg.Name)
			}
		}
	}
}

// TestAllotmentsTable: the Limiter's rows beside their twins without
// allotments, with the ratio of the two and the calls each made; the
// peers, which count no store calls, are left out.
func TestAllotmentsTable(t *testing.T) {
	var b strings.Builder
	sampleRun(1).writeAllotments(&b)
	got := b.String()
	for _, want := range []string{
		"| envoy | **sluice RLS** | 64 | 160.0k | 2.00× fixed-window INCR | 4.00× | 0.02000 | 0.02500 | allot 0.01000, settle 0.00500, evaluate 0.01000 | 100 µs | 750 µs / 3.0 ms |",
		"| envoy | **sluice RLS, no allotments** | 64 | 40.0k | 0.50× fixed-window INCR | – | 0.50000 | 1.00000 | evaluate 1.00000 | 100 µs |",
		"| hot-admit | **sluice Limiter** | 64 | 800.0k | 20.00× redis_rate | 5.00× | 0.05000 | 0.05000 | allot 0.05000 | 100 µs |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the allotments table lacks\n%s\n%s", want, got)
		}
	}
	for _, peer := range []string{"| " + fixedWindowName + " |", "| " + redisRateName + " |", "| log-2 |"} {
		if strings.Contains(got, peer) {
			t.Errorf("the allotments table lists %q, which counts no store calls:\n%s", peer, got)
		}
	}
	b.Reset()
	(&Run{Redis: []Measurement{{Shape: "log-1", Contender: sluiceStore, Concurrency: 64}}, Concurrency: []int{64}}).writeAllotments(&b)
	if b.Len() != 0 {
		t.Errorf("a run with no Limiter has an allotments table:\n%s", b.String())
	}
}

func TestHotTargetNeedsRedisToSeeAlmostNothing(t *testing.T) {
	r := sampleRun(1)
	for i := range r.Redis {
		if m := &r.Redis[i]; m.Shape == "hot" && m.Sluice {
			m.ScriptCalls = m.Ops / 10
		}
	}
	tg := target(t, r, "1 hot key")
	if tg.Met || !strings.Contains(tg.Miss, "Redis saw 10.0 %") {
		t.Errorf("hot target with 10 %% of decisions reaching Redis: met %t, %q", tg.Met, tg.Miss)
	}
}

func TestSpliceKeepsWhatIsOutsideTheMarkers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "doc.md")
	if err := Splice(path, []byte("first")); err != nil {
		t.Fatalf("Splice on a missing document: %v", err)
	}
	doc, _ := os.ReadFile(path)
	doc = append([]byte("head\n"), append(doc, "tail\n"...)...)
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Splice(path, []byte("second")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "head\n" + BeginMarker + "\n\nsecond\n\n" + EndMarker + "\ntail\n"
	if string(got) != want {
		t.Errorf("document:\n%s\nwant:\n%s", got, want)
	}
	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Splice(path, []byte("x")); err == nil {
		t.Error("Splice into a document without markers succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "no markers\n" {
		t.Errorf("a refused Splice changed the document: %q", got)
	}
}

// target returns the run's target whose name starts with prefix.
func target(t *testing.T, r *Run, prefix string) Target {
	t.Helper()
	for _, tg := range r.Targets() {
		if strings.HasPrefix(tg.Name, prefix) {
			return tg
		}
	}
	t.Fatalf("no target %q", prefix)
	return Target{}
}

func TestFloorTargetNamesEveryShapeOverTheRatio(t *testing.T) {
	r := sampleRun(1)
	tg := target(t, r, "Redis time per call")
	if !tg.Met || !strings.Contains(tg.Got, "log-9 1.30× (26.0 vs 20.0 µs)") {
		t.Errorf("sluice at 1.3× the floor: met %t, got %q", tg.Met, tg.Got)
	}
	// sampleRun's gcra-9 store takes 50 µs per call; its gcra-1 store,
	// which the target does not read, as much.
	r.Redis = append(r.Redis,
		Measurement{Shape: "gcra-9", Contender: floorName, Concurrency: 64, ScriptCalls: 10, ScriptMicros: 250},
		Measurement{Shape: "gcra-1", Contender: sluiceStore, Sluice: true, Concurrency: 64, ScriptCalls: 10, ScriptMicros: 500},
		Measurement{Shape: "gcra-1", Contender: floorName, Concurrency: 64, ScriptCalls: 10, ScriptMicros: 50},
	)
	tg = target(t, r, "Redis time per call")
	if tg.Met || tg.Miss != "gcra-9 2.00× over 1.30×" || !strings.HasPrefix(tg.Got, "gcra-9 2.00×") || strings.Contains(tg.Got, "gcra-1") {
		t.Errorf("one shape at 2× the floor: met %t, got %q, miss %q", tg.Met, tg.Got, tg.Miss)
	}
}

func TestHTTPHighestRateStopsAtTheFirstStepThatFails(t *testing.T) {
	h := &HTTPRun{Steps: []HTTPStep{
		{Rate: 4000, Requests: 40_000, OK: 40_000, Seconds: 10, P99: 3000},
		{Rate: 1000, Requests: 10_000, OK: 10_000, Seconds: 10, P99: 1000},
		{Rate: 2000, Requests: 20_000, OK: 19_990, Seconds: 10, P99: 1000, Errors: 10},
	}}
	if got := h.HighestRate(HTTPP99); got != 1000 {
		t.Errorf("HighestRate with the 2000/s step answering 10 errors = %v, want 1000", got)
	}
	h.Steps[2].OK, h.Steps[2].Errors = 20_000, 0
	if got := h.HighestRate(HTTPP99); got != 4000 {
		t.Errorf("HighestRate = %v, want 4000", got)
	}
	h.Steps[0].Seconds = 12 // 40 000 answered in 12 s: 3.3k/s, not held
	if got := h.HighestRate(HTTPRelaxedP99); got != 2000 {
		t.Errorf("HighestRate with 4000/s not held = %v, want 2000", got)
	}
	h.Steps[1].Degraded = 1
	if got, p := h.HighestRate(HTTPRelaxedP99), h.Steps[1].Problem(); got != 0 || !strings.Contains(p, "1 degraded") {
		t.Errorf("HighestRate with a degraded decision at the lowest rate = %v (%q), want 0", got, p)
	}
}

func TestHTTPChartDrawsEachQuantileWithinItsFrame(t *testing.T) {
	r := sampleRun(1)
	var b strings.Builder
	if err := r.HTTPChart(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if n := strings.Count(svg, "<path "); n != 3 {
		t.Fatalf("%d lines, want p50, p99 and p99.9", n)
	}
	for _, line := range strings.Split(svg, "\n") {
		d, ok := strings.CutPrefix(line, `<path d="`)
		if !ok {
			continue
		}
		d, _, _ = strings.Cut(d, `"`)
		points := strings.Fields(d)
		if len(points) != len(r.HTTP.Steps) {
			t.Errorf("a line of %d points for %d rates", len(points), len(r.HTTP.Steps))
		}
		for _, p := range points {
			var x, y float64
			if _, err := fmt.Sscanf(p[1:], "%f,%f", &x, &y); err != nil || x < padL || x > httpW-padR || y < headerH || y > httpH-padB {
				t.Errorf("point %q outside the frame (%v)", p, err)
			}
		}
	}
}

func TestHTTPTargetSaysHowFarTheRateHeld(t *testing.T) {
	r := sampleRun(0.5)
	tg := target(t, r, "HTTP load test")
	if tg.Met || tg.Miss != "held up to 1.0k/s only; at 2.0k/s: p99 8.0 ms" {
		t.Errorf("p99 of 8 ms at the target rate: met %t, miss %q", tg.Met, tg.Miss)
	}
	r.HTTP.TargetRate = 3000
	if tg := target(t, r, "HTTP load test"); tg.Met || tg.Miss != "held up to 1.0k/s only; 3.0k/s was not driven" {
		t.Errorf("a target rate not driven: met %t, miss %q", tg.Met, tg.Miss)
	}
}

// TestFloorOfEachLayout checks the floor table and target on a shape that
// shares logs: sluice's store is read against the floor of its own layout
// (the floor script), the plain script against the per-window floor (its
// one key per window), the per-window floor against the shared one; the
// target reads the shared floor even where the per-window floor is higher.
func TestFloorOfEachLayout(t *testing.T) {
	r := sampleRun(1)
	perWindow := Measurement{Shape: "log-9", ShapeTitle: "log-9", Contender: floorPerWindowName, Concurrency: 64, Ops: 1000, ScriptCalls: 1000, ScriptMicros: 32_000}
	plain := &r.Redis[slices.IndexFunc(r.Redis, func(m Measurement) bool { return m.Shape == "log-9" && m.Contender == plainScriptName })]
	plain.ScriptMicros = 40_000
	r.Redis = append(r.Redis, perWindow)
	var b strings.Builder
	r.writeFloor(&b)
	for _, row := range []string{
		"| log-9 | **sluice store** | 26.0 | 20.0 (floor script) | 1.30× |",
		"| log-9 | plain script | 40.0 | 32.0 (floor script, one key per window) | 1.25× |",
		"| log-9 | floor script, one key per window | 32.0 | 20.0 (floor script) | 1.60× |",
		"| log-2 |", // absent: no floor measured
	} {
		if want := !strings.HasPrefix(row, "| log-2"); strings.Contains(b.String(), row) != want {
			t.Errorf("floor table has row %q: %t, want %t\n%s", row, !want, want, b.String())
		}
	}
	if tg := target(t, r, "Redis time per call"); !tg.Met || !strings.Contains(tg.Got, "log-9 1.30× (26.0 vs 20.0 µs)") {
		t.Errorf("the target reads the floor of sluice's layout: met %t, got %q", tg.Met, tg.Got)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench/internal/inproc"
	"github.com/sluicehq/sluice/bench/internal/report"
	"github.com/sluicehq/sluice/bench/internal/suite"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestSmoke runs every shape and every in-process benchmark briefly, as
// `make bench` does (the tool starts its own redis-server through the
// harness), and checks that the outputs are complete and well formed. It
// says nothing of speed: that is read from `make bench`.
func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "docs", "BENCHMARKS.md")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	handWritten := "# Benchmarks\n\nWritten by hand.\n\n" + report.BeginMarker + "\nold\n" + report.EndMarker + "\n\n## Analysis\n\nAlso by hand.\n"
	if err := os.WriteFile(doc, []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{
		"json": filepath.Join(dir, "docs", "bench", "results.json"),
		"svg":  filepath.Join(dir, "docs", "bench", "redis.svg"),
		"http": filepath.Join(dir, "docs", "bench", "http.svg"),
		"md":   filepath.Join(dir, "report.md"),
	}
	conc := []int{1, 4}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{
		"-ops", "200", "-warmup", "20ms", "-c", "1,4", "-benchtime", "1x", "-rounds", "2", "-redis-rounds", "2",
		"-http-rates", "200,400", "-http-warmup", "100ms", "-http-duration", "500ms", "-demo-population", "1000",
		"-json", paths["json"], "-chart", paths["svg"], "-http-chart", paths["http"], "-md", paths["md"], "-doc", doc,
	}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("run = %d; stderr:\n%s", code, stderr.String())
	}

	r, err := report.Load(paths["json"])
	if err != nil {
		t.Fatal(err)
	}
	checkRedis(t, r, conc)
	checkHTTP(t, r)
	checkInProcess(t, r)

	md, err := os.ReadFile(paths["md"])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, stdout.Bytes()) {
		t.Error("the markdown file differs from what was printed")
	}
	checkMarkdown(t, string(md), r, conc)

	svg, err := os.ReadFile(paths["svg"])
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg, len(suite.Shapes()))
	httpSVG, err := os.ReadFile(paths["http"])
	if err != nil {
		t.Fatal(err)
	}
	if rects, lines := countSVG(t, httpSVG); rects != 2 || lines != 3 {
		t.Errorf("the HTTP chart has %d rects and %d lines, want a background, a frame, and p50, p99 and p99.9", rects, lines)
	}

	got, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []string{"Written by hand.", "## Analysis\n\nAlso by hand.", "](bench/redis.svg)", "](bench/http.svg)", "#### Targets"} {
		if !strings.Contains(string(got), keep) {
			t.Errorf("the document lost or lacks %q:\n%s", keep, got)
		}
	}
	if strings.Contains(string(got), "\nold\n") {
		t.Error("the generated block was not replaced")
	}

	// -from renders the same report from the saved run, measuring nothing.
	stdout.Reset()
	if code := run(context.Background(), []string{"-from", paths["json"], "-chart", paths["svg"], "-http-chart", paths["http"], "-md", filepath.Join(dir, "again.md")}, &stdout, io.Discard); code != 0 {
		t.Fatalf("run -from = %d", code)
	}
	if !bytes.Equal(stdout.Bytes(), md) {
		t.Error("-from renders another report than the run that saved it")
	}
}

func checkRedis(t *testing.T, r *report.Run, conc []int) {
	t.Helper()
	want := 0
	for _, s := range suite.Shapes() {
		for _, ct := range s.Contenders {
			// A Limiter (every contender built on one has a twin or is
			// one) counts its store calls, and may make fewer than its
			// decisions (allotments, coalescing): Redis may even see none
			// in a measurement of a few hundred requests.
			limiter := ct.Twin != nil || strings.HasSuffix(ct.Name, suite.NoAllotmentsSuffix)
			for _, c := range conc {
				want++
				m := find(r, s.Name, ct.Name, c)
				if m == nil {
					t.Errorf("%s / %s at c=%d: not measured", s.Name, ct.Name, c)
					continue
				}
				switch {
				case limiter != (m.StoreCalls != nil):
					t.Errorf("%s / %s at c=%d: store calls %v counted; want them counted for a Limiter only", s.Name, ct.Name, c, m.StoreCalls)
				case m.Rounds != 2:
					t.Errorf("%s / %s at c=%d: the median of %d rounds, want 2", s.Name, ct.Name, c, m.Rounds)
				case m.Ops < 200 || m.Allowed+m.Refused+m.Errors != m.Ops:
					t.Errorf("%s / %s at c=%d: %d ops = %d allowed + %d refused + %d errors", s.Name, ct.Name, c, m.Ops, m.Allowed, m.Refused, m.Errors)
				case m.Errors > 0:
					t.Errorf("%s / %s at c=%d: %d errors, first %s", s.Name, ct.Name, c, m.Errors, m.FirstError)
				case s.Hot && m.Refused == 0:
					t.Errorf("%s / %s at c=%d: the hot key was never refused", s.Name, ct.Name, c)
				case !s.Hot && m.Refused > 0:
					t.Errorf("%s / %s at c=%d: %d refusals where no limit is reached", s.Name, ct.Name, c, m.Refused)
				case !(m.P50 > 0 && m.P50 <= m.P99 && m.P99 <= m.P999 && m.P999 <= m.Max):
					t.Errorf("%s / %s at c=%d: latencies p50 %v, p99 %v, p999 %v, max %v out of order", s.Name, ct.Name, c, m.P50, m.P99, m.P999, m.Max)
				case m.PerSecond <= 0 || m.Seconds <= 0:
					t.Errorf("%s / %s at c=%d: %v/s over %vs", s.Name, ct.Name, c, m.PerSecond, m.Seconds)
				case !s.Hot && !limiter && (m.ScriptCalls+m.OtherCalls < m.Ops || m.MicrosPerCall() <= 0):
					t.Errorf("%s / %s at c=%d: Redis counted %d script calls and %d others (%v µs each) for %d decisions", s.Name, ct.Name, c, m.ScriptCalls, m.OtherCalls, m.MicrosPerCall(), m.Ops)
				case m.ClientCPU <= 0 || m.RedisCPU < 0 || (!s.Hot && !limiter && m.RedisCPU == 0):
					t.Errorf("%s / %s at c=%d: CPU client %vµs, Redis %vµs", s.Name, ct.Name, c, m.ClientCPU, m.RedisCPU)
				case !s.Hot && (m.DBKeys == 0 || m.KeyBytes <= 0):
					t.Errorf("%s / %s at c=%d: %d keys of %v bytes", s.Name, ct.Name, c, m.DBKeys, m.KeyBytes)
				}
			}
		}
	}
	if len(r.Redis) != want {
		t.Errorf("%d measurements, want %d", len(r.Redis), want)
	}
	if r.Machine.Redis == "" || r.Machine.CPUs == 0 || r.Machine.LoadBefore == "" {
		t.Errorf("machine not described: %+v", r.Machine)
	}
}

// checkHTTP checks the HTTP load test's steps: every request answered or
// counted as an error, each answer from a decision of nine windows, the
// demo's own count of its decisions equal to the requests sent, and the
// three processes' CPU read.
func checkHTTP(t *testing.T, r *report.Run) {
	t.Helper()
	h := r.HTTP
	if h == nil || len(h.Steps) == 0 {
		t.Fatal("the HTTP load test did not run")
	}
	if h.Population != r.Population || h.Generator == "" || h.TargetRate <= 0 {
		t.Errorf("HTTP run not described: %d clients, generator %q, target rate %v", h.Population, h.Generator, h.TargetRate)
	}
	for _, s := range h.Steps {
		var answers, decisions int64
		for _, n := range s.Codes {
			answers += n
		}
		for _, n := range s.Decisions {
			decisions += n
		}
		switch {
		case s.Requests == 0 || s.OK == 0 || s.OK+s.Errors != s.Requests || answers != s.Requests:
			t.Errorf("HTTP %v/s: %d requests, %d answered 200, %d errors, %d answers by status %v", s.Rate, s.Requests, s.OK, s.Errors, answers, s.Codes)
		case s.Windows != 9:
			t.Errorf("HTTP %v/s: decisions of %d windows, want the nine-window profile's 9", s.Rate, s.Windows)
		case decisions != s.Requests:
			t.Errorf("HTTP %v/s: the demo counted %d decisions (%v) for %d requests", s.Rate, decisions, s.Decisions, s.Requests)
		case !(s.P50 > 0 && s.P50 <= s.P99 && s.P99 <= s.P999 && s.P999 <= s.Max):
			t.Errorf("HTTP %v/s: latencies p50 %v, p99 %v, p999 %v, max %v out of order", s.Rate, s.P50, s.P99, s.P999, s.Max)
		case s.Seconds <= 0 || s.ClientCPU <= 0 || s.DemoCPU < 0 || s.RedisCPU <= 0:
			t.Errorf("HTTP %v/s: %vs, CPU client %vµs, demo %vµs, Redis %vµs", s.Rate, s.Seconds, s.ClientCPU, s.DemoCPU, s.RedisCPU)
		}
	}
}

func checkInProcess(t *testing.T, r *report.Run) {
	t.Helper()
	bms := inproc.Benchmarks()
	if len(r.InProcess) != len(bms) {
		t.Errorf("%d in-process results, want %d", len(r.InProcess), len(bms))
	}
	for _, b := range r.InProcess {
		if b.N < 1 || b.NsPerOp <= 0 {
			t.Errorf("in-process %s / %s: N %d, %v ns/op", b.Shape, b.Contender, b.N, b.NsPerOp)
		}
	}
}

func checkMarkdown(t *testing.T, md string, r *report.Run, conc []int) {
	t.Helper()
	rows := 0
	_, all, _ := strings.Cut(md, "#### Every measurement")
	for _, line := range strings.Split(all, "\n") {
		for _, s := range suite.Shapes() {
			if strings.HasPrefix(line, "| "+s.Name+" | ") {
				rows++
			}
		}
	}
	if rows != len(r.Redis) {
		t.Errorf("the table of every measurement has %d rows, want %d", rows, len(r.Redis))
	}
	targets := r.Targets()
	for _, tg := range targets {
		if !strings.Contains(md, "| "+tg.Name+" | ") {
			t.Errorf("target %q missing from the report", tg.Name)
		}
	}
	if report.NoAllotmentsSuffix != suite.NoAllotmentsSuffix {
		t.Errorf("the report reads twins by %q, the suite names them by %q", report.NoAllotmentsSuffix, suite.NoAllotmentsSuffix)
	}
	for _, want := range []string{"#### Targets", "#### Allotments: the Limiter with and without", "| hot-admit | **sluice Limiter** | 4 | ", "#### Redis time per call against the floor", "#### The client's side", "#### HTTP load test", "#### In process", "#### Redis memory", "#### Every measurement", "![decisions/s and p99"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// checkSVG parses the chart and counts its panels' frames and lines.
func checkSVG(t *testing.T, svg []byte, shapes int) {
	t.Helper()
	rects, paths := countSVG(t, svg)
	if want := 1 + 2*shapes; rects != want {
		t.Errorf("%d rects, want a background and %d panels", rects, 2*shapes)
	}
	lines := 0
	for _, s := range suite.Shapes() {
		lines += 2 * len(s.Contenders)
	}
	if paths != lines {
		t.Errorf("%d lines drawn, want %d (one per contender per panel)", paths, lines)
	}
}

// countSVG parses a chart and counts its rects and paths.
func countSVG(t *testing.T, svg []byte) (rects, paths int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return rects, paths
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "rect":
				rects++
			case "path":
				paths++
			}
		}
	}
}

func find(r *report.Run, shape, contender string, c int) *report.Measurement {
	for i := range r.Redis {
		m := &r.Redis[i]
		if m.Shape == shape && m.Contender == contender && m.Concurrency == c {
			return m
		}
	}
	return nil
}

func TestFlagsRefuseBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-c", "1,0"},
		{"-c", "x"},
		{"-shapes", "log-1,nope"},
		{"extra"},
		{"-rounds", "0"},
		{"-redis-rounds", "0"},
		{"-http-rates", "100,x"},
		{"-http-rates", "0"},
		{"-http-rates", "1.5"},
		{"-http-duration", "0s"},
		{"-contenders", "("},
	} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("run(%q) = %d, want 2 (usage)", args, code)
		}
	}
}

// TestContendersAndProfiles: -allotment-twins adds the Limiter's twin to
// log-2 (hot-admit has its own), -contenders keeps the contenders it
// matches (in both shapes, the Limiter's twin and redis_rate), and
// -cpuprofile and -trace write their files.
func TestContendersAndProfiles(t *testing.T) {
	dir := t.TempDir()
	prof, tr, js := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "trace.out"), filepath.Join(dir, "run.json")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{
		"-shapes", "hot-admit,log-2", "-allotment-twins", "-contenders", "no allotments|^redis_rate$", "-ops", "50", "-warmup", "10ms", "-c", "2",
		"-redis-rounds", "1", "-inproc=false", "-http=false", "-cpuprofile", prof, "-trace", tr, "-json", js,
	}, io.Discard, &stderr)
	if code != 0 {
		t.Fatalf("run = %d; stderr:\n%s", code, stderr.String())
	}
	r, err := report.Load(js)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range r.Redis {
		got = append(got, m.Contender)
	}
	twin := suite.LimiterName + suite.NoAllotmentsSuffix
	if want := []string{twin, "redis_rate", twin, "redis_rate"}; !slices.Equal(got, want) {
		t.Errorf("measured %q, want %q", got, want)
	}
	for _, f := range []string{prof, tr} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, %v; want a file written", f, st, err)
		}
	}
}

// TestHTTPFailureIsReported: a demo that cannot start (a store deadline
// its configuration refuses) fails the command but not the report, which
// says why.
func TestHTTPFailureIsReported(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{
		"-redis-shapes=false", "-inproc=false", "-http-rates", "100", "-http-duration", "100ms", "-http-store-timeout", "1ns",
	}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("run = %d, want 1; stderr:\n%s", code, stderr.String())
	}
	md := stdout.String()
	for _, want := range []string{"**The load test failed**: ", "store_timeout", "| HTTP load test: the demo on Redis, nine windows, open loop | p99 ≤ 5.0 ms | – | not measured |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

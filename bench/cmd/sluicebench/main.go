// Command sluicebench measures sluice side by side with its peers, in one
// run on one machine, and writes the report.
//
// It starts a private redis-server (or uses -redis), then, for every
// request shape (one key, ADR-002's two, nine windows, a hot refused key,
// a hot admitted key, Envoy's API...) and every concurrency, drives each
// contender in a closed loop: sluice's Redis store, app.Limiter end to
// end (with allotments, and beside it the same without where the shape
// pairs them or -allotment-twins asks), go-redis/redis_rate and a plain
// ZSET script of the same shape. It prints decisions/s, p50/p99/p999,
// Redis' own time per call (INFO commandstats), the Limiter's store calls
// and memory, then runs the
// in-process Go benchmarks (the local store beside golang.org/x/time/rate
// and sethvargo/go-limiter), and writes a markdown report, an SVG chart
// and the raw results as JSON. `make bench` runs it with the outputs of
// docs/BENCHMARKS.md:
//
//	go run ./cmd/sluicebench -json ../docs/bench/results.json \
//		-chart ../docs/bench/redis.svg -doc ../docs/BENCHMARKS.md
//
// With -from, it re-renders the report of a saved run without measuring.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/internal/cputime"
	"github.com/sluicehq/sluice/bench/internal/httpload"
	"github.com/sluicehq/sluice/bench/internal/inproc"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/bench/internal/report"
	"github.com/sluicehq/sluice/bench/internal/server"
	"github.com/sluicehq/sluice/bench/internal/suite"
)

func main() {
	testing.Init() // testing.Benchmark reads the testing flags' defaults
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	shapes      []string
	contenders  *regexp.Regexp
	concurrency []int
	warmup      time.Duration
	duration    time.Duration
	ops         int64
	population  int
	demoPop     int
	redisShapes bool
	http        bool
	httpRates   []float64
	httpWarmup  time.Duration
	httpDur     time.Duration
	httpTarget  float64
	httpStore   time.Duration
	redisAddr   string
	goRedisPool int
	maxBatch    int
	twins       bool
	inProcess   bool
	benchtime   string
	rounds      int
	redisRounds int
	jsonPath    string
	chartPath   string
	httpChart   string
	mdPath      string
	docPath     string
	from        string
	command     string
	cpuProfile  string
	tracePath   string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("sluicebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	shapes := fs.String("shapes", "", "comma-separated shapes to run (default all: "+strings.Join(shapeNames(), ",")+")")
	contenders := fs.String("contenders", "", "a regular expression: run only the contenders whose name it matches (default all; e.g. '^sluice RLS$' to profile one)")
	conc := fs.String("c", "1,16,64,256", "comma-separated concurrencies (closed-loop workers)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "warm-up before each measurement")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of each measurement")
	fs.Int64Var(&o.ops, "ops", 0, "requests per measurement instead of -duration (smoke tests)")
	fs.IntVar(&o.population, "population", 1000, "clients the Redis shapes cycle through")
	fs.IntVar(&o.demoPop, "demo-population", suite.DemoPopulation, "clients the demo shape cycles through (its limits are a service's: fewer clients reach them)")
	fs.StringVar(&o.redisAddr, "redis", "", "host:port of a Redis to use instead of starting one (it is flushed!)")
	fs.IntVar(&o.maxBatch, "max-batch", 0, "sluice's redis.Config.MaxBatch: the most requests one script call decides; 0: the store's default, 1: every request alone")
	fs.BoolVar(&o.twins, "allotment-twins", false, "add to every shape the twin of each sluice Limiter contender with allotments off (docs/adr/019), named \"…"+suite.NoAllotmentsSuffix+"\" (the envoy and hot-admit shapes always measure theirs)")
	fs.IntVar(&o.goRedisPool, "goredis-pool", 0, "go-redis pool size for redis_rate; 0: go-redis' default, 10 per CPU")
	fs.BoolVar(&o.redisShapes, "redis-shapes", true, "run the Redis shapes")
	fs.BoolVar(&o.inProcess, "inproc", true, "run the in-process Go benchmarks")
	fs.BoolVar(&o.http, "http", true, "run the HTTP load test (the demo on Redis, built from this tree)")
	rates := fs.String("http-rates", defaultHTTPRates, "comma-separated rates of the HTTP load test, requests/s, driven in rising order until one is not held")
	fs.DurationVar(&o.httpWarmup, "http-warmup", 2*time.Second, "warm-up of each HTTP rate")
	fs.DurationVar(&o.httpDur, "http-duration", 10*time.Second, "measurement of each HTTP rate")
	fs.Float64Var(&o.httpTarget, "http-target-rate", defaultHTTPTarget, "the rate, requests/s, at which the HTTP target wants p99 ≤ 5 ms")
	fs.DurationVar(&o.httpStore, "http-store-timeout", 0, "the demo's store deadline in the HTTP load test; 0: the demo's own (50ms)")
	fs.StringVar(&o.benchtime, "benchtime", "1s", "length of each in-process benchmark, as go test's -benchtime")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of the in-process benchmarks; the median round of each is reported")
	fs.IntVar(&o.redisRounds, "redis-rounds", 3, "rounds of each shape at each concurrency; each contender's median round is reported")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.chartPath, "chart", "", "write the SVG chart to this file")
	fs.StringVar(&o.httpChart, "http-chart", "", "write the HTTP load test's SVG chart to this file (when it ran)")
	fs.StringVar(&o.mdPath, "md", "", "write the markdown report to this file")
	fs.StringVar(&o.docPath, "doc", "", "splice the markdown report into this document, between its sluicebench markers")
	fs.StringVar(&o.from, "from", "", "re-render the report of this saved JSON run instead of measuring")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measurements (this process: the clients, sluice included) to this file, for go tool pprof")
	fs.StringVar(&o.tracePath, "trace", "", "write an execution trace of the measurements to this file, for go tool trace (scheduler latency, blocking)")
	fs.StringVar(&o.command, "command", "", "the command line to print in the report (default: this one)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.concurrency, err = ints(*conc); err != nil {
		return nil, fmt.Errorf("-c: %w", err)
	}
	if o.httpRates, err = floats(*rates); err != nil {
		return nil, fmt.Errorf("-http-rates: %w", err)
	}
	slices.Sort(o.httpRates)
	if o.httpDur <= 0 || o.httpWarmup < 0 {
		return nil, fmt.Errorf("-http-duration %s, -http-warmup %s: want a positive duration and a warm-up of 0 or more", o.httpDur, o.httpWarmup)
	}
	if o.rounds < 1 || o.redisRounds < 1 {
		return nil, fmt.Errorf("-rounds %d, -redis-rounds %d: want at least 1 of each", o.rounds, o.redisRounds)
	}
	if *shapes != "" {
		o.shapes = strings.Split(*shapes, ",")
		for _, s := range o.shapes {
			if !contains(shapeNames(), s) {
				return nil, fmt.Errorf("-shapes: unknown shape %q (want %s)", s, strings.Join(shapeNames(), ", "))
			}
		}
	}
	if *contenders != "" {
		if o.contenders, err = regexp.Compile(*contenders); err != nil {
			return nil, fmt.Errorf("-contenders: %w", err)
		}
	}
	if o.command == "" {
		o.command = "sluicebench " + strings.Join(args, " ")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "sluicebench:", err)
		}
		return 2
	}
	var r *report.Run
	if o.from != "" {
		r, err = report.Load(o.from)
	} else {
		r, err = profiled(o, func() (*report.Run, error) { return measure(ctx, o, stderr) })
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluicebench:", err)
		return 1
	}
	if err := write(r, o, stdout); err != nil {
		fmt.Fprintln(stderr, "sluicebench:", err)
		return 1
	}
	if r.HTTP != nil && r.HTTP.Error != "" {
		fmt.Fprintln(stderr, "sluicebench:", r.HTTP.Error)
		return 1
	}
	for _, m := range r.Redis {
		if m.Errors > 0 {
			fmt.Fprintf(stderr, "sluicebench: %s / %s at c=%d: %d requests failed (first: %s)\n", m.Shape, m.Contender, m.Concurrency, m.Errors, m.FirstError)
			return 1
		}
	}
	return 0
}

// profiled runs f under the CPU profile and the execution trace asked
// for.
func profiled(o *options, f func() (*report.Run, error)) (r *report.Run, err error) {
	for _, p := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{{o.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile}, {o.tracePath, trace.Start, trace.Stop}} {
		if p.path == "" {
			continue
		}
		file, err := os.Create(p.path)
		if err != nil {
			return nil, err
		}
		if err := p.start(file); err != nil {
			file.Close()
			return nil, err
		}
		defer func() {
			p.stop()
			err = errors.Join(err, file.Close())
		}()
	}
	return f()
}

// write renders the run: JSON, chart, markdown to stdout and to the files
// asked for.
func write(r *report.Run, o *options, stdout io.Writer) error {
	if o.jsonPath != "" && o.from == "" {
		if err := writeFile(o.jsonPath, func(w io.Writer) error { return r.Save(o.jsonPath) }); err != nil {
			return err
		}
	}
	if o.chartPath != "" {
		if err := writeFile(o.chartPath, r.Chart); err != nil {
			return err
		}
	}
	httpChart := o.httpChart
	if r.HTTP == nil {
		httpChart = ""
	}
	if httpChart != "" {
		if err := writeFile(httpChart, r.HTTPChart); err != nil {
			return err
		}
	}
	var md strings.Builder
	if err := r.Markdown(&md, chartRef(o.chartPath, o.mdPath, ""), chartRef(httpChart, o.mdPath, "")); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, md.String()); err != nil {
		return err
	}
	if o.mdPath != "" {
		if err := writeFile(o.mdPath, func(w io.Writer) error { _, err := io.WriteString(w, md.String()); return err }); err != nil {
			return err
		}
	}
	if o.docPath != "" {
		var doc strings.Builder
		if err := r.Markdown(&doc, chartRef(o.chartPath, o.docPath, ""), chartRef(httpChart, o.docPath, "")); err != nil {
			return err
		}
		return report.Splice(o.docPath, []byte(doc.String()))
	}
	return nil
}

// chartRef is the chart's path relative to the markdown file at md (or to
// the working directory).
func chartRef(chart, md, fallback string) string {
	if chart == "" {
		return fallback
	}
	base := "."
	if md != "" {
		base = filepath.Dir(md)
	}
	if rel, err := filepath.Rel(base, chart); err == nil {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(chart)
}

// writeFile creates path's directory and writes the file with f.
func writeFile(path string, f func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f(file); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// measure runs every shape against Redis, then the in-process benchmarks.
func measure(ctx context.Context, o *options, log io.Writer) (*report.Run, error) {
	r := &report.Run{
		Date:        time.Now(),
		Command:     o.command,
		Machine:     machine(),
		Warmup:      report.Duration(o.warmup),
		Duration:    report.Duration(o.duration),
		Concurrency: o.concurrency,
		RedisRounds: o.redisRounds,
		Population:  o.population,
		GoRedisPool: fmt.Sprintf("its default pool of 10 connections per CPU (%d)", 10*runtime.GOMAXPROCS(0)),
	}
	if o.goRedisPool > 0 {
		r.GoRedisPool = fmt.Sprintf("a pool of %d connections", o.goRedisPool)
	}
	if o.ops > 0 {
		r.Duration, r.Ops = 0, o.ops
		r.Notes = append(r.Notes, fmt.Sprintf("Smoke run: %d requests per measurement, too few to read speed from.", o.ops))
	}
	if err := measureRedis(ctx, o, r, log); err != nil {
		return nil, err
	}
	if !o.redisShapes && !o.http && o.inProcess {
		r.Notes = append(r.Notes, "Only the in-process benchmarks ran.")
	}
	if o.inProcess {
		if err := measureInProcess(o, r, log); err != nil {
			return nil, err
		}
	}
	r.Machine.LoadAfter = loadAvg()
	return r, nil
}

// measureRedis runs the Redis shapes and the HTTP load test, as asked, on
// one Redis.
func measureRedis(ctx context.Context, o *options, r *report.Run, log io.Writer) error {
	if !o.redisShapes && !o.http {
		return nil
	}
	pop, err := suite.NewPopulation(o.population)
	if err != nil {
		return err
	}
	var srv *server.Server
	if o.redisAddr != "" {
		srv = server.Attach(o.redisAddr)
	} else if srv, err = server.Start(); err != nil {
		return err
	}
	defer srv.Close()
	if r.Machine.Redis, err = srv.Version(ctx); err != nil {
		return err
	}
	root, err := suite.ModuleRoot(".")
	if err != nil {
		return err
	}
	demoConfig, err := os.ReadFile(filepath.Join(root, suite.DemoConfigPath))
	if err != nil {
		return err
	}
	pops := map[int]*suite.Population{o.population: pop}
	shapes := suite.Shapes()
	if o.twins {
		shapes = suite.WithTwins(shapes)
	}
	if o.contenders != nil {
		for i := range shapes {
			shapes[i].Contenders = slices.DeleteFunc(slices.Clone(shapes[i].Contenders), func(ct suite.Contender) bool { return !o.contenders.MatchString(ct.Name) })
		}
	}
	for _, shape := range shapes {
		if !o.redisShapes || len(o.shapes) > 0 && !contains(o.shapes, shape.Name) {
			continue
		}
		n := o.population
		if shape.Population > 0 {
			n = o.demoPop
		}
		if pops[n] == nil {
			if pops[n], err = suite.NewPopulation(n); err != nil {
				return err
			}
		}
		env := &suite.Env{Addr: srv.Addr(), Population: pops[n], GoRedisPool: o.goRedisPool, DemoConfig: demoConfig, MaxBatch: o.maxBatch}
		for i, c := range o.concurrency {
			ms, err := measureRounds(ctx, srv, env, o, shape, c, i, log)
			if err != nil {
				return err
			}
			r.Redis = append(r.Redis, ms...)
		}
	}
	if o.http {
		// A failed load test does not lose the shapes measured before it:
		// the report says why it failed, and the command exits 1.
		r.HTTP, err = httpload.Run(ctx, httpload.Config{
			Root: root, Server: srv, Population: pop, Rates: o.httpRates,
			Warmup: o.httpWarmup, Duration: o.httpDur, TargetRate: o.httpTarget, StoreTimeout: o.httpStore, Log: log,
		})
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if r.HTTP == nil {
				r.HTTP = &report.HTTPRun{}
			}
			r.HTTP.Error = err.Error()
		}
	}
	return nil
}

// measureRounds measures every contender of shape at concurrency c,
// o.redisRounds times, back to back and in alternating order (so that a
// machine growing busier favours no one), and keeps each contender's
// median round by decisions/s. turn numbers the concurrency, to alternate
// across them too.
func measureRounds(ctx context.Context, srv *server.Server, env *suite.Env, o *options, shape suite.Shape, c, turn int, log io.Writer) ([]report.Measurement, error) {
	rounds := make(map[string][]report.Measurement)
	for round := range o.redisRounds {
		order := shape.Contenders
		if (turn+round)%2 == 1 {
			order = reversed(order)
		}
		for _, ct := range order {
			m, err := measureOne(ctx, srv, env, o, shape, ct, c)
			if err != nil {
				return nil, fmt.Errorf("%s / %s at c=%d: %w", shape.Name, ct.Name, c, err)
			}
			fmt.Fprintf(log, "%-7s %-15s c=%-4d %9.0f/s  p50 %8.0fµs  p99 %8.0fµs  refused %6.2f%%  redis %6.1fµs/call  cpu/decision client %5.1fµs redis %5.1fµs\n",
				m.Shape, m.Contender, c, m.PerSecond, m.P50, m.P99, 100*m.RefusedShare(), m.MicrosPerCall(), m.ClientCPUPerDecision(), m.RedisCPUPerDecision())
			rounds[ct.Name] = append(rounds[ct.Name], *m)
		}
	}
	var out []report.Measurement
	for _, ct := range shape.Contenders {
		out = append(out, median(rounds[ct.Name]))
	}
	return out, nil
}

// median returns the median round by decisions/s among the rounds that
// saw no error, with the number of rounds and of failed rounds; when every
// round failed, the first, errors and all.
func median(ms []report.Measurement) report.Measurement {
	var clean []report.Measurement
	for _, m := range ms {
		if m.Errors == 0 {
			clean = append(clean, m)
		}
	}
	if len(clean) == 0 {
		m := ms[0]
		m.Rounds, m.FailedRounds = len(ms), len(ms)
		return m
	}
	slices.SortFunc(clean, func(a, b report.Measurement) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	m := clean[len(clean)/2]
	m.Rounds, m.FailedRounds = len(ms), len(ms)-len(clean)
	if m.FailedRounds > 0 {
		for _, x := range ms {
			if x.Errors > 0 {
				m.FirstError = fmt.Sprintf("round set aside after %d errors: %s", x.Errors, x.FirstError)
				break
			}
		}
	}
	return m
}

// measureOne measures contender ct on shape at concurrency c, from an
// empty server and with a fresh client.
func measureOne(ctx context.Context, srv *server.Server, env *suite.Env, o *options, shape suite.Shape, ct suite.Contender, c int) (*report.Measurement, error) {
	if err := srv.Flush(ctx); err != nil {
		return nil, err
	}
	empty, err := srv.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	env.StoreCalls = &suite.StoreCalls{}
	worker, closeClient, err := ct.Open(ctx, env, c)
	if err != nil {
		return nil, err
	}
	// Processor time of this process (the clients) and of Redis over the
	// measured period: on a machine they share, what one decision costs
	// each side.
	// The Limiter's store calls likewise (allotments taken and given
	// back, decisions at the store), as its Recorder counts them.
	var selfStart, selfEnd, redisStart, redisEnd time.Duration
	var storeCalls map[string]int64
	var storeMicros map[string]float64
	res, err := load.Run(ctx, load.Config{
		Concurrency: c, Warmup: o.warmup, Duration: o.duration, Ops: o.ops,
		BetweenPhases: func(ctx context.Context) (err error) {
			if err = srv.ResetStats(ctx); err == nil {
				redisStart, err = srv.CPU(ctx)
			}
			env.StoreCalls.Reset()
			selfStart = cputime.Self()
			return err
		},
		AtEnd: func(ctx context.Context) (err error) {
			selfEnd = cputime.Self()
			storeCalls, storeMicros = env.StoreCalls.Counts()
			redisEnd, err = srv.CPU(ctx)
			return err
		},
	}, worker)
	// The client goes first, so that its connections' buffers leave
	// used_memory; the keys outlive it by their TTLs, a second or more.
	err = errors.Join(err, closeClient())
	var st server.Stats
	var keyBytes float64
	if err == nil {
		if st, err = srv.Snapshot(ctx); err == nil {
			keyBytes, _, err = srv.KeyBytes(ctx, 32)
		}
	}
	if err != nil {
		return nil, err
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return &report.Measurement{
		Shape: shape.Name, ShapeTitle: shape.Title, Keys: shape.Keys, Windows: shape.Windows, Hot: shape.Hot,
		Contender: ct.Name, Sluice: ct.Sluice, Concurrency: c, Population: len(env.Population.Clients),
		Ops: res.Ops, Allowed: res.Allowed, Refused: res.Refused, Errors: res.Errors, FirstError: res.FirstError,
		Seconds: res.Elapsed.Seconds(), PerSecond: res.PerSecond(),
		P50: us(res.Latency.Quantile(0.50)), P99: us(res.Latency.Quantile(0.99)),
		P999: us(res.Latency.Quantile(0.999)), Max: us(res.Latency.Max()),
		ScriptCalls: st.ScriptCalls, ScriptMicros: st.ScriptMicros, OtherCalls: st.Calls, OtherMicros: st.Micros,
		DBKeys: st.Keys, UsedMemory: max(st.UsedMemory-empty.UsedMemory, 0), KeyBytes: keyBytes,
		ClientCPU: us(selfEnd - selfStart), RedisCPU: us(redisEnd - redisStart), StoreCalls: storeCalls, StoreMicros: storeMicros,
	}, nil
}

// measureInProcess runs the Go benchmarks through testing.Benchmark,
// o.rounds times each, round-robin, and keeps the median round of each
// (by ns/op): other work on the machine slows some rounds down, and the
// rounds of one benchmark are spread over the whole pass.
func measureInProcess(o *options, r *report.Run, log io.Writer) error {
	if err := flag.CommandLine.Set("test.benchtime", o.benchtime); err != nil {
		return fmt.Errorf("-benchtime: %w", err)
	}
	bms := inproc.Benchmarks()
	rounds := make([][]report.InProcess, len(bms))
	for round := range o.rounds {
		for i, bm := range bms {
			res := testing.Benchmark(bm.F)
			if res.N == 0 {
				return fmt.Errorf("in-process benchmark %s failed", bm.Name())
			}
			ip := report.InProcess{
				Shape: bm.Shape, Contender: bm.Contender, Sluice: bm.Sluice, Parallel: bm.Parallel, N: res.N,
				NsPerOp:     float64(res.T.Nanoseconds()) / float64(res.N),
				AllocsPerOp: res.AllocsPerOp(), BytesPerOp: res.AllocedBytesPerOp(),
			}
			fmt.Fprintf(log, "round %d  %-45s %10.0f ns/op %4d allocs/op\n", round+1, bm.Name(), ip.NsPerOp, ip.AllocsPerOp)
			rounds[i] = append(rounds[i], ip)
		}
	}
	for _, rs := range rounds {
		slices.SortFunc(rs, func(a, b report.InProcess) int { return cmp.Compare(a.NsPerOp, b.NsPerOp) })
		r.InProcess = append(r.InProcess, rs[len(rs)/2])
	}
	r.InProcessRounds = o.rounds
	if !hasShape(r.InProcess, inproc.ShapeHTTP) {
		r.Notes = append(r.Notes, "The HTTP middleware (adapters/httpmw) is not on main yet: its target is not measured.")
	}
	return nil
}

func hasShape(bs []report.InProcess, shape string) bool {
	for _, b := range bs {
		if b.Shape == shape {
			return true
		}
	}
	return false
}

// machine describes this machine, as far as the run can tell.
func machine() report.Machine {
	m := report.Machine{
		CPU: cpuModel(), CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(), LoadBefore: loadAvg(),
	}
	return m
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func shapeNames() []string {
	var out []string
	for _, s := range suite.Shapes() {
		out = append(out, s.Name)
	}
	return out
}

// The HTTP load test's default rates and target rate, requests/s.
const (
	defaultHTTPRates  = "500,1000,2000,3000,4000,5000,6000,8000,10000,12000,15000,20000"
	defaultHTTPTarget = 1000
)

func floats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || n < 1 || n != float64(int64(n)) {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// Package inproc holds the in-process benchmarks: sluice's local store
// beside golang.org/x/time/rate and sethvargo/go-limiter on one key of a
// population of 10 000, the local store on the nine windows of a fully
// identified request (nine GCRA keys, or nine sliding-log windows on five
// shared logs, docs/adr/015), and a whole request through the HTTP
// middleware on the local store. They are testing.B functions, run by `go test
// -bench` (inproc_test.go) and by sluicebench through testing.Benchmark, so
// that the report's numbers come from the same run as its Redis ones.
//
// Every contender reads the wall clock per decision (sluice's store takes
// now as an argument; the others read it themselves), and no limit is
// ever reached: each benchmark measures the admission path.
package inproc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/bench/internal/suite"
	"github.com/sluicehq/sluice/domain"
)

// Population sizes: the one-key benchmarks spread over OneKeyClients keys,
// the nine-window ones over NineKeyClients clients (nine GCRA keys, or
// five sliding logs, each).
const (
	OneKeyClients  = 10_000
	NineKeyClients = 1_000
)

// Windows no benchmark reaches: a million a second per key. The sliding
// logs' periods are short so that a log stays small at millions of
// decisions a second; logSustained is the longer window a principal's
// log serves beside log in the nine-window shape (a window of its own:
// one log may not serve the same window twice).
var (
	gcra         = domain.Window{Name: domain.WindowBurst, Limit: 1_000_000, Period: time.Second, Algorithm: domain.GCRA}
	log          = domain.Window{Name: domain.WindowBurst, Limit: 100_000, Period: 100 * time.Millisecond, Algorithm: domain.SlidingLog}
	logSustained = domain.Window{Name: domain.WindowSustained, Limit: 100_000, Period: 200 * time.Millisecond, Algorithm: domain.SlidingLog}
)

// Benchmark is one in-process benchmark.
type Benchmark struct {
	// Shape is "1 key of 10k", "9 windows" or "HTTP middleware";
	// Contender names the library.
	Shape, Contender string
	// Sluice tells sluice's own contenders from its peers.
	Sluice bool
	// Parallel runs it from GOMAXPROCS goroutines (b.RunParallel) rather
	// than one.
	Parallel bool
	F        func(b *testing.B)
}

// Name is the benchmark's sub-test name, e.g. "1key/x-time-rate/serial".
func (bm Benchmark) Name() string {
	mode := "serial"
	if bm.Parallel {
		mode = "parallel"
	}
	shape := map[string]string{ShapeOne: "1key", ShapeNine: "9windows", ShapeHTTP: "http"}[bm.Shape]
	return fmt.Sprintf("%s/%s/%s", shape, slug(bm.Contender), mode)
}

// slug keeps letters and digits, lower-cased, and joins the rest with "-":
// "sluice local (GCRA)" is "sluice-local-gcra".
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// Shapes of the in-process benchmarks.
const (
	ShapeOne = "1 key of 10k"
	// ShapeNine is a fully identified request: nine GCRA keys, or nine
	// sliding-log windows on five keys (each principal's burst and
	// sustained windows sharing one log, docs/adr/015).
	ShapeNine = "9 windows"
	// ShapeHTTP is a request through the HTTP middleware.
	ShapeHTTP = "HTTP middleware"
	// HTTPOtel is the middleware with the production Recorder, the
	// contender of the HTTP target.
	HTTPOtel = "sluice httpmw (otel Recorder)"
)

// Benchmarks returns every in-process benchmark, in report order.
func Benchmarks() []Benchmark {
	type entry struct {
		shape, contender string
		sluice           bool
		op               func(b *testing.B) func(i int)
	}
	entries := []entry{
		{ShapeOne, "sluice local (GCRA)", true, localOp(1, gcra)},
		{ShapeOne, "sluice local (sliding log)", true, localOp(1, log)},
		{ShapeOne, "go-limiter", false, goLimiterOp},
		{ShapeOne, "x/time/rate", false, timeRateOp},
		{ShapeNine, "sluice local (GCRA)", true, localOp(9, gcra)},
		{ShapeNine, "sluice local (sliding log)", true, localOp(9, log, logSustained)},
		{ShapeHTTP, HTTPOtel, true, httpOp(true)},
		{ShapeHTTP, "sluice httpmw (discarding Recorder)", true, httpOp(false)},
	}
	var out []Benchmark
	for _, parallel := range []bool{false, true} {
		for _, e := range entries {
			out = append(out, Benchmark{Shape: e.shape, Contender: e.contender, Sluice: e.sluice, Parallel: parallel,
				F: func(b *testing.B) { run(b, parallel, e.op(b)) }})
		}
	}
	return out
}

// run calls op with successive indexes, from one goroutine or from
// RunParallel's, each starting at its own offset in the population.
func run(b *testing.B, parallel bool, op func(i int)) {
	b.ReportAllocs()
	if !parallel {
		i := 0
		for b.Loop() {
			op(i)
			i++
		}
		return
	}
	var g atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(g.Add(1)) * 7919 // spread the goroutines over the keys
		for pb.Next() {
			op(i)
			i++
		}
	})
}

var (
	popOnce sync.Once
	pop     *suite.Population
	popErr  error
)

// population returns the clients, built once per process: OneKeyClients of
// them (the nine-key benchmarks use the first NineKeyClients).
func population(b *testing.B) *suite.Population {
	popOnce.Do(func() { pop, popErr = suite.NewPopulation(OneKeyClients) })
	if popErr != nil {
		b.Fatal(popErr)
	}
	return pop
}

// localOp is sluice's local store: one Evaluate of the client's key under
// w, or of its nine windows: under w alone, nine keys, or with a second
// (longer) sliding-log window, nine windows in the shared layout of
// docs/adr/015 (Identity.NineShared), w the burst and the second the
// sustained window of each principal and the tenant-global window.
func localOp(keys int, w ...domain.Window) func(b *testing.B) func(i int) {
	return func(b *testing.B) func(i int) {
		st, err := local.New(local.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		p := population(b)
		n := OneKeyClients
		if keys > 1 {
			n = NineKeyClients
		}
		sets := make([][]domain.Limit, n)
		for i := range sets {
			sets[i] = nineLimits(&p.Clients[i], keys, w...)
		}
		ctx := context.Background()
		return func(i int) {
			r, err := st.Evaluate(ctx, time.Now(), sets[i%n])
			if err != nil || !r.Allowed {
				b.Fatalf("Evaluate: allowed %t, %v", r.Allowed, err)
			}
		}
	}
}

// nineLimits is localOp's request for one client (see localOp).
func nineLimits(id *suite.Identity, keys int, w ...domain.Window) []domain.Limit {
	if keys == 1 {
		return []domain.Limit{{Key: id.One[0], Window: w[0], Cost: 1}}
	}
	ks, ws := id.Nine, suite.NineWindows(w[0], w[0])
	if len(w) > 1 {
		ks, ws = id.NineShared, suite.NineWindows(w[0], w[1])
	}
	out := make([]domain.Limit, len(ks))
	for j, k := range ks {
		out[j] = domain.Limit{Key: k, Window: ws[j], Cost: 1}
	}
	return out
}

// goLimiterOp is sethvargo/go-limiter's memorystore: Take on the client's
// key, a million tokens a second.
func goLimiterOp(b *testing.B) func(i int) {
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(gcra.Limit), Interval: gcra.Period})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close(context.Background()) })
	keys := oneKeys(b)
	ctx := context.Background()
	var _ limiter.Store = st
	return func(i int) {
		_, _, _, ok, err := st.Take(ctx, keys[i%len(keys)])
		if err != nil || !ok {
			b.Fatalf("Take: ok %t, %v", ok, err)
		}
	}
}

// timeRateOp is golang.org/x/time/rate, which limits one thing: one
// rate.Limiter per key in a sync.Map, as a service keeps them, a million
// a second each.
func timeRateOp(b *testing.B) func(i int) {
	var m sync.Map
	keys := oneKeys(b)
	return func(i int) {
		k := keys[i%len(keys)]
		v, ok := m.Load(k)
		if !ok {
			v, _ = m.LoadOrStore(k, rate.NewLimiter(rate.Limit(gcra.Limit), int(gcra.Limit)))
		}
		if !v.(*rate.Limiter).Allow() {
			b.Fatal("x/time/rate refused")
		}
	}
}

// oneKeys returns the one-key shape's keys.
func oneKeys(b *testing.B) []string {
	p := population(b)
	keys := make([]string, OneKeyClients)
	for i := range keys {
		keys[i] = p.Clients[i].One[0]
	}
	return keys
}

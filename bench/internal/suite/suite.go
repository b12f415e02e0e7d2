// Package suite is what a benchmark run measures: the request shapes
// sluice serves (one key, ADR-002's two, the nine windows of a fully
// identified request, a hot key that is refused, a hot key far from its
// limit, Envoy's ShouldRateLimit), and for each the contenders that serve
// it: sluice's Redis store alone, the whole app.Limiter on it (with
// allotments, docs/adr/019, and where a shape pairs them without),
// go-redis/redis_rate, a plain ZSET script of the same shape on the same
// client sluice uses, and for Envoy's API envoyproxy/ratelimit's fixed
// windows.
//
// Every contender gets a fresh client per measurement, configured as a
// service would embed it (see Env), and every store call the same 2 s
// deadline, so that a slow answer shows in the latencies rather than as
// a failure or a degraded decision.
package suite

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
)

// callTimeout is every contender's deadline for one call.
const callTimeout = 2 * time.Second

// Env is what contenders connect to.
type Env struct {
	// Addr is the Redis server's host:port.
	Addr string
	// Population is the clients the workers cycle through.
	Population *Population
	// GoRedisPool is go-redis' connection pool size for redis_rate; 0
	// means go-redis' default, 10 connections per CPU (one per worker was
	// no faster on two cores, within the noise). sluice and the plain
	// script share rueidis' defaults: a few pipelined connections, however
	// many workers.
	GoRedisPool int
	// DemoConfig is the demo's configuration file (DemoConfigPath), which
	// the demo shape reads its profile from.
	DemoConfig []byte
	// MaxBatch is sluice's redis.Config.MaxBatch (0: its default; 1:
	// every request in a call of its own).
	MaxBatch int
	// StoreCalls, when set, counts the store calls of the Limiters the
	// contenders build (the bare stores and the peers have no Recorder).
	StoreCalls *StoreCalls
}

// Contender is one implementation of a shape.
type Contender struct {
	// Name is how tables and charts name it: "sluice store",
	// "sluice Limiter", "redis_rate", "plain script"...
	Name string
	// Sluice tells sluice's own contenders from its peers.
	Sluice bool
	// Open connects a fresh client for one measurement at concurrency c
	// and returns the workers' requests and what closes the client.
	Open func(ctx context.Context, env *Env, c int) (load.Worker, func() error, error)
	// Twin, for a contender whose Limiter takes allotments (docs/adr/019),
	// is the same contender with allotments off, named with
	// NoAllotmentsSuffix; nil for the others. WithTwins adds the twins a
	// shape does not already measure.
	Twin *Contender
}

// WithTwins returns shapes with, after each contender that has a Twin,
// that twin, unless the shape already measures it: every Limiter then
// runs with allotments and without, side by side in one run.
func WithTwins(shapes []Shape) []Shape {
	out := make([]Shape, len(shapes))
	for i, s := range shapes {
		out[i] = s
		out[i].Contenders = nil
		for _, ct := range s.Contenders {
			out[i].Contenders = append(out[i].Contenders, ct)
			if ct.Twin != nil && !slices.ContainsFunc(s.Contenders, func(o Contender) bool { return o.Name == ct.Twin.Name }) {
				out[i].Contenders = append(out[i].Contenders, *ct.Twin)
			}
		}
	}
	return out
}

// Shape is one request shape and its contenders. redis_rate checks one
// key whatever the shape: where a shape has more, it stands as the
// single-key reference the targets compare with, measured back to back
// with the others rather than in another shape's turn.
type Shape struct {
	// Name is short, for flags and files: "gcra-1", "log-9", "hot"...
	Name string
	// Title describes the shape in a table.
	Title string
	// Keys is the number of keys one decision of sluice's store checks,
	// and Windows the number of windows it decides: more windows than
	// keys where sliding-log windows share a log (docs/adr/015).
	Keys, Windows int
	// Hot marks the hot-key shape, the one whose requests are refused.
	Hot bool
	// Population, when positive, is the number of clients this shape
	// cycles through instead of the run's (see DemoPopulation; sluicebench's
	// -demo-population sets another).
	Population int
	Contenders []Contender
}

// Shapes returns every shape, in report order. The floor scripts come
// last in each: the ratios of the summary are to a shape's first peer.
//
// sluice's store and the floor script send each sliding-log shape in the
// shared layout of docs/adr/015 (a principal's burst and sustained windows
// on one log, named by the longer period's key, as the Limiter names it);
// the plain script keeps one key per window, as a service writes it, and
// GCRA windows never share a key. The Limiter, and so the demo shape,
// sends whatever layout the app's configuration defaults to.
func Shapes() []Shape {
	one := perClient(func(id *Identity) []string { return id.One }, burstLog)
	oneGCRA := perClient(func(id *Identity) []string { return id.One }, burstGCRA)
	dual := perClient(func(id *Identity) []string { return id.Dual }, burstLog)
	dualGCRA := perClient(func(id *Identity) []string { return id.Dual }, burstGCRA)
	nine := perClient(func(id *Identity) []string { return id.Nine }, NineWindows(burstLog, sustainedLog)...)
	nineShared := perClient(func(id *Identity) []string { return id.NineShared }, NineWindows(burstLog, sustainedLog)...)
	nineGCRA := perClient(func(id *Identity) []string { return id.Nine }, NineWindows(burstGCRA, sustainedGCR)...)
	large := perClient(func(id *Identity) []string { return id.BigTenant }, largeWindows()...)
	largeShared := perClient(func(id *Identity) []string { return id.BigTenantShared }, largeWindows()...)
	hot := func(env *Env) ([][]domain.Limit, error) {
		return [][]domain.Limit{limits(env.Population.Hot.One, hotWindow)}, nil
	}
	demoConfig := func(env *Env) (app.Config, error) { return DemoConfig(env.DemoConfig) }
	demo := limiterLimits(demoConfig, demoRequest)
	global := limiterLimits(benchConfig, globalRequest)
	globalLimiter := sluiceLimiter(benchConfig, globalRequest, false)
	rls := sluiceRLS("sluice RLS", "sliding_log")
	return []Shape{
		{Name: "gcra-1", Title: "1 key, GCRA", Keys: 1, Windows: 1, Contenders: []Contender{
			sluiceStore(oneGCRA), redisRate(oneGCRA), floorScript(oneGCRA, true),
		}},
		{Name: "log-1", Title: "1 key, sliding log", Keys: 1, Windows: 1, Contenders: []Contender{
			sluiceStore(one), plainScript(one), redisRate(oneGCRA), floorScript(one, true),
		}},
		{Name: "hot", Title: "1 hot key, GCRA, > 99 % refused", Keys: 1, Windows: 1, Hot: true, Contenders: []Contender{
			sluiceLimiter(benchConfig, hotRequest, true), sluiceStore(hot), redisRate(hot), floorScript(hot, false),
		}},
		// Allotments (docs/adr/019) against the store call each request
		// would make: the Limiter with them and without, side by side.
		{Name: "hot-admit", Title: "1 hot tenant-global key, GCRA, far from its limit (all admitted)", Keys: 1, Windows: 1, Contenders: []Contender{
			globalLimiter, *globalLimiter.Twin, sluiceStore(global), redisRate(global),
		}},
		{Name: "log-2", Title: "2 keys, sliding log (AllowDual)", Keys: 2, Windows: 2, Contenders: []Contender{
			sluiceLimiter(benchConfig, dualRequest, false), sluiceStore(dual), plainScript(dual), redisRate(oneGCRA), floorScript(dual, true),
		}},
		{Name: "gcra-2", Title: "2 keys, GCRA", Keys: 2, Windows: 2, Contenders: []Contender{
			sluiceStore(dualGCRA), plainScript(dual), redisRate(oneGCRA), floorScript(dualGCRA, true),
		}},
		{Name: "log-9", Title: "9 windows on 5 keys, sliding log (shared logs)", Keys: 5, Windows: 9, Contenders: []Contender{
			sluiceLimiter(benchConfig, nineRequest, false), sluiceStore(nineShared), plainScript(nine), floorScript(nineShared, true), floorPerWindow(nine),
		}},
		{Name: "gcra-9", Title: "9 keys, GCRA", Keys: 9, Windows: 9, Contenders: []Contender{
			sluiceStore(nineGCRA), plainScript(nine), redisRate(oneGCRA), floorScript(nineGCRA, true),
		}},
		{Name: "log-9-large", Title: "9 windows on 5 keys, sliding log above the compact bound (ZSETs, shared logs), one big tenant", Keys: 5, Windows: 9, Contenders: []Contender{
			sluiceStore(largeShared), plainScript(large), floorScript(largeShared, true), floorPerWindow(large),
		}},
		{Name: "envoy", Title: "Envoy ShouldRateLimit, 2 descriptors (tenant, user)", Keys: 2, Windows: 2, Contenders: []Contender{
			rls, *rls.Twin, sluiceRLS("sluice RLS, GCRA", "gcra"), fixedWindowRLS(),
		}},
		// The demo's keys are the Limiter's: 5 in the shared layout (the
		// tenant's two sliding logs on one key), 6 in the per-window one.
		{Name: "demo", Title: "the demo's search profile (6 windows, both algorithms)", Keys: 5, Windows: 6, Population: DemoPopulation, Contenders: []Contender{
			sluiceLimiter(demoConfig, demoRequest, false), sluiceStore(demo), plainScript(perWindowSets(demo)), floorScript(demo, true), floorPerWindow(demo),
		}},
	}
}

// keyset builds one request's limits per client.
type keyset func(env *Env) ([][]domain.Limit, error)

// perClient is the keyset of the keys pick chooses, under windows (see
// limits).
func perClient(pick func(*Identity) []string, windows ...domain.Window) keyset {
	return func(env *Env) ([][]domain.Limit, error) {
		p := env.Population
		out := make([][]domain.Limit, len(p.Clients))
		for i := range p.Clients {
			out[i] = limits(pick(&p.Clients[i]), windows...)
		}
		return out, nil
	}
}

// NineWindows are the windows of a fully identified request, in
// Identity.Nine's (and NineShared's) order: burst and sustained per
// dimension, then the tenant-global sustained window.
func NineWindows(burst, sustained domain.Window) []domain.Window {
	return []domain.Window{burst, sustained, burst, sustained, burst, sustained, burst, sustained, sustained}
}

// largeWindows are the windows of the large-log shape, in
// Identity.BigTenant's order: every limit above the compact bound, so
// that every key is a ZSET. The client's own keys (ip, user, api key) see
// a few units a second; the big tenant's three take every decision, so
// their logs hold one or two seconds' decisions (tens of thousands of
// members) and, past the first two seconds of a measurement, lose about
// one unit per call. Their limits (the largest a
// sliding log may have) are not reached below 50 000 decisions a second.
func largeWindows() []domain.Window {
	burst := domain.Window{Name: domain.WindowBurst, Limit: 2_000, Period: time.Second, Algorithm: domain.SlidingLog}
	sustained := domain.Window{Name: domain.WindowSustained, Limit: 20_000, Period: 10 * time.Second, Algorithm: domain.SlidingLog}
	tenantBurst := domain.Window{Name: domain.WindowBurst, Limit: domain.MaxSlidingLogLimit, Period: time.Second, Algorithm: domain.SlidingLog}
	tenantSustained := domain.Window{Name: domain.WindowSustained, Limit: domain.MaxSlidingLogLimit, Period: 2 * time.Second, Algorithm: domain.SlidingLog}
	return []domain.Window{burst, sustained, burst, sustained, burst, sustained, tenantBurst, tenantSustained, tenantSustained}
}

// perWindowSets is sets in the per-window layout (perWindow).
func perWindowSets(sets keyset) keyset {
	return func(env *Env) ([][]domain.Limit, error) {
		all, err := sets(env)
		if err != nil {
			return nil, err
		}
		out := make([][]domain.Limit, len(all))
		for i, set := range all {
			out[i] = perWindow(set)
		}
		return out, nil
	}
}

// perWindow returns a copy of set in which every window that shares a
// log with another (docs/adr/015) has a key of its own, the one the
// per-window layout names it by: the shared key with its last part (the
// window name of domain.KeyParts) replaced by the window's own name. A
// request in which no key is shared comes back as it was.
func perWindow(set []domain.Limit) []domain.Limit {
	out := slices.Clone(set)
	for i := range set {
		shared := false
		for j := range set {
			shared = shared || (j != i && set[j].Key == set[i].Key)
		}
		if k := set[i].Key; shared {
			out[i].Key = k[:strings.LastIndexByte(k, ':')+1] + set[i].Window.Name
		}
	}
	return out
}

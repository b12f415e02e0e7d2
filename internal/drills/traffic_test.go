package drills

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// flow is one kind of request the traffic sends: a route and the
// identities it carries, varied per worker and per request.
type flow struct {
	name   string
	family domain.RouteFamily
	// request builds the i-th request of worker w.
	request func(w, i int) app.Request
}

// Identities of the traffic. The raw forms are deliberately easy to spot
// (upper case, e-mail, dotted tenant, documentation ip ranges), so that a
// scan finds them if they leak anywhere.
func rawUser(n int) string   { return fmt.Sprintf("Drill.User%02d@Example.COM", n) }
func rawTenant(n int) string { return fmt.Sprintf("Tenant.Drill-%02d", n) }
func rawIP(n int) netip.Addr {
	if n%2 == 0 {
		return netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + n)})
	}
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::7", 0x100+n))
}

// Sizes of the identity pools.
const (
	users   = 48
	tenants = 4
	clients = 16 // anonymous ips
)

// standardFlows is the drills' mix: authenticated and anonymous reads,
// anonymous logins, authenticated exports.
func standardFlows() []flow {
	return []flow{
		{name: "read", family: domain.FamilyRead, request: func(w, i int) app.Request {
			u := (w + i) % users
			return app.Request{Route: routeRead, ClientIP: rawIP(u), User: rawUser(u), Tenant: rawTenant(u % tenants)}
		}},
		{name: "anonymous read", family: domain.FamilyRead, request: func(w, i int) app.Request {
			return app.Request{Route: routeRead, ClientIP: rawIP(users + (w+i)%clients)}
		}},
		{name: "login", family: domain.FamilyAuth, request: func(w, i int) app.Request {
			return app.Request{Route: routeLogin, ClientIP: rawIP(users + (w*3+i)%clients)}
		}},
		ledgerFlow,
		{name: "export", family: domain.FamilyCostly, request: func(w, i int) app.Request {
			u := (w*7 + i) % users
			return app.Request{Route: routeExport, ClientIP: rawIP(u), User: rawUser(u), Tenant: rawTenant(u % tenants), APIKey: "Key-" + rawUser(u)}
		}},
	}
}

// ledgerUser is the one user of the ledger flow, whose count in Redis the
// drills compare with what the traffic was told.
const ledgerUser = "Ledger.Keeper@Example.COM"

// ledgerFlow counts on the ledger profile, whose window the traffic never
// fills: every request that reached Redis adds one unit there.
var ledgerFlow = flow{name: "ledger", family: domain.FamilyCostly, request: func(w, i int) app.Request {
	return app.Request{Route: routeLedger, ClientIP: rawIP(w % clients), User: ledgerUser}
}}

// readClient is who a read's degraded cap counts: the user, else the ip.
func readClient(r app.Request) string {
	if r.User != "" {
		return "user " + r.User
	}
	return "ip " + r.ClientIP.String()
}

// outcomeKey is one kind of answer the traffic saw.
type outcomeKey struct {
	family     domain.RouteFamily
	state      domain.State
	cause      domain.Cause
	source     domain.Source
	retryAfter time.Duration // kept for degraded denials only
}

func (k outcomeKey) String() string {
	s := fmt.Sprintf("%s %s cause=%s source=%s", k.family, k.state, k.cause, k.source)
	if k.retryAfter != 0 {
		s += fmt.Sprintf(" retry=%s", k.retryAfter)
	}
	return s
}

// tally is what one phase of traffic saw.
type tally struct {
	decisions int
	outcomes[outcomeKey]
	// bypassed counts BYPASS_DEGRADED answers per read client.
	bypassed map[string]int
	// admitted counts, per flow, the requests the primary store admitted;
	// uncertain those whose store call failed or missed its deadline, which
	// Redis may or may not have counted.
	admitted, uncertain map[string]int
	// ledger holds every decision of the ledger flow, in the order they
	// ended.
	ledger []ledgerEvent
	errs   []error
}

func newTally() *tally {
	return &tally{outcomes: newOutcomes[outcomeKey](), bypassed: map[string]int{}, admitted: map[string]int{}, uncertain: map[string]int{}}
}

// ledgerEvent is one decision of the ledger flow.
type ledgerEvent struct {
	start    time.Time
	admitted bool // by the primary store
	failed   bool // the store call failed or missed its deadline
}

func (t *tally) add(f flow, req app.Request, d domain.Decision, start time.Time, took time.Duration, err error) {
	t.decisions++
	k := outcomeKey{family: f.family, state: d.State, cause: d.Cause, source: d.Source}
	if d.State == domain.DeniedDegraded {
		// Exact for a fail-closed denial (1 s), rounded up to the second
		// for one past the bypass cap, whose wait varies.
		k.retryAfter = d.RetryAfter
		if d.RetryAfter != domain.DeniedRetryAfter {
			k.retryAfter = d.RetryAfter.Truncate(time.Second) + time.Second
		}
	}
	t.saw(k, took)
	switch {
	case d.State == domain.BypassDegraded:
		t.bypassed[readClient(req)]++
	case d.State == domain.Allowed && d.Source == domain.SourcePrimary:
		t.admitted[f.name]++
	case d.Cause == domain.CauseStoreTimeout || d.Cause == domain.CauseStoreUnavailable:
		t.uncertain[f.name]++
	}
	if f.name == ledgerFlow.name {
		t.ledger = append(t.ledger, ledgerEvent{start: start,
			admitted: d.State == domain.Allowed && d.Source == domain.SourcePrimary,
			failed:   d.Cause == domain.CauseStoreTimeout || d.Cause == domain.CauseStoreUnavailable})
	}
	if err != nil && len(t.errs) < 8 {
		t.errs = append(t.errs, err)
	}
}

// outcomes counts what a phase saw by key (a decision's state and cause,
// or a response's status), with every latency, for percentiles.
type outcomes[K interface {
	comparable
	fmt.Stringer
}] struct {
	byKey map[K]int
	worst time.Duration
	took  []time.Duration
}

func newOutcomes[K interface {
	comparable
	fmt.Stringer
}]() outcomes[K] {
	return outcomes[K]{byKey: map[K]int{}}
}

// saw counts one outcome and its latency.
func (o *outcomes[K]) saw(k K, took time.Duration) {
	o.byKey[k]++
	o.worst = max(o.worst, took)
	o.took = append(o.took, took)
}

// count returns how many outcomes matched.
func (o *outcomes[K]) count(match func(K) bool) int {
	n := 0
	for k, c := range o.byKey {
		if match(k) {
			n += c
		}
	}
	return n
}

// latencies returns the median, the 99th percentile and the worst
// latency.
func (o *outcomes[K]) latencies() (p50, p99, worst time.Duration) {
	if len(o.took) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(o.took)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100], s[len(s)-1]
}

// summary lists the outcomes, most frequent first.
func (o *outcomes[K]) summary() string {
	keys := slices.Collect(maps.Keys(o.byKey))
	slices.SortFunc(keys, func(a, b K) int { return o.byKey[b] - o.byKey[a] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n\t%6d  %s", o.byKey[k], k)
	}
	return b.String()
}

// traffic is steady load on a Limiter: workers send the flows in turn,
// paced, and tally each decision under the phase current when it began.
type traffic struct {
	flows   []flow
	workers int
	pace    time.Duration
	decide  func(ctx context.Context, req app.Request) (domain.Decision, error)

	phase   atomic.Int32
	mu      sync.Mutex
	tallies map[int32]*tally
	panics  []any

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startTraffic starts workers sending flows to lim, in phase 0.
func startTraffic(t *testing.T, lim *app.Limiter, workers int, flows []flow) *traffic {
	t.Helper()
	tr := &traffic{flows: flows, workers: workers, pace: 2 * time.Millisecond, decide: lim.Evaluate, tallies: map[int32]*tally{}}
	ctx, cancel := context.WithCancel(context.Background())
	tr.cancel = cancel
	for w := range workers {
		tr.wg.Go(func() { tr.work(ctx, w) })
	}
	t.Cleanup(tr.stop)
	return tr
}

func (tr *traffic) work(ctx context.Context, w int) {
	defer func() {
		if p := recover(); p != nil {
			tr.mu.Lock()
			tr.panics = append(tr.panics, p)
			tr.mu.Unlock()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		f := tr.flows[(w+i)%len(tr.flows)]
		req := f.request(w, i)
		phase := tr.phase.Load()
		start := time.Now()
		d, err := tr.decide(context.Background(), req)
		took := time.Since(start)
		tr.mu.Lock()
		tl := tr.tallies[phase]
		if tl == nil {
			tl = newTally()
			tr.tallies[phase] = tl
		}
		tl.add(f, req, d, start, took, err)
		tr.mu.Unlock()
		time.Sleep(tr.pace)
	}
}

// enter starts phase p: requests that begin from now on count there.
func (tr *traffic) enter(p int32) { tr.phase.Store(p) }

// stop stops the workers and waits for them; it is idempotent.
func (tr *traffic) stop() {
	tr.cancel()
	tr.wg.Wait()
}

// tally returns what phase p saw (empty if nothing).
func (tr *traffic) tally(p int32) *tally {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tl := tr.tallies[p]; tl != nil {
		return tl
	}
	return newTally()
}

// sum adds up a per-flow count over the given phases, under the lock the
// workers count under: a phase may still be counting.
func (tr *traffic) sum(count func(*tally) map[string]int, name string, phases ...int32) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, p := range phases {
		if tl := tr.tallies[p]; tl != nil {
			n += count(tl)[name]
		}
	}
	return n
}

func admitted(t *tally) map[string]int  { return t.admitted }
func uncertain(t *tally) map[string]int { return t.uncertain }

// checkNoPanic fails the test if a worker panicked or got a recorder
// error.
func (tr *traffic) checkClean(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.panics) > 0 {
		t.Errorf("decisions panicked: %v", tr.panics)
	}
	for p, tl := range tr.tallies {
		if len(tl.errs) > 0 {
			t.Errorf("phase %d: Evaluate returned errors: %v", p, tl.errs)
		}
	}
}

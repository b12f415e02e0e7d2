//go:build !race

package drills

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// callCounter counts the primary store's calls, whatever they carry: the
// drill's "Redis calls per decision".
type callCounter struct {
	ports.Store
	calls atomic.Int64
}

func (c *callCounter) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	c.calls.Add(1)
	return c.Store.Evaluate(ctx, now, limits)
}

// repeatCounter is callCounter for a store that decides repeated requests
// (ports.Repeater): the Limiter coalesces on it, as on the store itself.
type repeatCounter struct {
	*callCounter
	rep ports.Repeater
}

func (c repeatCounter) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	c.calls.Add(1)
	return c.rep.EvaluateRepeated(ctx, now, limits, n)
}

// countCalls wraps s, keeping its ports.Repeater when it has one.
func countCalls(s ports.Store) (ports.Store, *callCounter) {
	c := &callCounter{Store: s}
	if rep, ok := s.(ports.Repeater); ok {
		return repeatCounter{c, rep}, c
	}
	return c, c
}

// Shape of the spike drill: kept to about 20 s of wall time so that CI
// stays under its budget.
const (
	spikeBursts    = 20
	spikeBurstSize = 1000
	spikeMixed     = 5 * time.Second
	spikeWorkers   = 96 // closed-loop clients of the mixed spike: several times what two cores serve
	loginEvery     = 100 * time.Millisecond
	// bypassCap is what the degraded matrix lets a read client through per
	// instance when its decisions cannot reach the store: the burst × 2
	// per 60 s cap (docs/adr/005).
	bypassCap = 2 * readBurst
)

// TestSpikeNoRace (issue 16 item 5): over HTTP through the middleware on a
// standalone Redis, with production's 50 ms deadline: 20 bursts of 1 000
// concurrent identical GET requests (a fresh user each), then a mixed
// spike of 96 closed-loop clients for 5 s, while a login client on the
// side logs in every 100 ms from its own address. FIGURE lines: openings,
// login 503s, exactness per burst, p50/p99, Redis calls per decision.
//
// What it asserts depends on nothing but the code: Redis never admits more
// than the user's burst; a burst none of whose decisions was degraded is
// exact (5 pass, all decided by Redis); a burst with degraded decisions
// (a decision that missed its own 50 ms deadline on the machine's
// saturated cores takes the degraded matrix) passes no more than the
// matrix's per-instance bypass cap on top; a burst with no degraded
// decision costs Redis a handful of calls, not one per request; and the
// breaker never opens without a failed probe (missed deadlines alone never
// open it, docs/adr/008). With SLUICE_DRILL_BURSTS set (a measurement on a
// quiet machine, as for TestBurstOpensNoBreaker) it also asserts what the
// runbook's figures show there: every burst exact, no opening, no login
// 503. Those depend on the machine having the CPU to meet a 50 ms deadline
// for a thousand requests at once, which a shared CI machine running
// other packages' tests beside it does not promise.
//
// It does not run in parallel with the other drills: a spike measures what
// one service does with the machine's cores, and drills running beside it
// would be part of the spike. For the same reason it is built without the
// race detector, which makes every request several times slower than in
// production and a 50 ms deadline meaningless: `make test` runs it in its
// race-free pass (tests named ...NoRace).
func TestSpikeNoRace(t *testing.T) {
	srv := redistest.NewServerWith(t, redistest.Config{})
	store, err := redis.New(redis.Config{Mode: redis.ModeStandalone, Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	primary, counter := countCalls(store)
	_, coalesced := primary.(ports.Repeater)
	probes := &probeLog{p: store.Prober()}
	j := &journal{probes: probes}
	var decisions, degraded, primaryAllowed atomic.Int64
	j.decisions = func(d domain.Decision) {
		decisions.Add(1)
		if d.Degraded {
			degraded.Add(1)
		}
		if d.Profile == "items" && d.State == domain.Allowed && d.Source == domain.SourcePrimary {
			primaryAllowed.Add(1)
		}
	}
	// Production's probe interval: the other drills shorten it to see many
	// probes in a few seconds; this one is about what a spike does to a
	// service as configured by default, where a probe is rare.
	cfg := drillConfig()
	cfg.ProbeInterval, cfg.ProbeTimeout = app.DefaultProbeInterval, app.DefaultProbeTimeout
	lim := newLimiterDeps(t, cfg, app.Deps{Store: primary, Fallback: newFallback(t), Prober: probes, Recorder: j})
	s := newService(t, lim, loopback, httpmw.XForwardedFor)
	s.client.Transport.(*http.Transport).MaxIdleConnsPerHost = spikeWorkers + 8

	_, measure := bursts(t)
	conns := dialRaw(t, s, spikeBurstSize)
	login := startLoginClient(t, s)

	// The bursts.
	exact := 0
	var burstLat []time.Duration
	// cleanCalls are the Redis calls of each burst no decision of which
	// was degraded: what a burst costs Redis, breaker aside.
	var cleanCalls []int64
	callsBefore, decisionsBefore := counter.calls.Load(), decisions.Load()
	for b := range spikeBursts {
		req := app.Request{Route: routeRead, ClientIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(b)}), User: fmt.Sprintf("Spike.User%02d@Example.COM", b)}
		allowedBefore, callsAt, degradedAt := primaryAllowed.Load(), counter.calls.Load(), degraded.Load()
		statuses, lat := burstOver(t, conns, req)
		if degraded.Load() == degradedAt {
			cleanCalls = append(cleanCalls, counter.calls.Load()-callsAt)
		}
		burstLat = append(burstLat, lat...)
		passed := statuses[http.StatusOK]
		fromRedis := primaryAllowed.Load() - allowedBefore
		clean := degraded.Load() == degradedAt
		switch {
		case fromRedis > readBurst, passed > readBurst+bypassCap,
			clean && (passed != readBurst || fromRedis != readBurst):
			t.Errorf("burst %d: %d passed (%d decided by Redis, degraded decisions: %v), statuses %v; want exactly %d by Redis, and at most the bypass cap of %d more when degraded",
				b, passed, fromRedis, !clean, statuses, readBurst, bypassCap)
		case passed == readBurst && fromRedis == readBurst && statuses[http.StatusTooManyRequests] == spikeBurstSize-readBurst:
			exact++
		case measure:
			t.Errorf("burst %d: %d passed (%d decided by Redis), statuses %v; want exactly %d, all by Redis", b, passed, fromRedis, statuses, readBurst)
		}
	}
	burstCalls, burstDecisions := counter.calls.Load()-callsBefore, decisions.Load()-decisionsBefore

	// The mixed spike.
	callsBefore, decisionsBefore = counter.calls.Load(), decisions.Load()
	mixed := mixedSpike(t, s, spikeMixed)
	mixedCalls, mixedDecisions := counter.calls.Load()-callsBefore, decisions.Load()-decisionsBefore
	logins := login.stop()

	openings := 0
	for _, tr := range j.allTransitions() {
		if tr.change.To == domain.Degraded && tr.change.From == domain.Healthy {
			openings++
		}
	}
	slices.Sort(burstLat)
	figure(t, "spike coalescing", "%v (the primary store implements ports.Repeater: %v)", coalesced, coalesced)
	figure(t, "spike bursts exact", "%d of %d bursts of %d: exactly %d passed, all decided by Redis", exact, spikeBursts, spikeBurstSize, readBurst)
	figure(t, "spike burst latency", "p50 %s, p99 %s over %d requests", ms(quantile(burstLat, 0.5)), ms(quantile(burstLat, 0.99)), len(burstLat))
	figure(t, "spike burst Redis calls per decision", "%.3f (%d calls, %d decisions)", ratio(burstCalls, burstDecisions), burstCalls, burstDecisions)
	slices.Sort(cleanCalls)
	if len(cleanCalls) > 0 {
		figure(t, "spike Redis calls per burst", "median %d, max %d, over the %d bursts with no degraded decision", cleanCalls[len(cleanCalls)/2], cleanCalls[len(cleanCalls)-1], len(cleanCalls))
	}
	figure(t, "spike mixed", "%d requests in %s from %d clients (%.0f/s), p50 %s, p99 %s, statuses %v",
		len(mixed.lat), spikeMixed, spikeWorkers, float64(len(mixed.lat))/spikeMixed.Seconds(), ms(quantile(mixed.lat, 0.5)), ms(quantile(mixed.lat, 0.99)), mixed.statuses)
	figure(t, "spike mixed Redis calls per decision", "%.3f (%d calls, %d decisions)", ratio(mixedCalls, mixedDecisions), mixedCalls, mixedDecisions)
	figure(t, "spike degraded decisions", "%d of %d", degraded.Load(), decisions.Load())
	figure(t, "spike breaker openings", "%d", openings)
	figure(t, "spike login", "%d logins, statuses %v, 503s %d", logins.total, logins.statuses, logins.statuses[http.StatusServiceUnavailable])

	if coalesced && len(cleanCalls) > 0 && cleanCalls[len(cleanCalls)/2] > spikeBurstSize/10 {
		t.Errorf("a burst of %d cost Redis %d calls (median of the bursts with no degraded decision): the decisions did not coalesce", spikeBurstSize, cleanCalls[len(cleanCalls)/2])
	}
	failedProbes := 0
	for _, p := range probes.all() {
		if p.failed() {
			failedProbes++
		}
	}
	if openings > failedProbes {
		t.Errorf("the spike opened the breaker %d times but only %d probes failed: missed deadlines alone opened it; transitions %v", openings, failedProbes, j.allTransitions())
	}
	if !measure {
		return
	}
	if got := logins.statuses[http.StatusServiceUnavailable]; got != 0 {
		t.Errorf("the login client got %d 503s during the spike (statuses %v)", got, logins.statuses)
	}
	if openings != 0 {
		t.Errorf("the spike opened the breaker %d times; transitions %v", openings, j.allTransitions())
	}
}

// burstOver sends one request on each connection at once (each from its
// own goroutine, released together) and returns the count per status and
// every request's latency.
func burstOver(t *testing.T, conns []*rawConn, req app.Request) (map[int]int, []time.Duration) {
	t.Helper()
	raw := rawRequest(req)
	var wg sync.WaitGroup
	start := make(chan struct{})
	status := make([]int, len(conns))
	lat := make([]time.Duration, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			began := time.Now()
			st, err := c.do(raw)
			if err != nil {
				t.Errorf("burst request: %v", err)
			}
			status[i], lat[i] = st, time.Since(began)
		}()
	}
	close(start)
	wg.Wait()
	return countStatuses(status), lat
}

// rawConn is one keep-alive connection to the service that writes a
// prepared request and reads the answer: a load tool's client, much
// cheaper in CPU than net/http's, so that the bursts measure the service
// (as a user's load tool would) rather than 1 000 http.Clients sharing
// its two cores.
type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

// dialRaw opens n connections to the service.
func dialRaw(t *testing.T, s *service, n int) []*rawConn {
	t.Helper()
	conns := make([]*rawConn, n)
	for i := range conns {
		c, err := net.Dial("tcp", s.srv.Listener.Addr().String())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i] = &rawConn{c: c, r: bufio.NewReader(c)}
	}
	return conns
}

// rawRequest is req as HTTP/1.1 bytes, as service.send would send it.
func rawRequest(req app.Request) []byte {
	method, path, _ := strings.Cut(req.Route, " ")
	path = strings.ReplaceAll(path, "{id}", "42")
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: sluice.test\r\nX-Forwarded-For: %s\r\n", method, path, req.ClientIP)
	if req.User != "" {
		fmt.Fprintf(&b, "%s: %s\r\n", headerUser, url.PathEscape(req.User))
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// do sends raw and returns the answer's status.
func (c *rawConn) do(raw []byte) (int, error) {
	if _, err := c.c.Write(raw); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, err
}

// spikeTally is what the mixed spike's clients saw.
type spikeTally struct {
	statuses map[int]int
	lat      []time.Duration
}

// mixedSpike runs closed-loop clients for d: reads from many users (some
// on a few hot keys), exports and a ledger, as fast as the service answers.
func mixedSpike(t *testing.T, s *service, d time.Duration) spikeTally {
	t.Helper()
	flows := standardFlows()
	hot := func(w, i int) app.Request {
		u := i % 3 // three hot users, hammered by every worker
		return app.Request{Route: routeRead, ClientIP: rawIP(u), User: rawUser(u), Tenant: rawTenant(0)}
	}
	var mu sync.Mutex
	out := spikeTally{statuses: map[int]int{}}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range spikeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses := map[int]int{}
			var lat []time.Duration
			for i := 0; time.Now().Before(end); i++ {
				var req app.Request
				switch f := (w + i) % (len(flows) + 2); {
				case f < len(flows) && flows[f].name != "login":
					req = flows[f].request(w, i)
				default:
					req = hot(w, i)
				}
				r := s.send(t, req, nil)
				statuses[r.status]++
				lat = append(lat, r.took)
			}
			mu.Lock()
			for k, v := range statuses {
				out.statuses[k] += v
			}
			out.lat = append(out.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(out.lat)
	return out
}

// loginClient logs in on the side, from an address of its own, at a pace
// its limits admit: whatever it is told other than 200 is the spike's
// doing.
type loginClient struct {
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
	total    int
	statuses map[int]int
}

func startLoginClient(t *testing.T, s *service) *loginClient {
	t.Helper()
	c := &loginClient{quit: make(chan struct{}), done: make(chan struct{}), statuses: map[int]int{}}
	req := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("192.0.2.200")}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(loginEvery)
		defer tick.Stop()
		for {
			select {
			case <-c.quit:
				return
			case <-tick.C:
				r := s.send(t, req, nil)
				c.total++
				c.statuses[r.status]++
			}
		}
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// stop stops the client and returns it, its counts final.
func (c *loginClient) stop() *loginClient {
	c.stopOnce.Do(func() { close(c.quit) })
	<-c.done
	return c
}

// quantile returns the q-quantile of sorted durations (0 when empty).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*q))]
}

// ratio is a/b, 0 when b is.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// countStatuses counts a burst's answers by status code.
func countStatuses(status []int) map[int]int {
	counts := map[int]int{}
	for _, st := range status {
		counts[st]++
	}
	return counts
}

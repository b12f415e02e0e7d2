//go:build !race

package drills

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/boot"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// The overload drills (issue 35, docs/adr/008 "The store deadline is the
// store's", docs/adr/018 "Deadlines"): on a healthy Redis, a burst is
// decided by Redis, whatever the service's own load. Each drill runs on
// a quiet machine and beside the CPU hog (hog_test.go: busy loops on
// every core in another process, which the drill starts and stops by
// PID), and asserts, for every burst or round: no decision that is not
// the store's (degraded, shed or caller gone), no store call that timed
// out, no 503, every user and tenant at exactly its limit.
//
// SLUICE_DRILL_RUNS repeats every drill that many times (default 1), for
// a measurement; the figures (FIGURE lines, go test -v) sum every run.
const (
	// demoBursts is how many bursts of burstSize the demo drill sends
	// per load.
	demoBursts = 20
	// tenantRounds is how many rounds of tenantDecisions the tenants
	// drill makes per store and load.
	tenantRounds    = 16
	tenantDecisions = 1000
	tenantCount     = 50
	tenantLimit     = 5   // each tenant's requests per minute
	tenantUserLimit = 100 // each user's requests per minute
	// overloadHogLimit bounds the hog's life even if a drill never stops
	// it.
	overloadHogLimit = 50 * time.Second
)

// drillRuns is SLUICE_DRILL_RUNS, or 1.
func drillRuns(t *testing.T) int {
	v := os.Getenv("SLUICE_DRILL_RUNS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("SLUICE_DRILL_RUNS=%q: want a positive count", v)
	}
	return n
}

// loads are the conditions every overload drill runs in.
var loads = []struct {
	name string
	hog  bool
}{{"quiet", false}, {"hog", true}}

// overloadTally counts what the overload drills assert on: the
// decisions that were not the store's, and the store calls that failed.
type overloadTally struct {
	mu        sync.Mutex
	notStore  map[string]int // decisions not decided by the store, by state/cause
	callErrs  map[string]int // failed store calls, by class
	calls     int
	admitted  map[string]int // decisions the store admitted, by tenant pseudonym or "" per burst
	decisions int
	moves     int // health transitions
}

func newOverloadTally() *overloadTally {
	o := &overloadTally{}
	o.reset()
	return o
}

func (o *overloadTally) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notStore, o.callErrs, o.admitted = map[string]int{}, map[string]int{}, map[string]int{}
	o.calls, o.decisions, o.moves = 0, 0, 0
}

func (o *overloadTally) RecordDecision(_ context.Context, rec ports.DecisionRecord) error {
	d := rec.Decision
	o.mu.Lock()
	defer o.mu.Unlock()
	o.decisions++
	switch {
	case d.Degraded || d.Source != domain.SourcePrimary && d.Source != domain.SourceRefusalCache && d.Source != domain.SourceAllotment:
		o.notStore[fmt.Sprintf("%s/%s", d.State, d.Cause)]++
	case d.State == domain.Allowed:
		o.admitted[rec.TenantID]++
	}
	return nil
}

func (o *overloadTally) RecordTransition(context.Context, domain.StateChange, time.Time) error {
	o.mu.Lock()
	o.moves++
	o.mu.Unlock()
	return nil
}

func (o *overloadTally) RecordStoreCall(_ context.Context, c ports.StoreCall) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if c.Err == nil {
		return
	}
	class := "other"
	switch {
	case errors.Is(c.Err, app.ErrOverloaded):
		class = "overloaded"
	case errors.Is(c.Err, domain.ErrStoreTimeout):
		class = "timeout"
	case errors.Is(c.Err, context.Canceled):
		class = "canceled"
	}
	o.callErrs[class]++
}

func (o *overloadTally) RecordReset(context.Context, ports.ResetRecord) error { return nil }

// snapshot returns copies of the counts.
func (o *overloadTally) snapshot() (notStore, callErrs, admitted map[string]int, decisions, calls, moves int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return clone(o.notStore), clone(o.callErrs), clone(o.admitted), o.decisions, o.calls, o.moves
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// sum adds m's counts.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// underLoad runs fn quietly or beside the CPU hog, and returns the hog's
// CPU time (0 when quiet).
func underLoad(t *testing.T, hog bool, fn func()) time.Duration {
	t.Helper()
	if !hog {
		fn()
		return 0
	}
	stop := startHog(t, overloadHogLimit)
	fn()
	return stop()
}

// TestOverloadDemoBurstNoRace is issue 35's drill (a): the README's first
// scenario, the demo on Redis, one user sending 1 000 concurrent GET
// /api/v1/search, demoBursts bursts, wired as the demo is (internal/boot:
// the Redis store from REDIS_URL in its default mode, the Recorder, the
// Limiter; the HTTP middleware as examples/demo mounts it), quiet and
// beside the CPU hog. The user's burst window counts per minute here,
// so that a burst that lasts longer than a second on the loaded cores is
// still one window: exactly 5 pass, all by Redis, 995 get 429, none 503.
func TestOverloadDemoBurstNoRace(t *testing.T) {
	runs := drillRuns(t)
	addr := redistest.Standalone(t)
	t.Setenv(app.EnvHMACSecret, drillSecret)
	t.Setenv(app.EnvRedisURL, "redis://"+addr)
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "demo", "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := boot.Config(data, false, "")
	if err != nil {
		t.Fatalf("boot.Config: %v", err)
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].Name == "search" {
			cfg.Profiles[i].Windows.User[0].Period = time.Minute
		}
	}
	primary, fallback, _, closeStores, err := boot.Stores(cfg)
	if err != nil {
		t.Fatalf("boot.Stores: %v", err)
	}
	t.Cleanup(closeStores)
	tally := newOverloadTally()
	otelRec, err := boot.Recorder(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = otelRec.Close() })
	lim, err := boot.Limiter(cfg, primary, fallback, tee{otelRec, tally}, io.Discard)
	if err != nil {
		t.Fatalf("boot.Limiter: %v", err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	mux := httpmw.NewServeMux()
	mux.HandleFunc("GET /api/v1/search", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	// The demo behind a proxy (-trusted-proxies): each burst's client has
	// an address of its own, so that its ip window (20 per second) never
	// binds across bursts.
	limit, err := httpmw.New(lim, httpmw.Config{Route: mux.Route(), Identity: identityFromHeaders, TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(limit(mux))
	t.Cleanup(hs.Close)
	client := hs.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = burstSize
	t.Cleanup(client.CloseIdleConnections)
	burst := func(user string, ip netip.Addr) (map[int]int, []time.Duration) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		status := make([]int, burstSize)
		lat := make([]time.Duration, burstSize)
		for i := range burstSize {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/v1/search", nil)
				req.Header.Set(headerUser, user)
				req.Header.Set("X-Forwarded-For", ip.String())
				<-start
				began := time.Now()
				res, err := client.Do(req)
				lat[i] = time.Since(began)
				if err != nil {
					t.Errorf("burst request: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				status[i] = res.StatusCode
			})
		}
		close(start)
		wg.Wait()
		return countStatuses(status), lat
	}
	// Warm-up: the connections dialled, as a service at peak has them.
	burst("Warm.Up@Example.COM", netip.MustParseAddr("203.0.113.250"))

	for _, ld := range loads {
		t.Run(ld.name, func(t *testing.T) {
			tally.reset()
			statuses := map[int]int{}
			var lat []time.Duration
			exact := 0
			var hogCPU time.Duration
			began := time.Now()
			for run := range runs {
				hogCPU += underLoad(t, ld.hog, func() {
					for b := range demoBursts {
						user := fmt.Sprintf("Demo.%s.R%dB%02d@Example.COM", ld.name, run, b)
						_, _, before, _, _, _ := tally.snapshot()
						st, l := burst(user, netip.AddrFrom4([4]byte{198, 18, byte(run), byte(b)}))
						lat = append(lat, l...)
						for code, n := range st {
							statuses[code] += n
						}
						_, _, after, _, _, _ := tally.snapshot()
						adm := after[""] - before[""]
						if st[http.StatusOK] == readBurst && adm == readBurst && st[http.StatusTooManyRequests] == burstSize-readBurst {
							exact++
							continue
						}
						t.Errorf("run %d burst %d (%s): statuses %v, %d admitted by Redis; want exactly %d passed, all by Redis, every other 429",
							run+1, b+1, ld.name, st, adm, readBurst)
					}
				})
			}
			notStore, callErrs, _, decisions, calls, moves := tally.snapshot()
			if sum(notStore) != 0 || sum(callErrs) != 0 || statuses[http.StatusServiceUnavailable] != 0 || moves != 0 {
				t.Errorf("%s: decisions not the store's %v, failed store calls %v, %d × 503, %d health transitions; want none",
					ld.name, notStore, callErrs, statuses[http.StatusServiceUnavailable], moves)
			}
			slices.Sort(lat)
			figure(t, "overload.demo."+ld.name, "%d of %d bursts of %d concurrent GET /api/v1/search (one user, demo wiring, Redis) exact; statuses %v; %d decisions, %d store calls; not the store's %v; failed calls %v; %d transitions; latency p50 %s p99 %s; %s wall, hog CPU %.1f s; load average %s",
				exact, runs*demoBursts, burstSize, statuses, decisions, calls, notStore, callErrs, moves,
				ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), time.Since(began).Round(time.Millisecond), hogCPU.Seconds(), loadAverage())
		})
	}
}

// TestOverloadTenantsNoRace is issue 35's drill (b): app.Limiter wired as
// its package documentation shows (the Redis store, the local fallback,
// a Recorder; nothing else), 1 000 concurrent Evaluate of 1 000
// different users over 50 tenants (each user 100 per minute, each tenant
// 5 per minute), tenantRounds rounds, on standalone Redis and on the
// three-master cluster with a profile that also counts an ip window (so
// that each decision spans two slots: docs/adr/013), quiet and beside the
// CPU hog. Each round's tenants are new: every tenant admits exactly 5,
// all by Redis.
func TestOverloadTenantsNoRace(t *testing.T) {
	runs := drillRuns(t)
	stores := []struct {
		name  string
		cfg   func() redis.Config
		ipWin bool
	}{
		{"standalone", func() redis.Config { return redis.Config{URL: "redis://" + redistest.Standalone(t)} }, false},
		{"cluster", func() redis.Config { return redis.Config{Addrs: redistest.Cluster(t), Mode: redis.ModeCluster} }, true},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			store, err := redis.New(sc.cfg())
			if err != nil {
				t.Fatalf("redis.New: %v", err)
			}
			t.Cleanup(func() { _ = store.Close() })
			windows := app.WindowsConfig{
				User:   []app.WindowConfig{{Name: "sustained", Limit: tenantUserLimit, Period: time.Minute}},
				Tenant: []app.WindowConfig{{Name: "sustained", Limit: tenantLimit, Period: time.Minute}},
			}
			if sc.ipWin {
				// Never reached: the ip side only makes the decision span
				// two slots.
				windows.IP = []app.WindowConfig{{Name: "sustained", Limit: 10 * tenantDecisions, Period: time.Minute}}
			}
			cfg := app.Config{
				HMACSecret: drillSecret,
				Profiles:   []app.ProfileConfig{{Name: "items", Family: domain.FamilyRead, Routes: []string{routeRead}, Windows: windows}},
			}
			tally := newOverloadTally()
			lim := newLimiterDeps(t, cfg, app.Deps{Store: store, Fallback: newFallback(t), Recorder: tally})
			round := func(tag string) map[string]int {
				start := make(chan struct{})
				var wg sync.WaitGroup
				var admitted sync.Map
				var n atomic.Int64
				for u := range tenantDecisions {
					wg.Go(func() {
						tenant := fmt.Sprintf("%s-t%02d", tag, u%tenantCount)
						req := app.Request{Route: routeRead, User: fmt.Sprintf("%s-u%04d", tag, u), Tenant: tenant,
							ClientIP: netip.AddrFrom4([4]byte{10, byte(u >> 8), byte(u), 7})}
						<-start
						d, err := lim.Evaluate(context.Background(), req)
						if err != nil {
							t.Errorf("Evaluate: %v", err)
						}
						if d.State == domain.Allowed && !d.Degraded {
							c, _ := admitted.LoadOrStore(tenant, new(atomic.Int64))
							c.(*atomic.Int64).Add(1)
						}
						n.Add(1)
					})
				}
				close(start)
				wg.Wait()
				out := map[string]int{}
				for u := range tenantCount {
					tenant := fmt.Sprintf("%s-t%02d", tag, u)
					if c, ok := admitted.Load(tenant); ok {
						out[tenant] = int(c.(*atomic.Int64).Load())
					} else {
						out[tenant] = 0
					}
				}
				return out
			}
			round(sc.name + "-warm") // connections and scripts loaded
			for _, ld := range loads {
				t.Run(ld.name, func(t *testing.T) {
					tally.reset()
					inexact := 0
					var hogCPU time.Duration
					began := time.Now()
					for run := range runs {
						hogCPU += underLoad(t, ld.hog, func() {
							for r := range tenantRounds {
								tag := fmt.Sprintf("%s-%s-r%d-%02d-%d", sc.name, ld.name, run, r, began.UnixNano())
								got := round(tag)
								for tenant, n := range got {
									if n != tenantLimit {
										inexact++
										t.Errorf("run %d round %d: tenant %s admitted %d, want exactly %d", run+1, r+1, tenant, n, tenantLimit)
									}
								}
							}
						})
					}
					notStore, callErrs, _, decisions, calls, moves := tally.snapshot()
					if sum(notStore) != 0 || sum(callErrs) != 0 || moves != 0 {
						t.Errorf("%s/%s: decisions not the store's %v, failed store calls %v, %d health transitions; want none",
							sc.name, ld.name, notStore, callErrs, moves)
					}
					figure(t, "overload.tenants."+sc.name+"."+ld.name, "%d rounds of %d concurrent Evaluate (distinct users over %d tenants, tenant %d/min%s): %d tenants inexact; %d decisions, %d store calls; not the store's %v; failed calls %v; %d transitions; %s wall, hog CPU %.1f s; load average %s",
						runs*tenantRounds, tenantDecisions, tenantCount, tenantLimit, map[bool]string{true: ", ip window: two slots", false: ""}[sc.ipWin],
						inexact, decisions, calls, notStore, callErrs, moves, time.Since(began).Round(time.Millisecond), hogCPU.Seconds(), loadAverage())
				})
			}
		})
	}
}

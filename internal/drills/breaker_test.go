package drills

import (
	"context"
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
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// burstSize is issue 16's burst: 1 000 concurrent identical requests.
const burstSize = 1000

// bursts is how many bursts TestBurstOpensNoBreaker sends: 10 in CI, as
// many as SLUICE_DRILL_BURSTS says for a measurement (the runbook's
// figures are of 50), which then also asserts that none opened the
// breaker.
func bursts(t *testing.T) (n int, measure bool) {
	if v := os.Getenv("SLUICE_DRILL_BURSTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_DRILL_BURSTS=%q: want a positive count", v)
		}
		return n, true
	}
	return 10, false
}

// countingProber counts the probes, the confirming ones apart, and their
// failures; it passes the per-node capability through.
type countingProber struct {
	ports.NodeProber
	probes, confirms, confirmFailed, failed atomic.Int64
}

func (p *countingProber) ProbeNodes(ctx context.Context) ([]ports.NodeProbe, error) {
	probes, err := p.NodeProber.ProbeNodes(ctx)
	p.probes.Add(1)
	failed := err != nil
	for _, n := range probes {
		failed = failed || n.Err != nil
	}
	switch {
	case app.ConfirmingProbe(ctx):
		p.confirms.Add(1)
		if failed {
			p.confirmFailed.Add(1)
		}
	case failed:
		p.failed.Add(1)
	}
	return probes, err
}

// burstRecorder counts, beside opsRecorder, the decisions of the current
// burst that the store admitted and those the degraded matrix made.
type burstRecorder struct {
	opsRecorder
	admitted, degraded atomic.Int64
}

func (r *burstRecorder) RecordDecision(ctx context.Context, rec ports.DecisionRecord) error {
	switch d := rec.Decision; {
	case d.Degraded:
		r.degraded.Add(1)
	case d.State == domain.Allowed && d.Source == domain.SourcePrimary:
		r.admitted.Add(1)
	}
	return r.opsRecorder.RecordDecision(ctx, rec)
}

// TestBurstOpensNoBreaker is issue 16 item 2's spike: bursts of 1 000
// concurrent identical GET /api/v1/search of one user, through the HTTP
// middleware, on Redis, with the demo's configuration (50 ms store
// deadline, breaker_failures 5, production probes). On two cores some
// calls miss the deadline while Redis answers each in microseconds: the
// service's own CPU. Those misses used to open the breaker (then 503 for
// logins for about 30 s); now they trigger a confirming probe, which
// Redis answers: no breaker opens, and each burst admits exactly the
// user's burst limit.
func TestBurstOpensNoBreaker(t *testing.T) {
	cfg, err := app.LoadConfig(filepath.Join("..", "..", "examples", "demo", "sluice.yaml"), func(k string) (string, bool) {
		if k == app.EnvHMACSecret {
			return drillSecret, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.NewServer(t)
	store, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	prober := &countingProber{NodeProber: store.Prober()}
	rec := &burstRecorder{}
	lim := newLimiterDeps(t, cfg, app.Deps{Store: store, Fallback: newFallback(t), Prober: prober, Recorder: rec})

	var passed atomic.Int64
	mux := httpmw.NewServeMux()
	mux.HandleFunc("GET /api/v1/search", func(w http.ResponseWriter, _ *http.Request) {
		passed.Add(1)
		_, _ = io.WriteString(w, "ok\n")
	})
	limit, err := httpmw.New(lim, httpmw.Config{Route: mux.Route(), Identity: identityFromHeaders, TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(limit(mux))
	t.Cleanup(hs.Close)
	client := hs.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = burstSize
	t.Cleanup(client.CloseIdleConnections)

	n, measure := bursts(t)
	var lat []time.Duration
	statuses := map[int]int{}
	var inexact, degraded int
	for b := range n {
		// A user and an address per burst: each burst starts from a
		// fresh quota (5 per second for the user), without waiting.
		user := fmt.Sprintf("Burst.User%03d@Example.COM", b)
		ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(b % 250)})
		passed.Store(0)
		rec.admitted.Store(0)
		rec.degraded.Store(0)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range burstSize {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/v1/search", nil)
				req.Header.Set(headerUser, user)
				req.Header.Set("X-Forwarded-For", ip.String())
				<-start
				began := time.Now()
				res, err := client.Do(req)
				took := time.Since(began)
				code := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
					code = res.StatusCode
				}
				mu.Lock()
				statuses[code]++
				lat = append(lat, took)
				mu.Unlock()
			})
		}
		began := time.Now()
		close(start)
		wg.Wait()
		// The store counts exactly: 5 admitted per second of the burst
		// (a burst on loaded cores may outlast the user's 1 s window: the
		// decisions wait for their store answer, docs/adr/008), unless some
		// calls missed their deadline (one may have been counted, the
		// degraded matrix then decided it) or the breaker opened.
		windows := int64(time.Since(began)/time.Second) + 1
		adm, deg := rec.admitted.Load(), rec.degraded.Load()
		degraded += int(deg)
		switch {
		case adm > 5*windows || (deg == 0 && adm < 5):
			t.Errorf("burst %d: the store admitted %d requests (%d degraded) over %d of the user's windows, want exactly its burst of 5 per window", b+1, adm, deg, windows)
		case adm < 5:
			inexact++
		}
	}
	opened, nodes := rec.openings()
	failedProbes := prober.confirmFailed.Load() + prober.failed.Load()
	switch {
	case measure && opened != 0:
		t.Errorf("%d bursts opened the breaker %d times (node transitions %v)", n, opened, nodes)
	case int64(opened) > failedProbes:
		t.Errorf("the breaker opened %d times, but only %d probes failed: missed deadlines alone opened it", opened, failedProbes)
	}
	slices.Sort(lat)
	figure(t, "burst.breaker", "%d bursts of %d concurrent GET /api/v1/search (one user each, demo configuration, Redis): %d breaker openings; %d store calls missed the 50 ms deadline; %d confirming probes, %d failed; %d decisions degraded; statuses %v; %d bursts with fewer than 5 admitted by the store (misses); latency p50 %s p99 %s",
		n, burstSize, opened, rec.errors()["timeout"], prober.confirms.Load(), prober.confirmFailed.Load(), degraded, statuses, inexact,
		ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]))
}

// TestBreakerOpensUnderLoad: the other side of issue 16 item 2. Under 32
// workers, each real fault still opens the breaker on in-band failures,
// before the next scheduled probe: SIGKILL and cut replies at once
// (refusals), SIGSTOP, a black hole and a Redis slower than the deadline
// through the confirming probe (half the deadline). The figures are the
// time from the fault to DEGRADED.
func TestBreakerOpensUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		proxy  bool
		inject func(r *rig) error
	}{
		{"sigkill", false, func(r *rig) error { return r.srv.Kill() }},
		{"sigstop", false, func(r *rig) error { return r.srv.Pause() }},
		{"blackhole", true, func(r *rig) error { r.proxy.Inject(faultproxy.Fault{Mode: faultproxy.BlackHole}); return nil }},
		{"slower", true, func(r *rig) error {
			r.proxy.Inject(faultproxy.Fault{ReplyDelay: storeTimeout + storeTimeout/5})
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{proxy: tc.proxy})
			tr := startTraffic(t, r.lim, 32, standardFlows())
			steady(t, r, 500*time.Millisecond)
			afterProbe(t, r.probes)
			before := len(r.journal.allTransitions())
			probesAtFault := r.probes.count()
			injected := time.Now()
			if err := tc.inject(r); err != nil {
				t.Fatal(err)
			}
			down, _ := r.journal.waitTransition(t, before, domain.Degraded)
			probes := r.probes.all()
			if !openedInBand(probes, probesAtFault, down) {
				t.Errorf("opened at probe %d, not on the in-band failures (fault after probe %d; probes %v)", down.probes, probesAtFault, probes[probesAtFault:down.probes])
			}
			figure(t, "breaker.open_32_workers."+tc.name, "%s (%s)", ms(down.at.Sub(injected)), trigger(r.probes, down))
			tr.stop()
			if tc.name == "sigstop" {
				if err := r.srv.Resume(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

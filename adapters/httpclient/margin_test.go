package httpclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpclient"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// TestHoldCatchesRequestsInsideWait: a request already inside
// Limiter.Wait when the upstream's 429 arrives is held too. The quota is
// 1 per second; the first request reaches the upstream at 0, which
// answers 429 with Retry-After: 3 only once the second request is asleep
// in Wait (for the unit that frees at 1 s). The second request's
// decision passes at 1 s, inside the hold: it waits out the hold (3 s
// plus the default margin of 100 ms), waits on the quota again, and
// reaches the upstream at 3.1 s, never before.
func TestHoldCatchesRequestsInsideWait(t *testing.T) {
	clock := fakeclock.New(start)
	lim := newLimiter(t, clock, 1, time.Second)
	up := newUpstream(t, clock, func(n int, w http.ResponseWriter) {
		if n != 1 {
			return
		}
		for deadline := time.Now().Add(10 * time.Second); clock.Timers() < 1; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Error("the second request never waited")
				break
			}
		}
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	a := newClient(t, lim, clock, func(cfg *httpclient.Config) { cfg.Margin = 0 })
	first := call(context.Background(), a, up.srv.URL, 1)
	for deadline := time.Now().Add(10 * time.Second); len(up.arrivals()) == 0; runtime.Gosched() {
		require.False(t, time.Now().After(deadline), "the first request never arrived")
	}
	second := call(context.Background(), a, up.srv.URL, 1)
	first.await(t)
	assert.Equal(t, []int{http.StatusTooManyRequests}, first.codes)
	cs := []*caller{second}
	for now := time.Duration(0); now <= 5*time.Second && !second.finished(); now += 100 * time.Millisecond {
		if now > 0 {
			clock.Advance(100 * time.Millisecond)
		}
		settle(t, clock, cs)
	}
	second.await(t)
	assert.Equal(t, map[time.Duration]int{0: 1, 3100 * time.Millisecond: 1}, up.arrivals(),
		"the second request reaches the upstream after the Retry-After and the margin, not at 1 s")
}

// countingUpstream allows quota requests per second, counting arrivals
// (at their wall instant) in a sliding second as an upstream with a quota
// does; past it, 429 with Retry-After: 1.
type countingUpstream struct {
	srv   *httptest.Server
	quota int
	mu    sync.Mutex
	at    []time.Time
	held  atomic.Int64
}

func newCountingUpstream(t *testing.T, quota int) *countingUpstream {
	u := &countingUpstream{quota: quota}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			return // connections set up before the run: not counted
		}
		now := time.Now()
		u.mu.Lock()
		u.at = append(u.at, now)
		n := 0
		for _, a := range u.at {
			if now.Sub(a) < time.Second {
				n++
			}
		}
		u.mu.Unlock()
		if n > u.quota {
			u.held.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// fleetFigures is what the upstream saw of one fleet run.
type fleetFigures struct {
	// worst is the most arrivals in any second (sliding), over the
	// second is how many seconds (sliding: arrivals that close a second
	// holding more than the quota), total the arrivals and held the 429s.
	worst, over, total int
	held               int64
	// closest is the shortest span of quota+1 consecutive arrivals.
	closest time.Duration
}

// figures reads the upstream's arrivals.
func (u *countingUpstream) figures() fleetFigures {
	u.mu.Lock()
	at := slices.Clone(u.at)
	u.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	f := fleetFigures{total: len(at), held: u.held.Load(), closest: time.Hour}
	lo := 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= time.Second {
			lo++
		}
		f.worst = max(f.worst, hi-lo+1)
		if hi-lo+1 > u.quota {
			f.over++
		}
		if hi >= u.quota {
			f.closest = min(f.closest, at[hi].Sub(at[hi-u.quota]))
		}
	}
	return f
}

// fleetRun sends, for d, through three Transports (replicas) each on its
// own Limiter and Redis client, on one server, four goroutines per
// replica, to an upstream that allows quota per second, counted on
// arrival; the route's window is the upstream's quota as it states it,
// quota per 1 s, and the Transports' margin margin.
func fleetRun(t *testing.T, addr string, quota int, margin, d time.Duration) fleetFigures {
	const replicas, workers = 3, 4
	up := newCountingUpstream(t, quota)
	route := fmt.Sprintf("/outbound/partner-%d", fleetRuns.Add(1))
	// The workers' connections to the upstream exist before the run (the
	// Transports send through http.DefaultTransport): a fleet at work has
	// them, and a connection set up on loaded cores can move an arrival
	// by more than the margin.
	var warm sync.WaitGroup
	for range replicas * workers {
		warm.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, up.srv.URL+"/warm", nil)
			if resp, err := http.DefaultTransport.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	warm.Wait()
	var trs []*httpclient.Transport
	for r := range replicas {
		store, err := redis.New(redis.Config{Mode: redis.ModeStandalone, Addrs: []string{addr}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close() })
		fallback, err := local.New(local.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = fallback.Close() })
		lim, err := app.New(app.Config{
			HMACSecret: app.Secret(strings.Repeat("5e", 32)),
			InstanceID: fmt.Sprintf("replica-%d", r),
			Profiles: []app.ProfileConfig{{
				Name: "partner", Family: domain.FamilyCostly, Routes: []string{route},
				Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "quota", Limit: int64(quota), Period: time.Second}}},
			}},
		}, app.Deps{Store: store, Fallback: fallback, Recorder: recordertest.Discard{}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = lim.Close() })
		tr, err := httpclient.New(lim, httpclient.Config{Route: route, Margin: margin})
		require.NoError(t, err)
		trs = append(trs, tr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, tr := range trs {
		client := &http.Client{Transport: tr}
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.srv.URL, nil)
					if resp, err := client.Do(req); err == nil {
						resp.Body.Close()
					}
				}
			})
		}
	}
	wg.Wait()
	return up.figures()
}

// fleetRuns makes each run's route, hence its keys, its own.
var fleetRuns atomic.Int64

// TestFleetStaysWithinTheUpstreamQuota (issue 37 item 1): three replicas
// of four workers each, on one Redis, call an upstream that allows 5 per
// second and counts its arrivals in a sliding second; the route's
// window is the upstream's quota as it states it, 5 per 1 s, and the
// Transports widen it by their default margin. The upstream never sees
// more than 5 arrivals in a second and never answers 429, and the fleet
// uses at least 80 % of what the upstream allows in the run.
func TestFleetStaysWithinTheUpstreamQuota(t *testing.T) {
	srv := redistest.NewServer(t)
	const quota, run = 5, 4 * time.Second
	f := fleetRun(t, srv.Addr(), quota, 0, run)
	// The most an upstream counting a sliding second lets through in
	// the run: quota at each of its seconds.
	possible := quota * int(run/time.Second)
	assert.Zero(t, f.over, "seconds with more than the quota at the upstream")
	assert.Zero(t, f.held, "429s from the upstream")
	assert.GreaterOrEqual(t, (f.total-int(f.held))*100, 80*possible, "the quota used")
	t.Logf("FIGURE httpclient.fleet: 3 replicas × 4 workers for %s, upstream quota %d/s, window 5 per 1 s + margin %s: worst second %d arrivals, %d seconds over, %d arrivals of %d possible (%d%%), %d 429s, closest %d+1 arrivals %s apart",
		run, quota, httpclient.DefaultMargin, f.worst, f.over, f.total, possible, f.total*100/possible, f.held, quota, f.closest)
}

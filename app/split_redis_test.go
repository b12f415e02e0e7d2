package app_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// clusterStore is a Redis store on the harness' three-master cluster,
// counting on the caller's instants: the tests' fake clock stands still,
// so no window slides under them.
func clusterStore(t testing.TB) *redis.Store {
	t.Helper()
	s, err := redis.New(redis.Config{Addrs: redistest.Cluster(t), Mode: redis.ModeCluster, Time: redis.CallerTime, Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// clusterConfig is ipConfig with a store deadline a loaded machine meets
// (a side that misses it may have counted, as a lone call may:
// docs/adr/013), and windows of a minute. The rig's clock stands still
// while Redis expires keys in real time, after their window's period: a
// burst that outlasted a one-second window on a loaded machine found its
// ip keys gone and passed each ip's limit twice (40 of 20).
func clusterConfig() app.Config {
	cfg := ipConfig()
	cfg.StoreTimeout = 2 * time.Second
	for _, ws := range []*[]app.WindowConfig{&cfg.Profiles[0].Windows.IP, &cfg.Profiles[0].Windows.User, &cfg.Profiles[0].Windows.APIKey, &cfg.Profiles[0].Windows.Tenant} {
		for i := range *ws {
			(*ws)[i].Period = time.Minute
		}
	}
	return cfg
}

// runID makes the identities of one run its own: the shared servers keep
// the counts of earlier runs for a while.
func runID(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

// randomIP is an address no other run uses.
func randomIP(t testing.TB) netip.Addr {
	t.Helper()
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	b[0] = 0x20 // 2000::/8, grouped by /64 like any IPv6 client
	return netip.AddrFrom16(b)
}

// keyReader reads a window's count straight from the store, by the key
// the Limiter builds (docs/adr/004, docs/adr/013), with Peek: it consumes
// nothing.
type keyReader struct {
	store  *redis.Store
	pseudo *domain.Pseudonymiser
	now    time.Time
}

func newKeyReader(t testing.TB, store *redis.Store, now time.Time) keyReader {
	t.Helper()
	secret, err := hex.DecodeString(testSecret)
	require.NoError(t, err)
	p, err := domain.NewPseudonymiser(secret)
	require.NoError(t, err)
	return keyReader{store: store, pseudo: p, now: now}
}

// remaining is what is left on the route's window w of the identity raw
// of dimension d, counted under its own tag (an ip, or a tenantless user).
func (k keyReader) remaining(t testing.TB, d domain.Dimension, raw, route string, w domain.Window) int64 {
	t.Helper()
	var norm string
	var err error
	if d == domain.DimensionIP {
		norm, err = domain.NormaliseIP(netip.MustParseAddr(raw))
	} else {
		norm, err = domain.NormaliseIdentifier(raw)
	}
	require.NoError(t, err)
	id := k.pseudo.Pseudonymise(d, norm)
	key := domain.KeyParts{Tag: id, Dimension: d, ID: id, RouteKey: route, Window: w.Name}.Key()
	res, err := k.store.Peek(context.Background(), k.now, []domain.Limit{{Key: key, Window: w, Cost: 1}})
	require.NoError(t, err)
	return res.Remaining
}

// TestIPWindowsOnTheCluster is issue 18's ip finding on the real cluster:
// the ip windows live in the ip's slot and the user's in the user's, and
// the decision stays all or nothing across the two. One ip rotating its
// user id passes exactly its limit; 200 goroutines of mixed identities on
// three ips pass exactly the limit per ip; and no key holds a unit of a
// refused request (read from the store).
func TestIPWindowsOnTheCluster(t *testing.T) {
	ipBurst := domain.Window{Name: "burst", Limit: 20, Period: time.Minute}
	userBurst := domain.Window{Name: "burst", Limit: 5, Period: time.Minute}
	store := clusterStore(t)
	r := newReserveRig(t, clusterConfig(), store, conformance.NewReferenceStore())
	keys := newKeyReader(t, store, r.clock.Now())
	id := runID(t)

	t.Run("one ip rotating its user id", func(t *testing.T) {
		ip := randomIP(t)
		passed := 0
		for i := range 200 {
			d := r.eval(t, app.Request{Route: "GET /search", ClientIP: ip, User: fmt.Sprintf("%s-rot-%d", id, i)})
			require.False(t, d.Degraded, "%+v", d)
			if d.State == domain.Allowed {
				passed++
			}
		}
		assert.Equal(t, 20, passed)
		assert.Equal(t, int64(0), keys.remaining(t, domain.DimensionIP, ip.String(), "search", ipBurst))
		// Every refused request released its user side.
		for i := range 200 {
			want := int64(4)
			if i >= 20 {
				want = 5
			}
			require.Equal(t, want, keys.remaining(t, domain.DimensionUser, fmt.Sprintf("%s-rot-%d", id, i), "search", userBurst), "user %d", i)
		}
	})

	t.Run("200 goroutines of mixed identities on three ips", func(t *testing.T) {
		ips := []netip.Addr{randomIP(t), randomIP(t), randomIP(t)}
		const users = 40
		var perIP [3]atomic.Int64
		var perUser [users]atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 200 {
			wg.Go(func() {
				<-start
				for j := range 4 {
					ipi, u := (g+j)%3, (g*7+j)%users
					req := app.Request{Route: "GET /search", ClientIP: ips[ipi]}
					if g%4 != 0 { // a quarter anonymous
						req.User = fmt.Sprintf("%s-mix-%d", id, u)
					}
					d, err := r.l.Evaluate(context.Background(), req)
					if err != nil || d.Degraded {
						t.Errorf("decision %+v, %v", d, err)
						return
					}
					if d.State == domain.Allowed {
						perIP[ipi].Add(1)
						if req.User != "" {
							perUser[u].Add(1)
						}
					}
				}
			})
		}
		close(start)
		wg.Wait()
		for i, ip := range ips {
			assert.Equal(t, int64(20), perIP[i].Load(), "ip %d: exactly its limit", i)
			assert.Equal(t, int64(0), keys.remaining(t, domain.DimensionIP, ip.String(), "search", ipBurst), "ip %d", i)
		}
		for _, c := range r.rec.StoreCalls() {
			assert.NoError(t, c.Err, "%s", c.Op)
		}
		for u := range users {
			assert.Equal(t, 5-perUser[u].Load(), keys.remaining(t, domain.DimensionUser, fmt.Sprintf("%s-mix-%d", id, u), "search", userBurst),
				"user %d counts exactly its admitted requests: refusals left nothing", u)
		}
	})
}

// scopesInTwoSlots returns two scopes of routeKey whose descriptor keys
// hash to different slots.
func scopesInTwoSlots(t testing.TB, routeKey string) (string, string) {
	t.Helper()
	secret, _ := hex.DecodeString(testSecret)
	p, err := domain.NewPseudonymiser(secret)
	require.NoError(t, err)
	slot := func(scope string) uint16 {
		return redis.Slot("{" + p.Pseudonymise(domain.DimensionDescriptor, routeKey+"\x00"+scope) + "}")
	}
	a := "scope-a"
	for i := range 100 {
		b := fmt.Sprint("scope-b-", i)
		if slot(a) != slot(b) {
			return a, b
		}
	}
	t.Fatal("no two scopes in two slots")
	return "", ""
}

// TestEvaluateWindowsAcrossSlotsOnTheCluster: windows of two scopes, in
// two slots, decided all or nothing (the Envoy door's descriptors that
// span hash tags): a refusal on one consumes nothing on the other.
func TestEvaluateWindowsAcrossSlotsOnTheCluster(t *testing.T) {
	store := clusterStore(t)
	r := newReserveRig(t, clusterConfig(), store, conformance.NewReferenceStore())
	ctx := context.Background()
	id := runID(t)
	routeKey := "rk-" + id
	sa, sb := scopesInTwoSlots(t, routeKey)
	wide := domain.Window{Name: "wide", Limit: 10, Period: time.Minute}
	narrow := domain.Window{Name: "narrow", Limit: 2, Period: time.Minute}
	req := func(narrowCost int64) app.WindowsRequest {
		return app.WindowsRequest{RouteKey: routeKey, Windows: []app.CountedWindow{
			{Subject: "a", Window: wide, Cost: 1, Scope: sa},
			{Subject: "b", Window: narrow, Cost: narrowCost, Scope: sb},
		}}
	}
	peek := func() (int64, int64) {
		d, err := r.l.EvaluateWindows(ctx, app.WindowsRequest{RouteKey: routeKey, Windows: []app.CountedWindow{
			{Subject: "a", Window: wide, Cost: 10, Scope: sa},
		}})
		require.NoError(t, err)
		wa := d.Windows.All()[0].Remaining
		d, err = r.l.EvaluateWindows(ctx, app.WindowsRequest{RouteKey: routeKey, Windows: []app.CountedWindow{
			{Subject: "b", Window: narrow, Cost: 2, Scope: sb},
		}})
		require.NoError(t, err)
		return wa, d.Windows.All()[0].Remaining
	}
	for range 2 {
		d, err := r.l.EvaluateWindows(ctx, req(1))
		require.NoError(t, err)
		require.Equal(t, domain.Allowed, d.State, "%+v", d)
	}
	d, err := r.l.EvaluateWindows(ctx, req(1))
	require.NoError(t, err)
	assert.Equal(t, domain.Throttled, d.State)
	assert.Equal(t, "narrow", d.LimitingWindow)
	require.Equal(t, 2, d.Windows.Len(), "every window's status, in request order")
	assert.Equal(t, int64(8), d.Windows.All()[0].Remaining, "the wide window as before the refused request")
	// Peeking by a refused full-cost request reads each side's count.
	wa, wb := peek()
	assert.Equal(t, int64(8), wa, "the refused request left nothing on the other slot")
	assert.Equal(t, int64(0), wb)
}

// BenchmarkTwoSlotDecision measures what a decision whose keys span two
// cluster slots costs against one whose keys share one (docs/adr/013): the
// same two windows, counted per (user, api key) in one slot, or per
// (ip, user) in two; and a two-slot refusal, which releases the side that
// admitted (two round trips). Each sub-benchmark reports its own time and
// allocations; "interleaved" makes the three decisions in turn in one
// loop and reports each one's mean time, so that a machine whose load
// changes during the run weighs on the three alike.
//
//	go test -run '^$' -bench BenchmarkTwoSlotDecision -benchmem ./app/
func BenchmarkTwoSlotDecision(b *testing.B) {
	huge := []app.WindowConfig{{Name: "burst", Limit: domain.MaxLimit, Period: time.Second, Algorithm: domain.GCRA}}
	cfg := app.Config{
		HMACSecret:   testSecret,
		InstanceID:   "bench-split",
		StoreTimeout: 2 * time.Second,
		Profiles: []app.ProfileConfig{
			{Name: "one", Family: domain.FamilyRead, Routes: []string{"GET /one"}, Windows: app.WindowsConfig{User: huge, APIKey: huge}},
			{Name: "two", Family: domain.FamilyRead, Routes: []string{"GET /two"}, Windows: app.WindowsConfig{IP: huge, User: huge}},
			{Name: "refused", Family: domain.FamilyRead, Routes: []string{"GET /refused"}, Windows: app.WindowsConfig{
				IP:   huge,
				User: []app.WindowConfig{{Name: "burst", Limit: 1, Period: time.Hour, Algorithm: domain.GCRA}},
			}},
		},
	}
	store := clusterStore(b)
	lim, err := app.New(cfg, app.Deps{Store: store, Fallback: conformance.NewReferenceStore(), Recorder: &recorder{}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = lim.Close() })
	ctx := context.Background()
	type kind struct {
		name, route string
		state       domain.State
	}
	kinds := []kind{
		{"one-slot", "GET /one", domain.Allowed},
		{"two-slot", "GET /two", domain.Allowed},
		{"two-slot-refused", "GET /refused", domain.Throttled},
	}
	request := func(b *testing.B, k kind) app.Request {
		req := app.Request{Route: k.route, ClientIP: randomIP(b), User: runID(b), APIKey: runID(b)}
		if k.state == domain.Throttled {
			_, err := lim.Evaluate(ctx, req) // takes the user's one unit
			require.NoError(b, err)
		}
		return req
	}
	decide := func(b *testing.B, k kind, req app.Request) {
		d, err := lim.Evaluate(ctx, req)
		if err != nil || d.State != k.state {
			b.Fatalf("%s: %+v, %v", k.name, d, err)
		}
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			req := request(b, k)
			b.ReportAllocs()
			for b.Loop() {
				decide(b, k, req)
			}
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		reqs := make([]app.Request, len(kinds))
		for i, k := range kinds {
			reqs[i] = request(b, k)
		}
		took := make([]time.Duration, len(kinds))
		n := 0
		for b.Loop() {
			for i, k := range kinds {
				start := time.Now()
				decide(b, k, reqs[i])
				took[i] += time.Since(start)
			}
			n++
		}
		for i, k := range kinds {
			b.ReportMetric(float64(took[i].Nanoseconds())/float64(n), k.name+"-ns/op")
		}
	})
}

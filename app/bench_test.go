package app_test

import (
	"context"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// benchConfig is testConfig's nine-window read profile with limits high
// enough that a benchmark measures admissions, not refusals.
func benchConfig() app.Config {
	cfg := testConfig()
	w := &cfg.Profiles[0].Windows
	for _, ws := range [][]app.WindowConfig{w.IP, w.User, w.APIKey, w.Tenant, w.TenantGlobal} {
		for i := range ws {
			ws[i].Limit = 1 << 20
			if ws[i].Algorithm != domain.GCRA {
				ws[i].Limit = domain.MaxSlidingLogLimit
			}
		}
	}
	return cfg
}

// BenchmarkEvaluateNineKeys measures one full decision through
// app.Limiter: route resolution, normalisation, four HMACs, nine keys, one
// atomic store call and the recorder. Identities rotate over 256 users of
// 16 tenants, and the fake clock moves 1 ms per decision.
//
//	go test -run '^$' -bench EvaluateNineKeys -benchmem ./app/
func BenchmarkEvaluateNineKeys(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) ports.Store
	}{
		{"local", func(b *testing.B) ports.Store { return newLocal(b) }},
		{"redis", func(b *testing.B) ports.Store {
			s, err := redis.New(redis.Config{URL: redistest.StandaloneURL(b), Time: redis.CallerTime})
			if err != nil {
				b.Fatalf("redis.New: %v", err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			primary := st.open(b)
			clock := fakeclock.New(time.Now())
			cfg := benchConfig()
			cfg.StoreTimeout = 2 * time.Second
			l, err := app.New(cfg, app.Deps{Store: primary, Fallback: newLocal(b), Clock: clock, Recorder: recordertest.Discard{}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			reqs := make([]app.Request, 256)
			for i := range reqs {
				reqs[i] = app.Request{
					Route:    routeRead,
					ClientIP: netip.AddrFrom4([4]byte{10, 1, byte(i / 16), byte(i)}),
					User:     "user-" + strconv.Itoa(i) + "@example.org",
					Tenant:   "tenant-" + strconv.Itoa(i%16),
					APIKey:   "key-" + strconv.Itoa(i),
				}
			}
			run := func(i int) {
				clock.Advance(time.Millisecond)
				d, err := l.Evaluate(context.Background(), reqs[i%len(reqs)])
				if err != nil || d.State != domain.Allowed {
					b.Fatalf("decision %s (%s), err %v", d.State, d.Cause, err)
				}
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					run(i)
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				var n atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						run(int(n.Add(1)))
					}
				})
			})
		})
	}
}

// plainStore hides every optional interface of its store (ports.Repeater
// among them): the Limiter then makes one call per decision, without
// coalescing.
type plainStore struct{ s ports.Store }

func (p plainStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return p.s.Evaluate(ctx, now, limits)
}

func (p plainStore) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return p.s.Peek(ctx, now, limits)
}

func (p plainStore) Reset(ctx context.Context, key string) error { return p.s.Reset(ctx, key) }

func (p plainStore) Close() error { return p.s.Close() }

// BenchmarkLoneDecision is what coalescing (docs/adr/007) costs a decision
// that finds no call in flight on its key set: nine keys on the local
// store from one goroutine, with the store's ports.Repeater ("coalescing")
// and with it hidden ("plain"). Their difference is the fingerprint, the
// shard's map and its two critical sections.
//
//	go test -run '^$' -bench LoneDecision -benchmem ./app/
func BenchmarkLoneDecision(b *testing.B) {
	for _, mode := range []string{"plain", "coalescing"} {
		b.Run(mode, func(b *testing.B) {
			var primary ports.Store = newLocal(b)
			if mode == "plain" {
				primary = plainStore{primary}
			}
			clock := fakeclock.New(time.Now())
			l, err := app.New(benchConfig(), app.Deps{Store: primary, Fallback: newLocal(b), Clock: clock, Recorder: recordertest.Discard{}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			req := app.Request{Route: routeRead, ClientIP: netip.AddrFrom4([4]byte{10, 1, 2, 3}),
				User: "user@example.org", Tenant: "tenant", APIKey: "key"}
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(time.Millisecond)
				if d, err := l.Evaluate(context.Background(), req); err != nil || d.State != domain.Allowed {
					b.Fatalf("decision %s (%s), err %v", d.State, d.Cause, err)
				}
			}
		})
	}
}

// BenchmarkEvaluateWindows measures one decision of the Envoy door's
// shape on the local store (Limiter.EvaluateWindows: two descriptor
// windows of one scope, pseudonymised subjects), from one goroutine, with
// limits no benchmark reaches.
//
//	go test -run '^$' -bench EvaluateWindows -benchmem ./app/
func BenchmarkEvaluateWindows(b *testing.B) {
	clock := fakeclock.New(time.Now())
	l, err := app.New(benchConfig(), app.Deps{Store: newLocal(b), Fallback: newLocal(b), Clock: clock, Recorder: recordertest.Discard{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	huge := domain.Window{Name: "edge", Limit: 1 << 20, Period: time.Second, Algorithm: domain.GCRA}
	req := app.WindowsRequest{RouteKey: "envoy_edge", Scope: "tenant-1", Windows: []app.CountedWindow{
		{Subject: "user=alice", Window: huge, Cost: 1},
		{Subject: "tenant=tenant-1", Window: domain.Window{Name: "edge_tenant", Limit: 1 << 20, Period: time.Second, Algorithm: domain.GCRA}, Cost: 1},
	}}
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(time.Millisecond)
		if d, err := l.EvaluateWindows(context.Background(), req); err != nil || d.State != domain.Allowed {
			b.Fatalf("decision %s (%s), err %v", d.State, d.Cause, err)
		}
	}
}

package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// BenchmarkShouldRateLimit times ShouldRateLimit over loopback gRPC on the
// shared standalone Redis, two descriptors a request (a tenant and one of
// 1000 users): sluice (one all-or-nothing decision, one script call;
// sliding logs, then GCRA) beside envoyproxy/ratelimit's shape (a fixed window per
// descriptor: INCRBY and EXPIRE per descriptor, pipelined, each
// descriptor counted on its own).
//
//	go test -run '^$' -bench ShouldRateLimit -benchtime 5s ./adapters/envoyrls/
func BenchmarkShouldRateLimit(b *testing.B) {
	b.Run("sluice", func(b *testing.B) {
		r := newRigRecorder(b, limitertest.Redis(b, redistest.StandaloneURL(b)), func(*app.Config) {}, recordertest.Discard{}, "sluice/bench.yaml")
		benchClient(b, r.client, "bench")
	})
	b.Run("sluice-gcra", func(b *testing.B) {
		r := newRigRecorder(b, limitertest.Redis(b, redistest.StandaloneURL(b)), func(*app.Config) {}, recordertest.Discard{}, "sluice/bench-gcra.yaml")
		benchClient(b, r.client, "bench_gcra")
	})
	b.Run("fixed-window-incr", func(b *testing.B) {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Standalone(b)}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(client.Close)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(srv, &fixedWindow{client: client, limit: 100000, prefix: fmt.Sprintf("fw%d_", time.Now().UnixNano())})
		go func() { _ = srv.Serve(ln) }()
		b.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		benchClient(b, rlsv3.NewRateLimitServiceClient(conn), "bench")
	})
}

func benchClient(b *testing.B, c rlsv3.RateLimitServiceClient, domain string) {
	var n atomic.Int64
	var over atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
				Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "t"+strconv.FormatInt(i%10, 10)), desc("user", "u"+strconv.FormatInt(i%1000, 10))},
			})
			if err != nil {
				b.Error(err)
				return
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK {
				over.Add(1)
			}
		}
	})
	b.ReportMetric(float64(over.Load())/float64(max(n.Load(), 1)), "over/op")
}

// fixedWindow is envoyproxy/ratelimit's Redis shape, for the benchmark
// only: per descriptor, INCRBY then EXPIRE on a key of the current fixed
// window, every descriptor's commands in one pipeline, each descriptor
// counted whatever the others decide.
type fixedWindow struct {
	rlsv3.UnimplementedRateLimitServiceServer
	client rueidis.Client
	limit  int64
	prefix string
}

func (f *fixedWindow) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	window := time.Now().Unix() / 60 * 60
	cmds := make(rueidis.Commands, 0, 2*len(req.Descriptors))
	for _, d := range req.Descriptors {
		var k strings.Builder
		k.WriteString(f.prefix + req.Domain + "_")
		for _, e := range d.Entries {
			k.WriteString(e.Key + "_" + e.Value + "_")
		}
		key := k.String() + strconv.FormatInt(window, 10)
		cmds = append(cmds, f.client.B().Incrby().Key(key).Increment(1).Build(), f.client.B().Expire().Key(key).Seconds(60).Build())
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for i, r := range f.client.DoMulti(ctx, cmds...) {
		if i%2 == 1 {
			continue
		}
		v, err := r.AsInt64()
		if err != nil {
			return nil, err
		}
		code := rlsv3.RateLimitResponse_OK
		if v > f.limit {
			code, resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: uint32(max(f.limit-v, 0))})
	}
	return resp, nil
}

// BenchmarkShouldRateLimitSlots times ShouldRateLimit in process on the
// three-master cluster: two descriptors in one slot (a tenant and a path
// counted per tenant), in two slots (a tenant and an address counted
// across tenants: a reservation per slot, docs/adr/013), and in two slots
// refused by one (the other side released: two round trips).
// "interleaved" makes the three decisions in turn in one loop and reports
// each one's mean time, so that a machine whose load changes weighs on
// the three alike.
//
//	go test -run '^$' -bench ShouldRateLimitSlots -benchmem ./adapters/envoyrls/
func BenchmarkShouldRateLimitSlots(b *testing.B) {
	store, err := redis.New(redis.Config{Addrs: redistest.Cluster(b), Mode: redis.ModeCluster, Timeout: limitertest.StoreTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	r := newRigRecorder(b, store, func(*app.Config) {}, recordertest.Discard{}, "sluice/bench-scopes.yaml")
	cfg, err := envoyrls.ParseConfig(readFile(b, "testdata/sluice/bench-scopes.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.New(r.lim, cfg)
	ctx := context.Background()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	kinds := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{"one-slot", &rlsv3.RateLimitRequest{Domain: "bench_scopes", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "t"+run), desc("path", "/p")}}, rlsv3.RateLimitResponse_OK},
		{"two-slot", &rlsv3.RateLimitRequest{Domain: "bench_scopes", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "t"+run), desc("remote_address", "192.0.2.1")}}, rlsv3.RateLimitResponse_OK},
		{"two-slot-refused", &rlsv3.RateLimitRequest{Domain: "bench_scopes", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "t"+run), desc("blocked", run)}}, rlsv3.RateLimitResponse_OVER_LIMIT},
	}
	// Spend the blocked descriptor's one unit.
	if _, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench_scopes", Descriptors: []*rlcommon.RateLimitDescriptor{desc("blocked", run)}}); err != nil {
		b.Fatal(err)
	}
	decide := func(b *testing.B, i int) {
		resp, err := svc.ShouldRateLimit(ctx, kinds[i].req)
		if err != nil || resp.OverallCode != kinds[i].want {
			b.Fatalf("%s: %v, %v", kinds[i].name, resp.GetOverallCode(), err)
		}
	}
	for i, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				decide(b, i)
			}
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		took := make([]time.Duration, len(kinds))
		n := 0
		for b.Loop() {
			for i := range kinds {
				start := time.Now()
				decide(b, i)
				took[i] += time.Since(start)
			}
			n++
		}
		for i, k := range kinds {
			b.ReportMetric(float64(took[i].Nanoseconds())/float64(n), k.name+"-ns/op")
		}
	})
}

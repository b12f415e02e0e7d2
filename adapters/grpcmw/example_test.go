package grpcmw_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpcmw"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// exampleLimiter builds a Limiter on the in-process store: the health
// service's Check limited to 2 calls a minute per client address. A
// service builds it from its YAML file (app.LoadConfig) and
// RATE_LIMIT_HMAC_SECRET, on Redis (adapters/redis).
func exampleLimiter() (lim *app.Limiter, stop func()) {
	primary, _ := local.New(local.Config{})
	fallback, _ := local.New(local.Config{})
	stop = func() {
		lim.Close()
		primary.Close()
		fallback.Close()
	}
	burst := app.WindowsConfig{IP: []app.WindowConfig{{Name: "burst", Limit: 2, Period: time.Minute}}}
	var err error
	lim, err = app.New(app.Config{
		HMACSecret: app.Secret(strings.Repeat("5e", 32)), // example only: never hard-code a secret
		Profiles: []app.ProfileConfig{
			{Name: "health", Family: domain.FamilyRead, Routes: []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/List"}, Windows: burst},
			{Name: "health_watch", Family: domain.FamilyAuth, Routes: []string{"/grpc.health.v1.Health/Watch"}, Windows: burst},
		},
	}, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	return lim, stop
}

// The README's gRPC server example: interceptors on the server, the boot
// check over every registered method.
func Example() {
	lim, stop := exampleLimiter()
	defer stop()

	rl, err := grpcmw.New(lim, grpcmw.Config{})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(rl.Unary()), grpc.StreamInterceptor(rl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := grpcmw.CheckServer(lim, srv); err != nil {
		panic(err) // a method without a profile: refuse to boot
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
}

// tokenCounter is the health service whose Check reports what it cost in
// trailer metadata, as a service that learns its cost by serving would
// (LLM tokens, rows).
type tokenCounter struct{ *health.Server }

func (s tokenCounter) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("tokens-used", "37"))
	return s.Server.Check(ctx, r)
}

// A method charged by what it served: WithCost makes the interceptor
// reserve the profile's cost (100 tokens of the address's 1000 an hour)
// and settle, once the handler has returned, at the tokens it reported
// in its trailer; the next decision sees what was really spent.
func ExampleWithCost() {
	primary, _ := local.New(local.Config{})
	fallback, _ := local.New(local.Config{})
	defer primary.Close()
	defer fallback.Close()
	lim, err := app.New(app.Config{
		HMACSecret: app.Secret(strings.Repeat("5e", 32)), // example only: never hard-code a secret
		Profiles: []app.ProfileConfig{{
			Name: "health", Family: domain.FamilyCostly, Routes: []string{"/grpc.health.v1.Health/Check"}, Cost: 100,
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "tokens", Limit: 1000, Period: time.Hour}}},
		}},
	}, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	rl, err := grpcmw.New(lim, grpcmw.Config{},
		grpcmw.WithCost(func(_ context.Context, _ string, err error, trailer metadata.MD) (int64, bool) {
			v := trailer.Get("tokens-used")
			if err != nil || len(v) != 1 {
				return 0, false
			}
			n, perr := strconv.ParseInt(v[0], 10, 64)
			return n, perr == nil
		}))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(rl.Unary()))
	healthpb.RegisterHealthServer(srv, tokenCounter{health.NewServer()})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		fmt.Println(status.Code(err), md.Get(grpcmw.MetadataRateLimit))
	}
	// Output:
	// OK ["ip-tokens";r=900;t=3600]
	// OK ["ip-tokens";r=863;t=3600]
	// OK ["ip-tokens";r=826;t=3600]
}

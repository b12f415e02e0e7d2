package grpcmw_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/adapters/grpcmw"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

// The stores and Limiters of these tests.
var (
	newLocal   = limitertest.Local
	newRedis   = limitertest.Redis
	newLimiter = limitertest.Limiter
	backends   = limitertest.Backends()
)

// testConfig loads testdata/sluice.yaml with a fresh secret, so that tests
// sharing a Redis server never share a key.
func testConfig(t testing.TB) app.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/sluice.yaml")
	require.NoError(t, err)
	b := make([]byte, 32)
	_, err = rand.Read(b)
	require.NoError(t, err)
	cfg, err := app.ParseConfig(data, func(k string) (string, bool) {
		return hex.EncodeToString(b), k == app.EnvHMACSecret
	})
	require.NoError(t, err)
	return cfg
}

// countingHealth is the health service, counting the calls its handlers
// receive.
type countingHealth struct {
	*health.Server
	checks, watches, lists atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.checks.Add(1)
	return h.Server.Check(ctx, r)
}

func (h *countingHealth) Watch(r *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	h.watches.Add(1)
	return h.Server.Watch(r, s)
}

func (h *countingHealth) List(ctx context.Context, r *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	h.lists.Add(1)
	return h.Server.List(ctx, r)
}

// Metadata keys of the stand-in authentication.
const (
	mdUser   = "x-test-user"
	mdTenant = "x-test-tenant"
)

type principalKey struct{}

// authenticate is the tests' stand-in authentication interceptor: it
// reads the principal from metadata and stores it in the context, where
// identity finds it.
func authenticate(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	id := grpcmw.Identity{}
	if v := md.Get(mdUser); len(v) > 0 {
		id.User = v[0]
	}
	if v := md.Get(mdTenant); len(v) > 0 {
		id.Tenant = v[0]
	}
	return context.WithValue(ctx, principalKey{}, id)
}

func identity(ctx context.Context, _ string) grpcmw.Identity {
	id, _ := ctx.Value(principalKey{}).(grpcmw.Identity)
	return id
}

type authStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authStream) Context() context.Context { return s.ctx }

// service is a gRPC server on a real loopback port, with the stand-in
// authentication and then sluice in front of the health service.
type service struct {
	srv    *grpc.Server
	health *countingHealth
	client healthpb.HealthClient
}

func newService(t testing.TB, lim grpcmw.Evaluator, cfg grpcmw.Config) *service {
	t.Helper()
	if cfg.Identity == nil {
		cfg.Identity = identity
	}
	rl, err := grpcmw.New(lim, cfg)
	require.NoError(t, err)
	s := &service{health: &countingHealth{Server: health.NewServer()}}
	s.srv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(authenticate(ctx), req)
		}, rl.Unary()),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, authStream{ss, authenticate(ss.Context())})
		}, rl.Stream()),
	)
	healthpb.RegisterHealthServer(s.srv, s.health)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(s.srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	s.client = healthpb.NewHealthClient(conn)
	return s
}

// check calls Check with the given metadata pairs, returning the error
// and the header metadata.
func (s *service) check(t testing.TB, pairs ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
	var md metadata.MD
	_, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	return md, err
}

// watch opens a Watch stream and reads its first message (or its error),
// returning the header metadata.
func (s *service) watch(t testing.TB, pairs ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
	stream, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	_, err = stream.Recv()
	md, _ := stream.Header()
	return md, err
}

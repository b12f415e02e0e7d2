package grpcmw_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpcmw"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// Methods of testdata/reserve.yaml.
const (
	checkMethod = "/grpc.health.v1.Health/Check"
	listMethod  = "/grpc.health.v1.Health/List"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// reserveConfig loads testdata/reserve.yaml with a fresh secret.
func reserveConfig(t testing.TB) app.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/reserve.yaml")
	require.NoError(t, err)
	b := make([]byte, 32)
	_, err = rand.Read(b)
	require.NoError(t, err)
	cfg, err := app.ParseConfig(data, func(k string) (string, bool) { return hex.EncodeToString(b), k == app.EnvHMACSecret })
	require.NoError(t, err)
	return cfg
}

// signals is a Recorder that tells a test when a settlement or a renewal
// reached the store.
type signals struct {
	recordertest.Memory
	settles, renews chan ports.StoreCall
}

func newSignals() *signals {
	return &signals{settles: make(chan ports.StoreCall, 256), renews: make(chan ports.StoreCall, 256)}
}

func (s *signals) RecordStoreCall(ctx context.Context, call ports.StoreCall) {
	s.Memory.RecordStoreCall(ctx, call)
	switch call.Op {
	case ports.OpSettle:
		s.settles <- call
	case ports.OpRenew:
		s.renews <- call
	}
}

func await(t *testing.T, ch <-chan ports.StoreCall, what string) {
	t.Helper()
	select {
	case c := <-ch:
		require.NoError(t, c.Err, what)
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
}

// scripted is the health service with handlers a test writes; a nil one
// is the standard service's.
type scripted struct {
	*health.Server
	check func(ctx context.Context) error
	list  func(ctx context.Context) error
	watch func(s healthpb.Health_WatchServer) error
}

func (s *scripted) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if s.check == nil {
		return s.Server.Check(ctx, r)
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *scripted) List(ctx context.Context, r *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	if s.list == nil {
		return s.Server.List(ctx, r)
	}
	if err := s.list(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthListResponse{}, nil
}

func (s *scripted) Watch(r *healthpb.HealthCheckRequest, ws healthpb.Health_WatchServer) error {
	if s.watch == nil {
		return s.Server.Watch(r, ws)
	}
	return s.watch(ws)
}

// reserveService serves impl behind the stand-in authentication and
// sluice, with an outermost interceptor that turns a unary handler's
// panic into Internal (as a recovery interceptor does).
func reserveService(t *testing.T, lim grpcmw.Evaluator, cfg grpcmw.Config, impl *scripted, opts ...grpcmw.Option) healthpb.HealthClient {
	t.Helper()
	cfg.Identity = identity
	rl, err := grpcmw.New(lim, cfg, opts...)
	require.NoError(t, err)
	impl.Server = health.NewServer()
	recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Error(codes.Internal, "panic")
			}
		}()
		return h(ctx, req)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(recovery, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(authenticate(ctx), req)
		}, rl.Unary()),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, authStream{ss, authenticate(ss.Context())})
		}, rl.Stream()),
	)
	healthpb.RegisterHealthServer(srv, impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// asAlice is a call context of user alice, ended after 10 s.
func asAlice(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, mdUser, "alice@example.org")
}

// remaining peeks alice's quota on method (nothing consumed).
func remaining(t *testing.T, lim *app.Limiter, method string) int64 {
	t.Helper()
	d, err := lim.Peek(t.Context(), app.Request{Route: method, ClientIP: netip.MustParseAddr("127.0.0.1"), User: "alice@example.org"})
	require.NoError(t, err)
	return d.Remaining
}

func trailer(ctx context.Context, kv ...string) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(kv...))
}

// TestReservedCallSettlesByWhatTheHandlerReports: Check reserves 5 of
// alice's 20 and settles, after the handler returns, at the cost it
// reports in x-cost trailer metadata; a server-fault code refunds (the
// profile refunds failures) unless the handler reported a cost; a report
// that is not one non-negative integer is ignored and audited.
func TestReservedCallSettlesByWhatTheHandlerReports(t *testing.T) {
	cases := []struct {
		name    string
		check   func(ctx context.Context) error
		code    codes.Code
		left    int64
		audited bool
	}{
		{"cost trailer", func(ctx context.Context) error { trailer(ctx, "x-cost", "2"); return nil }, codes.OK, 18, false},
		{"charge past the cost reserved", func(ctx context.Context) error { trailer(ctx, "X-Cost", "9"); return nil }, codes.OK, 11, false},
		{"nothing reported keeps the cost reserved", func(context.Context) error { return nil }, codes.OK, 15, false},
		{"Unavailable refunds", func(context.Context) error { return status.Error(codes.Unavailable, "down") }, codes.Unavailable, 20, false},
		{"a plain error (Unknown) refunds", func(context.Context) error { return os.ErrClosed }, codes.Unknown, 20, false},
		{"DeadlineExceeded refunds", func(context.Context) error { return context.DeadlineExceeded }, codes.DeadlineExceeded, 20, false},
		{"Internal with a report charges the report", func(ctx context.Context) error {
			trailer(ctx, "x-cost", "4")
			return status.Error(codes.Internal, "oops")
		}, codes.Internal, 16, false},
		{"NotFound keeps the cost reserved", func(context.Context) error { return status.Error(codes.NotFound, "no") }, codes.NotFound, 15, false},
		{"a code of refund_codes refunds", func(context.Context) error { return status.Error(codes.AlreadyExists, "dup") }, codes.AlreadyExists, 20, false},
		{"not a number ignored", func(ctx context.Context) error { trailer(ctx, "x-cost", "two"); return nil }, codes.OK, 15, true},
		{"two values ignored", func(ctx context.Context) error { trailer(ctx, "x-cost", "1", "x-cost", "2"); return nil }, codes.OK, 15, true},
		{"a panic refunds", func(context.Context) error { panic("handler bug") }, codes.Internal, 20, false},
	}
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					rec := newSignals()
					lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
					audit := &lockedLog{}
					client := reserveService(t, lim, grpcmw.Config{AuditLog: slog.New(slog.NewTextHandler(audit, nil))}, &scripted{check: tc.check})
					var md metadata.MD
					_, err := client.Check(asAlice(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
					assert.Equal(t, tc.code, status.Code(err), "%v", err)
					assert.Equal(t, "15", one(md, grpcmw.MetadataRemaining), "the decision reserved 5")
					await(t, rec.settles, "settlement")
					assert.Equal(t, tc.left, remaining(t, lim, checkMethod))
					if tc.audited {
						assert.Contains(t, audit.String(), "cost report ignored")
						assert.Contains(t, audit.String(), "source=x-cost")
					} else {
						assert.Empty(t, audit.String())
					}
				})
			}
		})
	}
}

// TestWithCostReportsByFunction: WithCost settles at what the function
// returns, on a method without settle rules too.
func TestWithCostReportsByFunction(t *testing.T) {
	rec := newSignals()
	lim := newLimiter(t, reserveConfig(t), newLocal(t), rec)
	byTrailer := func(_ context.Context, method string, err error, tr metadata.MD) (int64, bool) {
		if method != checkMethod || err != nil || len(tr.Get("tokens")) != 1 {
			return 0, false
		}
		n, perr := strconv.ParseInt(tr.Get("tokens")[0], 10, 64)
		return n, perr == nil
	}
	client := reserveService(t, lim, grpcmw.Config{}, &scripted{check: func(ctx context.Context) error {
		trailer(ctx, "tokens", "7")
		return nil
	}}, grpcmw.WithCost(byTrailer))
	_, err := client.Check(asAlice(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	await(t, rec.settles, "settlement")
	assert.Equal(t, int64(13), remaining(t, lim, checkMethod))
}

// TestStreamHoldsItsSlotUntilTheHandlerReturns: at most two Watch streams
// at once per user; a third is refused while two are open, and one opens
// again once a client has cancelled its stream (the handler returns).
// A stream's cost comes from the trailer its handler sets.
func TestStreamHoldsItsSlotUntilTheHandlerReturns(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
			client := reserveService(t, lim, grpcmw.Config{}, &scripted{watch: func(s healthpb.Health_WatchServer) error {
				if err := s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
					return err
				}
				<-s.Context().Done()
				s.SetTrailer(metadata.Pairs("x-cost", "3"))
				return s.Context().Err()
			}})
			open := func(ctx context.Context) error {
				stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					return err
				}
				_, err = stream.Recv()
				return err
			}
			ctx1, cancel1 := context.WithCancel(asAlice(t))
			defer cancel1()
			require.NoError(t, open(ctx1))
			ctx2, cancel2 := context.WithCancel(asAlice(t))
			defer cancel2()
			require.NoError(t, open(ctx2))
			assert.Equal(t, int64(0), remaining(t, lim, watchMethod), "two streams held")

			err := open(asAlice(t))
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)

			cancel1()
			await(t, rec.settles, "settlement")
			assert.Equal(t, int64(1), remaining(t, lim, watchMethod), "one stream's slot back")
			ctx3, cancel3 := context.WithCancel(asAlice(t))
			defer cancel3()
			require.NoError(t, open(ctx3))
			cancel2()
			cancel3()
			await(t, rec.settles, "settlement")
			await(t, rec.settles, "settlement")
			assert.Equal(t, int64(2), remaining(t, lim, watchMethod), "every slot back")
			d, err := lim.Peek(t.Context(), app.Request{Route: watchMethod, ClientIP: netip.MustParseAddr("127.0.0.1"), User: "alice@example.org"})
			require.NoError(t, err)
			for _, w := range d.Windows.All() {
				if w.Window.Name == "hourly" {
					assert.Equal(t, int64(100-3*3), w.Remaining, "each stream settled at the 3 its trailer reported")
				}
			}
		})
	}
}

// TestUnaryConcurrencyAndPanic: List holds one call at a time; a panicking
// handler gives its slot back before the panic goes on.
func TestUnaryConcurrencyAndPanic(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := newSignals()
			lim := newLimiter(t, reserveConfig(t), b.Primary(t), rec)
			entered, release := make(chan struct{}, 1), make(chan struct{})
			var calls atomic.Int64
			client := reserveService(t, lim, grpcmw.Config{}, &scripted{list: func(context.Context) error {
				switch calls.Add(1) {
				case 1:
					entered <- struct{}{}
					<-release
				case 2:
					panic("handler bug")
				}
				return nil
			}})
			done := make(chan error, 1)
			go func() {
				_, err := client.List(asAlice(t), &healthpb.HealthListRequest{})
				done <- err
			}()
			<-entered
			_, err := client.List(asAlice(t), &healthpb.HealthListRequest{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			close(release)
			require.NoError(t, <-done)
			await(t, rec.settles, "settlement")

			_, err = client.List(asAlice(t), &healthpb.HealthListRequest{})
			require.Equal(t, codes.Internal, status.Code(err), "the second call panics: %v", err)
			await(t, rec.settles, "settlement")
			_, err = client.List(asAlice(t), &healthpb.HealthListRequest{})
			require.NoError(t, err, "the panicking call's slot came back")
			assert.Equal(t, int64(3), calls.Load())
		})
	}
}

// TestRenewalKeepsALongCallsSlot: List's lease lives 3 s. A call that
// runs 5 s keeps its slot while the interceptor renews the lease every
// second; without the renewals (the interceptor's clock never fires) the
// slot comes back at 3 s. Both on a fake clock.
func TestRenewalKeepsALongCallsSlot(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, b := range fakeClockBackends {
		for _, renewed := range []bool{true, false} {
			t.Run(b.Name+"/renewed="+strconv.FormatBool(renewed), func(t *testing.T) {
				clock := fakeclock.New(start)
				rec := newSignals()
				lim, err := app.New(reserveConfig(t), app.Deps{Store: b.Primary(t), Fallback: newLocal(t), Clock: clock, Recorder: rec})
				require.NoError(t, err)
				t.Cleanup(func() { _ = lim.Close() })
				icClock := clock
				if !renewed {
					icClock = fakeclock.New(start)
				}
				entered, release := make(chan struct{}, 1), make(chan struct{})
				var calls atomic.Int64
				client := reserveService(t, lim, grpcmw.Config{Clock: icClock}, &scripted{list: func(context.Context) error {
					if calls.Add(1) == 1 {
						entered <- struct{}{}
						<-release
					}
					return nil
				}})
				done := make(chan error, 1)
				go func() {
					_, err := client.List(asAlice(t), &healthpb.HealthListRequest{})
					done <- err
				}()
				<-entered
				if renewed {
					for range 5 {
						awaitTimer(t, clock)
						clock.Advance(time.Second)
						await(t, rec.renews, "renewal")
					}
				} else {
					clock.Advance(5 * time.Second)
				}
				_, err = client.List(asAlice(t), &healthpb.HealthListRequest{})
				if renewed {
					assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the renewed lease still holds the slot: %v", err)
				} else {
					assert.NoError(t, err, "the lease expired at 3 s")
				}
				close(release)
				require.NoError(t, <-done)
			})
		}
	}
}

// awaitTimer waits until a goroutine sleeps on clock (the renewal loop).
func awaitTimer(t *testing.T, clock *fakeclock.Clock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clock.Timers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the renewal loop did not wait on the clock within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// lockedLog collects what the server's goroutines log.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fakeClockBackends are the stores of the fake-clock tests: the local
// store, and Redis on the caller's clock (by default it reads its own,
// which a fake clock does not move).
var fakeClockBackends = []limitertest.Backend{
	{Name: "local", Primary: func(t testing.TB) ports.Store { return newLocal(t) }},
	{Name: "redis", Primary: func(t testing.TB) ports.Store {
		s, err := redis.New(redis.Config{URL: redistest.StandaloneURL(t), Mode: redis.ModeStandalone, Timeout: limitertest.StoreTimeout, Time: redis.CallerTime})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

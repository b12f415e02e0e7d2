package envoyrls_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// t0 is the fake clock's start: every timeline of these tests is fixed.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// backend is a primary store the service's tests run on.
type backend struct {
	name    string
	primary func(t testing.TB) ports.Store
}

// backends are the embedded local store, the shared standalone Redis and
// the shared three-master cluster.
func backends() []backend {
	return []backend{
		{"local", func(t testing.TB) ports.Store { return limitertest.Local(t) }},
		{"redis", func(t testing.TB) ports.Store {
			// The caller's (fake) clock, as on the cluster: timelines that
			// advance it run on every store.
			s, err := redis.New(redis.Config{URL: redistest.StandaloneURL(t), Mode: redis.ModeStandalone, Timeout: limitertest.StoreTimeout, Time: redis.CallerTime})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"cluster", func(t testing.TB) ports.Store {
			s, err := redis.New(redis.Config{Addrs: redistest.Cluster(t), Mode: redis.ModeCluster, Timeout: limitertest.StoreTimeout, Time: redis.CallerTime})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
}

// rig is the service on a loopback port, with a real client of the
// generated API.
type rig struct {
	client rlsv3.RateLimitServiceClient
	clock  *fakeclock.Clock
	rec    *recordertest.Memory
	lim    *app.Limiter
	// secret is the Limiter's HMAC secret: a test can tell which slot a
	// scope's keys fall in.
	secret []byte
}

// newRig serves the configuration files under testdata (relative paths)
// on primary. Every rig has its own HMAC secret, so rigs sharing a Redis
// server never share a key.
func newRig(t testing.TB, primary ports.Store, files ...string) *rig {
	t.Helper()
	return newRigWith(t, primary, func(*app.Config) {}, files...)
}

func newRigWith(t testing.TB, primary ports.Store, edit func(*app.Config), files ...string) *rig {
	t.Helper()
	return newRigRecorder(t, primary, edit, &recordertest.Memory{}, files...)
}

// newRigRecorder is newRigWith recording in rec (a benchmark records in
// recordertest.Discard, which keeps nothing).
func newRigRecorder(t testing.TB, primary ports.Store, edit func(*app.Config), rec ports.Recorder, files ...string) *rig {
	t.Helper()
	secret := make([]byte, 32)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	acfg := app.Config{HMACSecret: app.Secret(hex.EncodeToString(secret)), StoreTimeout: limitertest.StoreTimeout}
	edit(&acfg)
	clock := fakeclock.New(t0)
	lim, err := app.New(acfg, app.Deps{Store: primary, Fallback: limitertest.Local(t), Clock: clock, Recorder: rec})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	docs := make([][]byte, 0, len(files))
	for _, f := range files {
		docs = append(docs, readFile(t, filepath.Join("testdata", f)))
	}
	cfg, err := envoyrls.ParseConfig(docs...)
	require.NoError(t, err)
	r := &rig{clock: clock, lim: lim, secret: secret}
	r.rec, _ = rec.(*recordertest.Memory)
	r.serve(t, envoyrls.New(lim, cfg))
	return r
}

// newPeerRig serves the configuration under path (loaded with lo) with
// the service's options so, on primary.
func newPeerRig(t testing.TB, primary ports.Store, path string, lo envoyrls.LoadOptions, so envoyrls.Options) *rig {
	t.Helper()
	secret := make([]byte, 32)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	clock := fakeclock.New(t0)
	lim, err := app.New(app.Config{HMACSecret: app.Secret(hex.EncodeToString(secret)), StoreTimeout: limitertest.StoreTimeout},
		app.Deps{Store: primary, Fallback: limitertest.Local(t), Clock: clock, Recorder: &recordertest.Memory{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	cfg, err := envoyrls.LoadConfigWith(path, lo)
	require.NoError(t, err)
	r := &rig{clock: clock, lim: lim, secret: secret}
	r.serve(t, envoyrls.NewWithOptions(lim, cfg, so))
	return r
}

// serve serves svc on a loopback port and connects r's client.
func (r *rig) serve(t testing.TB, svc rlsv3.RateLimitServiceServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	r.client = rlsv3.NewRateLimitServiceClient(conn)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// call sends one ShouldRateLimit.
func (r *rig) call(t testing.TB, domainName string, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domainName, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	return resp
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// appConfig is app.Config, for the rigs' edits.
type appConfig = app.Config

func limitertestLocal(t testing.TB) ports.Store { return limitertest.Local(t) }

func header(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }

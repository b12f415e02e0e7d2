package grpcmw_test

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpcmw"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// parseField parses ratelimit-policy or ratelimit metadata with httpsfv,
// an RFC 9651 parser sluice does not write with: names and integer
// parameters.
func parseField(t *testing.T, md metadata.MD, key string) map[string]map[string]int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(md.Get(key))
	require.NoError(t, err, "%s: %q", key, md.Get(key))
	out := map[string]map[string]int64{}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok)
		name, ok := item.Value.(string)
		require.True(t, ok, "%v is not a String", item.Value)
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			params[k], ok = v.(int64)
			require.True(t, ok, "%s=%v is not an Integer", k, v)
		}
		out[name] = params
	}
	return out
}

func one(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) == 1 {
		return v[0]
	}
	return ""
}

func TestAllowedCallCarriesMetadata(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), nil), grpcmw.Config{})
			md, err := svc.check(t, mdUser, "alice@example.org", mdTenant, "acme")
			require.NoError(t, err)
			assert.Equal(t, int64(1), svc.health.checks.Load())
			// ip burst 3 → 2 left, user burst 2 → 1, user sustained 50 → 49.
			assert.Equal(t, "2", one(md, grpcmw.MetadataLimit))
			assert.Equal(t, "1", one(md, grpcmw.MetadataRemaining))
			assert.Equal(t, map[string]map[string]int64{
				"ip-burst":       {"q": 3, "w": 60},
				"user-burst":     {"q": 2, "w": 60},
				"user-sustained": {"q": 50, "w": 3600},
			}, parseField(t, md, grpcmw.MetadataPolicy))
			rl := parseField(t, md, grpcmw.MetadataRateLimit)
			require.Contains(t, rl, "user-burst")
			assert.Equal(t, int64(1), rl["user-burst"]["r"])
			assert.Empty(t, md.Get(grpcmw.MetadataRetryAfter))
		})
	}
}

func TestThrottledCallNeverReachesTheHandler(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), nil), grpcmw.Config{})
			for range 3 {
				_, err := svc.check(t)
				require.NoError(t, err)
			}
			md, err := svc.check(t)
			st := status.Convert(err)
			require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
			assert.Equal(t, grpcmw.MessageThrottled, st.Message())
			assert.Equal(t, int64(3), svc.health.checks.Load(), "the handler is not called on a refusal")

			var retry *errdetails.RetryInfo
			var quota *errdetails.QuotaFailure
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.RetryInfo:
					retry = d
				case *errdetails.QuotaFailure:
					quota = d
				}
			}
			require.NotNil(t, retry, "RetryInfo detail")
			require.NotNil(t, quota, "QuotaFailure detail")
			delay := retry.GetRetryDelay().AsDuration()
			assert.True(t, delay >= time.Second && delay <= time.Minute, "retry delay %s", delay)
			require.Len(t, quota.GetViolations(), 1)
			v := quota.GetViolations()[0]
			assert.Equal(t, "ip-burst", v.GetSubject())
			assert.Equal(t, "ip-burst", v.GetQuotaId())
			assert.Equal(t, int64(3), v.GetQuotaValue())

			rl := parseField(t, md, grpcmw.MetadataRateLimit)
			require.Contains(t, rl, "ip-burst")
			assert.Equal(t, int64(0), rl["ip-burst"]["r"])
			retryAfter, err := strconv.ParseInt(one(md, grpcmw.MetadataRetryAfter), 10, 64)
			require.NoError(t, err)
			assert.Equal(t, int64(delay/time.Second), retryAfter)
			assert.GreaterOrEqual(t, retryAfter, rl["ip-burst"]["t"])
		})
	}
}

func TestStreamInterceptor(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), nil), grpcmw.Config{})
			for i := range 2 {
				md, err := svc.watch(t)
				require.NoError(t, err, "watch %d", i)
				assert.Equal(t, strconv.Itoa(1-i), one(md, grpcmw.MetadataRemaining))
			}
			md, err := svc.watch(t)
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			assert.Equal(t, int64(2), svc.health.watches.Load(), "the handler is not called on a refusal")
			assert.NotEmpty(t, one(md, grpcmw.MetadataRetryAfter))
		})
	}
}

// TestInvalidContextIsUniform: one code, one message, whatever the cause.
func TestInvalidContextIsUniform(t *testing.T) {
	rec := &recordertest.Memory{}
	cfg := testConfig(t)
	cfg.Profiles = cfg.Profiles[:2] // List has no profile
	svc := newService(t, newLimiter(t, cfg, newLocal(t), rec), grpcmw.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	cases := []struct {
		cause domain.Cause
		call  func() error
	}{
		{domain.CauseProfileMissing, func() error { _, err := svc.client.List(t.Context(), nil); return err }},
		{domain.CauseIPUnresolved, func() error { _, err := svc.check(t, "x-forwarded-for", "unknown"); return err }},
		{domain.CauseDimensionInvalid, func() error {
			_, err := svc.check(t, mdUser, strings.Repeat("u", domain.MaxIdentifierLen+1))
			return err
		}},
		{domain.CauseDimensionInvalid, func() error {
			_, err := svc.watch(t, mdTenant, strings.Repeat("t", domain.MaxIdentifierLen+1))
			return err
		}},
	}
	for _, c := range cases {
		st := status.Convert(c.call())
		assert.Equal(t, codes.InvalidArgument, st.Code(), "%s", c.cause)
		assert.Equal(t, grpcmw.MessageInvalidContext, st.Message())
		assert.Empty(t, st.Details())
		last, ok := rec.LastDecision()
		require.True(t, ok)
		assert.Equal(t, c.cause, last.Decision.Cause)
	}
	assert.Zero(t, svc.health.checks.Load()+svc.health.watches.Load()+svc.health.lists.Load(), "no handler called")
}

// TestSpoofedForwardedForChangesNothing: x-forwarded-for from a peer that
// is not a trusted proxy is ignored.
func TestSpoofedForwardedForChangesNothing(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			rec := &recordertest.Memory{}
			svc := newService(t, newLimiter(t, testConfig(t), b.Primary(t), rec),
				grpcmw.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
			var codesSeen []codes.Code
			for i := range 4 {
				_, err := svc.check(t, "x-forwarded-for", "198.51.100."+strconv.Itoa(i+1))
				codesSeen = append(codesSeen, status.Code(err))
				last, _ := rec.LastDecision()
				assert.Equal(t, "127.0.0.1", last.ClientIP.String())
			}
			assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted}, codesSeen)
		})
	}
}

func TestTrustedProxyForwardsClients(t *testing.T) {
	rec := &recordertest.Memory{}
	svc := newService(t, newLimiter(t, testConfig(t), newLocal(t), rec),
		grpcmw.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	for _, client := range []string{"198.51.100.1", "2001:db8::7"} {
		_, err := svc.check(t, "x-forwarded-for", "6.6.6.6, "+client+", 127.0.0.9")
		require.NoError(t, err)
		last, _ := rec.LastDecision()
		assert.Equal(t, client, last.ClientIP.String())
	}
}

// TestRedisOutage: with Redis stopped, an auth method fails closed with
// Unavailable and a read method bypasses.
func TestRedisOutage(t *testing.T) {
	srv := redistest.NewServer(t)
	svc := newService(t, newLimiter(t, testConfig(t), newRedis(t, srv.URL()), nil), grpcmw.Config{})
	_, err := svc.watch(t)
	require.NoError(t, err, "healthy before the outage")
	require.NoError(t, srv.Stop())

	_, err = svc.watch(t)
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	assert.Equal(t, grpcmw.MessageDenied, st.Message())
	require.Len(t, st.Details(), 1)
	retry, ok := st.Details()[0].(*errdetails.RetryInfo)
	require.True(t, ok)
	assert.Equal(t, time.Second, retry.GetRetryDelay().AsDuration())
	assert.Equal(t, int64(1), svc.health.watches.Load(), "the handler is not called")

	md, err := svc.check(t)
	require.NoError(t, err, "a read method bypasses")
	assert.Equal(t, int64(1), svc.health.checks.Load())
	assert.Contains(t, parseField(t, md, grpcmw.MetadataRateLimit), "ip-degraded_cap")
}

func TestRecordingFailureFailsClosed(t *testing.T) {
	rec := &recordertest.Memory{}
	svc := newService(t, newLimiter(t, testConfig(t), newLocal(t), rec), grpcmw.Config{})
	rec.FailDecisions(assert.AnError)
	_, err := svc.check(t)
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Zero(t, svc.health.checks.Load())
}

func TestBootCheck(t *testing.T) {
	lim := newLimiter(t, testConfig(t), newLocal(t), nil)
	svc := newService(t, lim, grpcmw.Config{})
	assert.Equal(t, []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/List", "/grpc.health.v1.Health/Watch"}, grpcmw.Methods(svc.srv))
	require.NoError(t, grpcmw.CheckServer(lim, svc.srv))

	cfg := testConfig(t)
	cfg.Profiles = cfg.Profiles[:2]
	err := grpcmw.CheckServer(newLimiter(t, cfg, newLocal(t), nil), svc.srv)
	require.ErrorIs(t, err, app.ErrRouteWithoutProfile)
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
	assert.Contains(t, err.Error(), `"/grpc.health.v1.Health/List"`)
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := grpcmw.New(nil, grpcmw.Config{})
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
	_, err = grpcmw.New(newLimiter(t, testConfig(t), newLocal(t), nil), grpcmw.Config{TrustedProxies: []netip.Prefix{{}}})
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
}

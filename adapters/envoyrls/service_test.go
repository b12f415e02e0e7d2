package envoyrls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/domain"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// TestRefusedRequestConsumesNothing is envoyproxy/ratelimit's issue #1060:
// a request refused by one descriptor must not consume the others. Tenant
// 100/min and user 20/min, 10 hits a request: two requests pass, the next
// three are refused by the user limit, and the tenant has spent 20, not
// 50 (what counting each descriptor on its own would leave).
func TestRefusedRequestConsumesNothing(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/shared.yaml")
			want := []rlsv3.RateLimitResponse_Code{ok, ok, over, over, over}
			for i, code := range want {
				resp := r.call(t, "shared", 10, desc("tenant", "acme"), desc("user", "u1"))
				require.Equal(t, code, resp.OverallCode, "request %d", i)
				if code == over {
					assert.Equal(t, ok, resp.Statuses[0].Code, "the tenant alone would admit it")
					assert.Equal(t, over, resp.Statuses[1].Code)
					assert.Equal(t, uint32(80), resp.Statuses[0].LimitRemaining, "nothing consumed on the tenant")
				}
			}
			resp := r.call(t, "shared", 1, desc("tenant", "acme"))
			require.Equal(t, ok, resp.OverallCode)
			assert.Equal(t, uint32(100), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
			assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, resp.Statuses[0].CurrentLimit.Unit)
			assert.Equal(t, uint32(79), resp.Statuses[0].LimitRemaining, "100 - 2x10 - 1: the refused 30 hits never counted")
		})
	}
}

// TestSlidingWindowExactUnderConcurrency releases 200 calls at once on a
// sliding log of 50 per minute (and a GCRA window of 50): exactly 50 pass.
func TestSlidingWindowExactUnderConcurrency(t *testing.T) {
	const calls = 200
	for _, b := range backends() {
		for _, key := range []string{"burst", "gcra"} {
			t.Run(b.name+"/"+key, func(t *testing.T) {
				t.Parallel()
				r := newRig(t, b.primary(t), "sluice/shared.yaml")
				var wg sync.WaitGroup
				var mu sync.Mutex
				codes := map[rlsv3.RateLimitResponse_Code]int{}
				start := make(chan struct{})
				for range calls {
					wg.Go(func() {
						<-start
						resp := r.call(t, "shared", 0, desc("tenant", "acme"), desc(key, "k"))
						mu.Lock()
						codes[resp.OverallCode]++
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()
				assert.Equal(t, 50, codes[ok], "admitted")
				assert.Equal(t, calls-50, codes[over], "refused")
				resp := r.call(t, "shared", 0, desc("tenant", "acme"), desc(key, "k"))
				assert.Equal(t, over, resp.OverallCode)
				assert.Equal(t, uint32(0), resp.Statuses[1].LimitRemaining)
				assert.Equal(t, uint32(50), resp.Statuses[0].LimitRemaining, "the tenant counted the 50 admitted only")
			})
		}
	}
}

// TestHitsAddend: envoyproxy/ratelimit's hits_addend on a limit of 10 per
// minute: the request's (0 is unset, hence 1), a descriptor's own
// overriding it, and a descriptor's 0 as a check that consumes nothing,
// refused once one more hit would be.
func TestHitsAddend(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/shared.yaml")
			d := desc("hits", "h")
			steps := []struct {
				name      string
				hits      uint32
				own       *wrapperspb.UInt64Value
				code      rlsv3.RateLimitResponse_Code
				remaining uint32
			}{
				{"request hits", 3, nil, ok, 7},
				{"descriptor hits win", 3, wrapperspb.UInt64(5), ok, 2},
				{"a check counts nothing", 3, wrapperspb.UInt64(0), ok, 2},
				{"over what is left: OVER_LIMIT carries 0, as envoyproxy/ratelimit answers", 3, nil, over, 0},
				{"what is left", 2, nil, ok, 0},
				{"a check of a spent window is refused", 0, wrapperspb.UInt64(0), over, 0},
				{"request hits 0 count 1", 0, nil, over, 0},
				{"above the limit", 11, nil, over, 0},
			}
			for _, s := range steps {
				dd := &rlcommon.RateLimitDescriptor{Entries: d.Entries, HitsAddend: s.own}
				resp := r.call(t, "shared", s.hits, dd)
				require.Equal(t, s.code, resp.OverallCode, s.name)
				require.NotNil(t, resp.Statuses[0].CurrentLimit, s.name)
				assert.Equal(t, uint32(10), resp.Statuses[0].CurrentLimit.RequestsPerUnit, s.name)
				assert.Equal(t, s.remaining, resp.Statuses[0].LimitRemaining, s.name)
				if s.name == "above the limit" {
					assert.Equal(t, time.Minute, resp.Statuses[0].DurationUntilReset.AsDuration(), "it can never pass: the whole period")
				}
			}
		})
	}
}

// TestCheckRefusesBeforeCounting: a request that counts its tenant and
// checks its user (hits_addend 0 on the user's descriptor) is refused
// whole once the user's window is spent, consuming nothing on the tenant;
// while the user's window has room, the tenant counts and the user does
// not.
func TestCheckRefusesBeforeCounting(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/shared.yaml")
			check := desc("user", "u1")
			check.HitsAddend = wrapperspb.UInt64(0)
			for i := range 3 {
				resp := r.call(t, "shared", 0, desc("tenant", "acme"), check)
				require.Equal(t, ok, resp.OverallCode, "call %d", i)
				assert.Equal(t, uint32(99-i), resp.Statuses[0].LimitRemaining, "the tenant counts")
				assert.Equal(t, uint32(20), resp.Statuses[1].LimitRemaining, "the checked user does not")
			}
			// The user (20 per minute) spends its window in the tenant's
			// scope, the tenant's descriptor a check this time.
			tenantCheck := desc("tenant", "acme")
			tenantCheck.HitsAddend = wrapperspb.UInt64(0)
			resp := r.call(t, "shared", 20, tenantCheck, desc("user", "u1"))
			require.Equal(t, ok, resp.OverallCode)
			assert.Equal(t, uint32(97), resp.Statuses[0].LimitRemaining)
			assert.Equal(t, uint32(0), resp.Statuses[1].LimitRemaining)
			for i := range 3 {
				resp = r.call(t, "shared", 0, desc("tenant", "acme"), check)
				require.Equal(t, over, resp.OverallCode, "refused %d", i)
				assert.Equal(t, ok, resp.Statuses[0].Code, "the tenant alone would admit it")
				assert.Equal(t, over, resp.Statuses[1].Code)
				assert.Equal(t, uint32(97), resp.Statuses[0].LimitRemaining, "nothing consumed on the tenant")
			}
			resp = r.call(t, "shared", 0, desc("tenant", "acme"))
			assert.Equal(t, uint32(96), resp.Statuses[0].LimitRemaining, "100 - 3 - 1: the refused requests never counted")
		})
	}
}

// TestNegativeHits: is_negative_hits asks for a refill, which sluice does
// not apply: the descriptor is answered OK and changes no count.
func TestNegativeHits(t *testing.T) {
	r := newRig(t, limitertestLocal(t), "sluice/shared.yaml")
	require.Equal(t, ok, r.call(t, "shared", 4, desc("hits", "n")).OverallCode)
	refill := desc("hits", "n")
	refill.HitsAddend, refill.IsNegativeHits = wrapperspb.UInt64(4), true
	resp := r.call(t, "shared", 0, refill)
	assert.Equal(t, ok, resp.OverallCode)
	assert.Nil(t, resp.Statuses[0].CurrentLimit, "not counted")
	resp = r.call(t, "shared", 0, desc("hits", "n"))
	assert.Equal(t, uint32(5), resp.Statuses[0].LimitRemaining, "10 - 4 - 1: nothing refilled")
}

// TestLimitOverride: an override below the domain's ceiling applies, one
// above it is lowered to it, and a domain without a ceiling ignores them.
func TestLimitOverride(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/shared.yaml", "envoyproxy/example1.yaml")
			cases := []struct {
				name   string
				domain string
				d      []string
				rpu    uint32
				unit   typev3.RateLimitUnit
				want   uint32
				unitW  rlsv3.RateLimitResponse_RateLimit_Unit
			}{
				{"below the ceiling", "shared", []string{"user", "o1"}, 5, typev3.RateLimitUnit_MINUTE, 5, rlsv3.RateLimitResponse_RateLimit_MINUTE},
				{"above the ceiling", "shared", []string{"user", "o2"}, 1000, typev3.RateLimitUnit_MINUTE, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE},
				{"ceiling over an hour", "shared", []string{"user", "o3"}, 5000, typev3.RateLimitUnit_HOUR, 1200, rlsv3.RateLimitResponse_RateLimit_HOUR},
				{"under one per second", "shared", []string{"user", "o4"}, 2, typev3.RateLimitUnit_SECOND, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE},
				{"unmatched descriptor", "shared", []string{"other", "o5"}, 3, typev3.RateLimitUnit_MINUTE, 3, rlsv3.RateLimitResponse_RateLimit_MINUTE},
				{"no ceiling: ignored", "mongo_cps", []string{"database", "users"}, 5, typev3.RateLimitUnit_SECOND, 500, rlsv3.RateLimitResponse_RateLimit_SECOND},
			}
			for _, c := range cases {
				d := desc(c.d...)
				d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: c.rpu, Unit: c.unit}
				resp := r.call(t, c.domain, 0, d)
				require.Equal(t, ok, resp.OverallCode, c.name)
				require.NotNil(t, resp.Statuses[0].CurrentLimit, c.name)
				assert.Equal(t, c.want, resp.Statuses[0].CurrentLimit.RequestsPerUnit, c.name)
				assert.Equal(t, c.unitW, resp.Statuses[0].CurrentLimit.Unit, c.name)
				assert.Equal(t, c.want-1, resp.Statuses[0].LimitRemaining, c.name)
			}
			// The override binds: 5 per minute admits 4 more, then refuses.
			d := desc("user", "o1")
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
			for i := range 5 {
				want := ok
				if i == 4 {
					want = over
				}
				assert.Equal(t, want, r.call(t, "shared", 0, d).OverallCode, "call %d", i+2)
			}
		})
	}
}

// TestShadowMode: a limit in shadow mode counts but never refuses, and
// never stops an enforced descriptor of the same request from counting.
func TestShadowMode(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/shared.yaml")
			for i := range 3 {
				resp := r.call(t, "shared", 0, desc("tenant", "acme"), desc("probe", "p"))
				require.Equal(t, ok, resp.OverallCode, "call %d", i)
				assert.Equal(t, ok, resp.Statuses[1].Code, "shadow never refuses")
				assert.Equal(t, uint32(0), resp.Statuses[1].LimitRemaining, "but counts: 1 per minute")
				assert.Equal(t, uint32(99-i), resp.Statuses[0].LimitRemaining, "the enforced one counts every call")
			}
			// The global switch: nothing refuses, the statuses say what would.
			g := newRigWith(t, b.primary(t), func(c *appConfig) { c.ShadowMode = true }, "sluice/shared.yaml")
			for range 21 {
				resp := g.call(t, "shared", 0, desc("user", "u"))
				assert.Equal(t, ok, resp.OverallCode)
			}
		})
	}
}

// TestReplacesAndWildcards: README examples 6 and 7 of envoyproxy/ratelimit.
func TestReplacesAndWildcards(t *testing.T) {
	r := newRig(t, limitertestLocal(t), "envoyproxy/example6.yaml", "envoyproxy/example7.yaml", "envoyproxy/example2.yaml")
	resp := r.call(t, "example6", 0, desc("remote_address", "10.0.0.1"), desc("key", "value"))
	assert.Nil(t, resp.Statuses[0].CurrentLimit, "per_ip is replaced")
	assert.Equal(t, uint32(50), resp.Statuses[1].CurrentLimit.RequestsPerUnit)
	resp = r.call(t, "example6", 0, desc("remote_address", "10.0.0.1"))
	assert.Equal(t, uint32(10), resp.Statuses[0].CurrentLimit.RequestsPerUnit, "alone, per_ip applies")

	for path, want := range map[string]uint32{"/foo/baz": 20, "/foo/bar": 30} {
		resp = r.call(t, "example7", 0, desc("path", path))
		assert.Equal(t, want, resp.Statuses[0].CurrentLimit.RequestsPerUnit, path)
	}
	resp = r.call(t, "example7", 0, desc("path", "/other"))
	assert.Nil(t, resp.Statuses[0].CurrentLimit, "unmatched: not limited")

	resp = r.call(t, "messaging", 0, desc("message_type", "marketing", "to_number", "2061234567"), desc("to_number", "2061234567"))
	assert.Equal(t, uint32(5), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_DAY, resp.Statuses[0].CurrentLimit.Unit)
	assert.Equal(t, uint32(100), resp.Statuses[1].CurrentLimit.RequestsPerUnit)

	resp = r.call(t, "example7", 0, desc("path", "/foo/"+strings.Repeat("x", 10000)), &rlcommon.RateLimitDescriptor{})
	assert.Equal(t, ok, resp.OverallCode, "a long value is counted, a descriptor without entries names nothing")
	assert.Equal(t, uint32(19), resp.Statuses[0].LimitRemaining)
	assert.Nil(t, resp.Statuses[1].CurrentLimit)

	resp = r.call(t, "unknown_domain", 0, desc("a", "b"))
	assert.Equal(t, ok, resp.OverallCode, "a domain with no configuration limits nothing")
}

// TestResponseFields: the IETF fields of the decision, and Retry-After on
// a refusal.
func TestResponseFields(t *testing.T) {
	r := newRig(t, limitertestLocal(t), "sluice/shared.yaml")
	resp := r.call(t, "shared", 0, desc("tenant", "acme"), desc("user", "u1"))
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	assert.Equal(t, `"descriptor-tenant";q=100;w=60, "descriptor-user";q=20;w=60`, headers["RateLimit-Policy"])
	assert.Equal(t, `"descriptor-user";r=19;t=60`, headers["RateLimit"])
	assert.NotContains(t, headers, "Retry-After")
	resp = r.call(t, "shared", 20, desc("tenant", "acme"), desc("user", "u1"))
	require.Equal(t, over, resp.OverallCode)
	headers = map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	assert.Equal(t, "60", headers["Retry-After"])
}

// TestInvalidRequests: no domain or no descriptor is InvalidArgument.
func TestInvalidRequests(t *testing.T) {
	r := newRig(t, limitertestLocal(t), "sluice/shared.yaml")
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "shared"},
	} {
		_, err := r.client.ShouldRateLimit(context.Background(), req)
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
	}
}

var _ = time.Second

// TestRepeatedAndManyDescriptors: one descriptor sent twice is one key
// counted twice (envoyproxy/ratelimit increments it twice); more limited
// descriptors than one decision holds are refused whole, consuming nothing.
func TestRepeatedAndManyDescriptors(t *testing.T) {
	r := newRig(t, limitertestLocal(t), "sluice/shared.yaml")
	resp := r.call(t, "shared", 0, desc("hits", "twice"), desc("hits", "twice"))
	require.Equal(t, ok, resp.OverallCode)
	assert.Equal(t, uint32(8), resp.Statuses[0].LimitRemaining)
	assert.Equal(t, uint32(8), resp.Statuses[1].LimitRemaining)

	var many []*rlcommon.RateLimitDescriptor
	for i := range domain.MaxLimits + 1 {
		many = append(many, desc("user", fmt.Sprint("u", i)))
	}
	resp = r.call(t, "shared", 0, many...)
	assert.Equal(t, over, resp.OverallCode)
	resp = r.call(t, "shared", 0, desc("user", "u0"))
	assert.Equal(t, uint32(19), resp.Statuses[0].LimitRemaining, "nothing consumed by the refused request")
}

// TestAllotmentsPerDescriptor: a descriptor hot on the instance and far
// from its limit is decided in process from an allotment
// (docs/adr/019); one whose limit says `allotments: off` always at the
// store. Every request passes either way.
func TestAllotmentsPerDescriptor(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			r := newRig(t, b.primary(t), "allotments.yaml")
			for range 300 {
				for _, key := range []string{"on", "off"} {
					resp := r.call(t, "allot", 1, desc(key, "hot"))
					require.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
				}
				r.clock.Advance(time.Millisecond)
			}
			from := map[string]int{}
			for _, d := range r.rec.Decisions() {
				if d.Decision.Source == domain.SourceAllotment {
					from[d.Decision.LimitingWindow]++
				}
			}
			assert.Positive(t, from["on"], "the hot descriptor spent allotments")
			assert.Zero(t, from["off"], "allotments: off")
		})
	}
}

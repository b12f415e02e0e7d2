package envoyrls_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/internal/envoypeer"
)

// The sequences of envoyproxy/ratelimit's integration tests
// (test/integration/integration_test.go) and of its end-to-end scripts
// (integration-test/scripts/*.sh, through the Envoy of its
// examples/envoy/proxy.yaml), sent over gRPC with the go-control-plane
// client on its own configuration files (testdata/peer), on the local
// store, standalone Redis and the three-master cluster.

// TestPeerIntegrationBasic is its testBasicBaseConfig on its runtime
// directory: an unknown domain, key1 at 50 per second, key2 over its 20
// per minute, key2 and key3 together (key3 over its 10 per hour refuses
// the request, and key2 stops counting, as the peer's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT variant expects), and a reset
// that counts down.
func TestPeerIntegrationBasic(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newPeerRig(t, b.primary(t), "testdata/peer/runtime/config", envoyrls.LoadOptions{}, envoyrls.Options{})
			resp := r.call(t, "foo", 1, desc("hello", "world"))
			assert.Equal(t, ok, resp.OverallCode)
			assert.Nil(t, resp.Statuses[0].CurrentLimit)
			assert.Zero(t, resp.Statuses[0].LimitRemaining)

			resp = r.call(t, "basic", 1, desc("key1", "foo"))
			assertStatus(t, resp.Statuses[0], ok, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49)
			for i := 2; i <= 51; i++ {
				want := ok
				if i == 51 {
					want = over
				}
				require.Equal(t, want, r.call(t, "basic", 1, desc("key1", "foo")).OverallCode, "key1 call %d", i)
			}

			for i := range 25 {
				resp = r.call(t, "another", 1, desc("key2", "7421"))
				code, left := ok, uint32(20-(i+1))
				if i >= 20 {
					code, left = over, 0
				}
				require.Equal(t, code, resp.OverallCode, "key2 call %d", i)
				assertStatus(t, resp.Statuses[0], code, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, left)
			}

			for i := range 15 {
				resp = r.call(t, "another", 1, desc("key2", "9913"), desc("key3", "9913"))
				code, left1, left2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
				if i >= 10 {
					// Refused by key3: nothing counted on key2.
					code, left1, left2 = over, 10, 0
				}
				require.Equal(t, code, resp.OverallCode, "key2+key3 call %d", i)
				assertStatus(t, resp.Statuses[0], ok, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, left1)
				assertStatus(t, resp.Statuses[1], code, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, left2)
			}

			// one_per_minute: the second call is refused until its minute
			// has passed.
			assert.Equal(t, ok, r.call(t, "basic", 1, desc("one_per_minute", "x")).OverallCode)
			resp = r.call(t, "basic", 1, desc("one_per_minute", "x"))
			assert.Equal(t, over, resp.OverallCode)
			assert.Equal(t, time.Minute, resp.Statuses[0].DurationUntilReset.AsDuration())
			r.clock.Advance(time.Minute)
			assert.Equal(t, ok, r.call(t, "basic", 1, desc("one_per_minute", "x")).OverallCode)

			// duration_until_reset counts down (key4, 20 a day, refused).
			resp = r.call(t, "another", 20, desc("key4", "durTest"))
			require.Equal(t, ok, resp.OverallCode)
			resp1 := r.call(t, "another", 1, desc("key4", "durTest"))
			r.clock.Advance(2 * time.Second)
			resp2 := r.call(t, "another", 1, desc("key4", "durTest"))
			assert.Equal(t, over, resp2.OverallCode)
			assert.Less(t, resp2.Statuses[0].DurationUntilReset.GetSeconds(), resp1.Statuses[0].DurationUntilReset.GetSeconds())
		})
	}
}

// TestPeerIntegrationShareThreshold is its testShareThreshold: values
// matching files/* with share_threshold share one window; values matching
// files_no_share/* without it have one each.
func TestPeerIntegrationShareThreshold(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newPeerRig(t, b.primary(t), "testdata/peer/runtime/config", envoyrls.LoadOptions{}, envoyrls.Options{})
			const dom = "share-threshold-test"
			for i := range 10 {
				require.Equal(t, ok, r.call(t, dom, 1, desc("files", "files/a.pdf")).OverallCode, "call %d", i)
			}
			resp := r.call(t, dom, 1, desc("files", "files/b.csv"))
			assert.Equal(t, over, resp.OverallCode, "files/b.csv shares files/a.pdf's window")
			assertStatus(t, resp.Statuses[0], over, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 0)
			for i := range 10 {
				resp = r.call(t, dom, 1, desc("files_no_share", fmt.Sprintf("files_no_share/%d", i)))
				assertStatus(t, resp.Statuses[0], ok, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 9)
			}
		})
	}
}

// TestPeerScripts runs every script on each store, the example loaded with
// AcceptUnlimited (it holds unlimited entries and a block).
func TestPeerScripts(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			// One service for every script, as the peer runs them: their
			// keys are disjoint.
			r := newPeerRig(t, b.primary(t), "testdata/peer/examples", acceptUnlimited, envoyrls.Options{})
			for name, steps := range envoypeer.Scripts() {
				for _, s := range steps {
					resp := r.call(t, envoypeer.Domain, 0, s.Descriptors...)
					require.Equal(t, s.Want, resp.OverallCode, "%s: %s", name, s.Name)
				}
			}
		})
	}
}

// TestPeerStatuses: the statuses of a script's refusals, as the peer sends
// them: only the offending descriptor is OVER_LIMIT, with nothing left; a
// block or hits above a whole limit refuse with the whole period as the
// reset; an unlimited descriptor is OK with the peer's limit_remaining.
func TestPeerStatuses(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newPeerRig(t, b.primary(t), "testdata/peer/examples", acceptUnlimited, envoyrls.Options{})
			// The block, beside a limit that would pass: only the block
			// is OVER_LIMIT, and the other counts nothing.
			resp := r.call(t, "rl", 0, desc("foo", "a", "bar", "banned"), desc("foo", "a", "baz", "not-so-shady"))
			require.Equal(t, over, resp.OverallCode)
			assertStatus(t, resp.Statuses[0], over, 0, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
			assert.Equal(t, time.Minute, resp.Statuses[0].DurationUntilReset.AsDuration())
			assertStatus(t, resp.Statuses[1], ok, 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 3)
			assert.Contains(t, headerMap(resp), "Retry-After")
			assert.Equal(t, "60", headerMap(resp)["Retry-After"])

			// Hits above the whole limit of one descriptor (3 per minute):
			// it alone is OVER_LIMIT, for its whole minute.
			four := desc("foo", "b", "baz", "not-so-shady")
			four.HitsAddend = wrapperspb.UInt64(4)
			resp = r.call(t, "rl", 0, four, desc("foo", "b"))
			require.Equal(t, over, resp.OverallCode)
			assertStatus(t, resp.Statuses[0], over, 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
			assert.Equal(t, time.Minute, resp.Statuses[0].DurationUntilReset.AsDuration())
			assert.Equal(t, ok, resp.Statuses[1].Code, "foo alone (2 per minute) is not what refused")

			// Hits above what is left: OVER_LIMIT carries 0.
			require.Equal(t, ok, r.call(t, "rl", 2, desc("foo", "c", "baz", "not-so-shady")).OverallCode)
			resp = r.call(t, "rl", 2, desc("foo", "c", "baz", "not-so-shady"), desc("unspec", "c"))
			require.Equal(t, over, resp.OverallCode)
			assertStatus(t, resp.Statuses[0], over, 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
			assertStatus(t, resp.Statuses[1], ok, 2, rlsv3.RateLimitResponse_RateLimit_MINUTE, 2)

			// Unlimited: OK, no current_limit, the peer's remaining.
			resp = r.call(t, "rl", 0, desc("qux", "q"), desc("foo", "d", "bay", "y"))
			require.Equal(t, ok, resp.OverallCode)
			for _, st := range resp.Statuses {
				assert.Nil(t, st.CurrentLimit)
				assert.Equal(t, uint32(4294967295), st.LimitRemaining)
			}
		})
	}
}

// TestPeerTokenQuota is token-quota.sh and multiservice-tokenquota.sh:
// checks (hits_addend 0) of quota descriptors on the request path, the
// serving service counted on the response path, the metadata of the
// quotas left telling Envoy which service may serve. sluice's check
// refuses once one more hit would be (docs/adr/011), so a quota of N
// serves N requests where the peer's counter serves N+1 (the scripts'
// comments say N for token-quota).
func TestPeerTokenQuota(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newPeerRig(t, b.primary(t), "testdata/peer/examples", acceptUnlimited, envoyrls.Options{DynamicMetadata: true})
			check := func(service string) *rlcommon.RateLimitDescriptor {
				d := desc("service", service)
				d.HitsAddend = wrapperspb.UInt64(0)
				return d
			}
			// token-quota: service_2, 2 per minute.
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
				resp := r.call(t, "rl", 0, check("service_2"))
				require.Equal(t, want, resp.OverallCode, "tokenquota request %d", i+1)
				if want == ok {
					require.Equal(t, ok, r.call(t, "rl", 0, desc("service", "service_2")).OverallCode, "response path %d", i+1)
				}
			}
			r.clock.Advance(time.Minute)
			require.Equal(t, ok, r.call(t, "rl", 0, check("service_2")).OverallCode, "refreshed")

			// multiservice-tokenquota on fresh counts: service_1 (1 per
			// minute) serves first, then service_2 (2 per minute).
			m := newPeerRig(t, b.primary(t), "testdata/peer/examples", acceptUnlimited, envoyrls.Options{DynamicMetadata: true})
			for i, want := range []string{"service_1", "service_2", "service_2", ""} {
				resp := m.call(t, "rl", 0, check("service_1"), check("service_2"))
				if want == "" {
					require.Equal(t, over, resp.OverallCode, "request %d: every quota spent", i+1)
					assert.NotContains(t, resp.DynamicMetadata.Fields, "metadata")
					continue
				}
				require.Equal(t, ok, resp.OverallCode, "request %d", i+1)
				md := resp.DynamicMetadata.Fields
				assert.Equal(t, "rl", md["domain"].GetStringValue())
				entries := md["descriptors"].GetListValue().Values[0].GetStructValue().Fields["entries"].GetListValue().Values
				assert.Equal(t, "service=service_1", entries[0].GetStringValue())
				served := md["metadata"].GetStructValue().Fields["service_with_quota"].GetStructValue().Fields["name"].GetStringValue()
				require.Equal(t, want, served, "request %d: the first quota left", i+1)
				require.Equal(t, ok, m.call(t, "rl", 0, desc("service", served)).OverallCode, "response path %d", i+1)
			}
		})
	}
}

// TestLimitHeaders: the peer's optional rate-limit headers (its
// LIMIT_RESPONSE_HEADERS_ENABLED): the descriptor closest to its limit, or
// the one over it, beside sluice's IETF fields; names configurable.
func TestLimitHeaders(t *testing.T) {
	r := newPeerRig(t, limitertestLocal(t), "testdata/peer/runtime/config", envoyrls.LoadOptions{}, envoyrls.Options{LimitHeaders: true})
	resp := r.call(t, "another", 1, desc("key2", "a"), desc("key3", "a"))
	hs := headerMap(resp)
	assert.Equal(t, "10", hs["RateLimit-Limit"], "key3 is the closest")
	assert.Equal(t, "9", hs["RateLimit-Remaining"])
	assert.Equal(t, "3600", hs["RateLimit-Reset"])
	assert.Contains(t, hs, "RateLimit-Policy")
	twenty := desc("key2", "a")
	twenty.HitsAddend = wrapperspb.UInt64(20)
	resp = r.call(t, "another", 1, twenty, desc("key3", "b"))
	require.Equal(t, over, resp.OverallCode)
	hs = headerMap(resp)
	assert.Equal(t, "20", hs["RateLimit-Limit"], "key2 is over")
	assert.Equal(t, "0", hs["RateLimit-Remaining"])
	assert.Equal(t, "60", hs["RateLimit-Reset"])

	x := newPeerRig(t, limitertestLocal(t), "testdata/peer/runtime/config", envoyrls.LoadOptions{},
		envoyrls.Options{LimitHeaders: true, LimitHeader: "X-RateLimit-Limit", RemainingHeader: "X-RateLimit-Remaining", ResetHeader: "X-RateLimit-Reset"})
	hs = headerMap(x.call(t, "basic", 1, desc("key1", "k")))
	assert.Equal(t, "50", hs["X-RateLimit-Limit"])
	assert.Equal(t, "49", hs["X-RateLimit-Remaining"])
	assert.Equal(t, "1", hs["X-RateLimit-Reset"])
	assert.NotContains(t, hs, "RateLimit-Limit")

	off := newPeerRig(t, limitertestLocal(t), "testdata/peer/runtime/config", envoyrls.LoadOptions{}, envoyrls.Options{})
	for k := range headerMap(off.call(t, "basic", 1, desc("key1", "k"))) {
		assert.False(t, strings.HasSuffix(k, "-Limit") || strings.HasSuffix(k, "-Remaining") || strings.HasSuffix(k, "-Reset"), k)
	}
}

func assertStatus(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, left uint32) {
	t.Helper()
	assert.Equal(t, code, st.Code)
	if assert.NotNil(t, st.CurrentLimit) {
		assert.Equal(t, rpu, st.CurrentLimit.RequestsPerUnit)
		assert.Equal(t, unit, st.CurrentLimit.Unit)
	}
	assert.Equal(t, left, st.LimitRemaining)
	assert.NotNil(t, st.DurationUntilReset)
}

func headerMap(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

// TestGlobalShadowNeverRefuses: under the Limiter's global shadow mode
// (the peer's SHADOW_MODE), hits above a whole limit are answered OK too,
// the status telling what would have been refused.
func TestGlobalShadowNeverRefuses(t *testing.T) {
	g := newRigWith(t, limitertestLocal(t), func(c *appConfig) { c.ShadowMode = true }, "sluice/shared.yaml")
	resp := g.call(t, "shared", 11, desc("hits", "g"))
	assert.Equal(t, ok, resp.OverallCode)
	assertStatus(t, resp.Statuses[0], ok, 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
	assert.Equal(t, time.Minute, resp.Statuses[0].DurationUntilReset.AsDuration())
	assert.NotContains(t, headerMap(resp), "Retry-After")
}

// TestPeerReadmeExample11: the sequence of the peer README's example 11:
// five files/a.pdf and five files/b.csv spend files/*'s shared 10 per
// hour, so files/c.txt is refused; ten files_no_share/a.pdf leave
// files_no_share/b.csv its own 10.
func TestPeerReadmeExample11(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newPeerRig(t, b.primary(t), "testdata/envoyproxy", envoyrls.LoadOptions{}, envoyrls.Options{})
			for i := range 10 {
				f := "files/a.pdf"
				if i >= 5 {
					f = "files/b.csv"
				}
				require.Equal(t, ok, r.call(t, "example11", 1, desc("files", f)).OverallCode, "call %d", i)
			}
			resp := r.call(t, "example11", 1, desc("files", "files/c.txt"))
			assert.Equal(t, over, resp.OverallCode, "the shared threshold is spent")
			for i := range 10 {
				require.Equal(t, ok, r.call(t, "example11", 1, desc("files_no_share", "files_no_share/a.pdf")).OverallCode, "call %d", i)
			}
			assert.Equal(t, over, r.call(t, "example11", 1, desc("files_no_share", "files_no_share/a.pdf")).OverallCode)
			resp = r.call(t, "example11", 1, desc("files_no_share", "files_no_share/b.csv"))
			assert.Equal(t, ok, resp.OverallCode, "b.csv has its own threshold")
			assert.Equal(t, uint32(9), resp.Statuses[0].LimitRemaining)
		})
	}
}

// TestBlockAndUnlimitedExamples: the peer README's example 3 (a block list
// by a limit of 0) and an unlimited address, loaded with AcceptUnlimited:
// the blocked address is refused from its first request, counting
// nothing; the others keep their 10 per second; the unlimited address is
// answered OK with no limit. The match is on the value as sent, the count
// on the address grouped as sluice's ip dimension is.
func TestBlockAndUnlimitedExamples(t *testing.T) {
	r := newPeerRig(t, limitertestLocal(t), "testdata/invalid/example3-blocklist.yaml", acceptUnlimited, envoyrls.Options{})
	for range 3 {
		resp := r.call(t, "edge_proxy_per_ip", 1, desc("remote_address", "50.0.0.5"))
		require.Equal(t, over, resp.OverallCode)
		assertStatus(t, resp.Statuses[0], over, 0, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	}
	resp := r.call(t, "edge_proxy_per_ip", 1, desc("remote_address", "50.0.0.6"))
	assertStatus(t, resp.Statuses[0], ok, 10, rlsv3.RateLimitResponse_RateLimit_SECOND, 9)

	u := newPeerRig(t, limitertestLocal(t), "testdata/invalid/unlimited.yaml", acceptUnlimited, envoyrls.Options{})
	resp = u.call(t, "internal", 1, desc("remote_address", "10.0.0.1"))
	assert.Equal(t, ok, resp.OverallCode)
	assert.Nil(t, resp.Statuses[0].CurrentLimit)
	assert.Equal(t, uint32(4294967295), resp.Statuses[0].LimitRemaining)
}

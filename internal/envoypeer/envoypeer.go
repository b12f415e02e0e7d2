// Package envoypeer holds envoyproxy/ratelimit's end-to-end scripts
// (integration-test/scripts/*.sh) as data: the descriptors the Envoy of its
// examples/envoy/proxy.yaml sends for each request, and the overall code
// each script expects, on the rl domain of its
// examples/ratelimit/config/example.yaml (adapters/envoyrls/testdata/peer).
// The tests of adapters/envoyrls (in process, on every store) and of
// cmd/sluice-rls (through the built binary) run them (docs/adr/011).
package envoypeer

import (
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Domain is the example's domain.
const Domain = "rl"

// The two overall codes.
const (
	OK   = rlsv3.RateLimitResponse_OK
	Over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// Desc builds a descriptor from key, value pairs.
func Desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Route builds the descriptors the Envoy of envoyproxy/ratelimit's
// examples/envoy/proxy.yaml sends for a route: one per action list, each
// entry a request header; a list whose header is missing sends none.
func Route(headers map[string]string, actions ...[]string) []*rlcommon.RateLimitDescriptor {
	var ds []*rlcommon.RateLimitDescriptor
next:
	for _, a := range actions {
		var kv []string
		for _, h := range a {
			v, ok := headers[h]
			if !ok {
				continue next
			}
			kv = append(kv, h, v)
		}
		ds = append(ds, Desc(kv...))
	}
	return ds
}

// H builds request headers from name, value pairs.
func H(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TwoHeader is examples/envoy/proxy.yaml's /twoheader: (foo, bar) and
// (foo, baz).
func TwoHeader(hs map[string]string) []*rlcommon.RateLimitDescriptor {
	return Route(hs, []string{"foo", "bar"}, []string{"foo", "baz"})
}

// FourHeader is /fourheader: (foo, bar) and (source_cluster,
// destination_cluster).
func FourHeader(hs map[string]string) []*rlcommon.RateLimitDescriptor {
	return Route(hs, []string{"foo", "bar"}, []string{"source_cluster", "destination_cluster"})
}

// FiveHeader is /fiveheader: /fourheader's and (category).
func FiveHeader(hs map[string]string) []*rlcommon.RateLimitDescriptor {
	return Route(hs, []string{"foo", "bar"}, []string{"source_cluster", "destination_cluster"}, []string{"category"})
}

// Step is one request of a script and its expected overall code.
type Step struct {
	Name        string
	Descriptors []*rlcommon.RateLimitDescriptor
	Want        rlsv3.RateLimitResponse_Code
}

// Scripts are integration-test/scripts/*.sh by name, on the rl domain of
// examples/ratelimit/config/example.yaml; each script's keys are its own,
// so each starts on fresh counts.
func Scripts() map[string][]Step {
	proxy := func(dst string, kv ...string) map[string]string {
		return H(append([]string{"source_cluster", "proxy", "destination_cluster", dst}, kv...)...)
	}
	return map[string][]Step{
		"simple-get": {{"happy path", TwoHeader(H("foo", "test", "baz", "shady")), OK}},
		"trigger-ratelimit": {
			{"1", TwoHeader(H("foo", "pelle", "baz", "not-so-shady")), OK},
			{"2", TwoHeader(H("foo", "pelle", "baz", "not-so-shady")), OK},
			{"3", TwoHeader(H("foo", "pelle", "baz", "not-so-shady")), OK},
			{"4: over 3 per minute", TwoHeader(H("foo", "pelle", "baz", "not-so-shady")), Over},
			{"5", TwoHeader(H("foo", "pelle", "baz", "not-so-shady")), Over},
		},
		"trigger-shadow-mode-key": {
			{"1", TwoHeader(H("foo", "pelle", "baz", "shady")), OK},
			{"2", TwoHeader(H("foo", "pelle", "baz", "shady")), OK},
			{"3", TwoHeader(H("foo", "pelle", "baz", "shady")), OK},
			{"4: shadow never refuses", TwoHeader(H("foo", "pelle", "baz", "shady")), OK},
			{"5", TwoHeader(H("foo", "pelle", "baz", "shady")), OK},
		},
		"value-included-in-stats-key-when-unspecified": {
			{"1", Route(H("unspec", "unspecified_value"), []string{"unspec"}), OK},
			{"2", Route(H("unspec", "unspecified_value"), []string{"unspec"}), OK},
			{"3: over 2 per minute", Route(H("unspec", "unspecified_value"), []string{"unspec"}), Over},
		},
		"replaces": {
			{"banned: a block", TwoHeader(H("foo", "bkthomps", "bar", "banned")), Over},
			{"banned beside mock", FourHeader(proxy("mock", "foo", "bkthomps", "bar", "banned")), Over},
			{"override replaces banned_limit 1", FourHeader(proxy("override", "foo", "bkthomps", "bar", "banned")), OK},
			{"override 2", FourHeader(proxy("override", "foo", "bkthomps", "bar", "banned")), OK},
			{"override 3: over 2 per minute", FourHeader(proxy("override", "foo", "bkthomps", "bar", "banned")), Over},
			{"bkthomps replaced 1", FourHeader(proxy("bkthomps", "foo", "my_foo", "bar", "bkthomps")), OK},
			{"bkthomps replaced 2", FourHeader(proxy("bkthomps", "foo", "my_foo", "bar", "bkthomps")), OK},
			{"bkthomps replaced 3: over 2", FourHeader(proxy("bkthomps", "foo", "my_foo", "bar", "bkthomps")), Over},
			{"not replaced: bkthomps' own 1 per minute", FourHeader(proxy("not_bkthomps", "foo", "my_foo", "bar", "bkthomps")), OK},
			{"not replaced 2", FourHeader(proxy("not_bkthomps", "foo", "my_foo", "bar", "bkthomps")), Over},
			{"bkthomps replaced 4", FourHeader(proxy("bkthomps", "foo", "my_foo", "bar", "bkthomps")), Over},
			{"category replaces two 1", FiveHeader(proxy("fake", "foo", "my_foo", "bar", "bkthomps", "category", "account")), OK},
			{"category 2", FiveHeader(proxy("fake", "foo", "my_foo", "bar", "bkthomps", "category", "account")), OK},
			{"category 3", FiveHeader(proxy("fake", "foo", "my_foo", "bar", "bkthomps", "category", "account")), OK},
			{"category 4", FiveHeader(proxy("fake", "foo", "my_foo", "bar", "bkthomps", "category", "account")), OK},
			{"category 5: over 4", FiveHeader(proxy("fake", "foo", "my_foo", "bar", "bkthomps", "category", "account")), Over},
			{"foo_2 bkthomps 1", TwoHeader(H("foo", "foo_2", "bar", "bkthomps")), OK},
			{"foo_2 bkthomps 2", TwoHeader(H("foo", "foo_2", "bar", "bkthomps")), Over},
			{"fake_name 1", FourHeader(proxy("fake", "foo", "foo_3", "bar", "bar_3")), OK},
			{"fake_name 2", FourHeader(proxy("fake", "foo", "foo_3", "bar", "bar_3")), OK},
			{"fake_name 3: over 2", FourHeader(proxy("fake", "foo", "foo_3", "bar", "bar_3")), Over},
			{"category 6", FiveHeader(proxy("fake", "foo", "my_foo", "bar", "bkthomps", "category", "account")), Over},
		},
		"quota": {
			{"1: both quotas", QuotaRoute(), OK},
			{"2: service_1 spent, service_2 left", QuotaRoute(), OK},
			{"3: every quota spent", QuotaRoute(), Over},
		},
	}
}

// QuotaRoute is /quota: generic keys service_1 and service_2, both in
// quota_mode.
func QuotaRoute() []*rlcommon.RateLimitDescriptor {
	return []*rlcommon.RateLimitDescriptor{Desc("service", "service_1"), Desc("service", "service_2")}
}

package envoyrls

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkPlan is the door's own CPU per request before any store call:
// three descriptors matched against a tree of exact, trailing-wildcard
// and key-only entries, and their subjects built.
//
//	go test -run '^$' -bench Plan -benchmem ./adapters/envoyrls/
func BenchmarkPlan(b *testing.B) {
	cfg, err := ParseConfig([]byte(`domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: path
    value: /api/v1/*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: /api/v2/*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`))
	if err != nil {
		b.Fatal(err)
	}
	d := cfg.domains["bench"]
	entry := func(k, v string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{
		entry("tenant", "acme"), entry("path", "/api/v2/users/42"), entry("remote_address", "10.1.2.3"),
	}}
	b.ReportAllocs()
	for b.Loop() {
		plans, _ := d.plan(req)
		if plans[1] == nil {
			b.Fatal("the wildcard did not match")
		}
	}
}

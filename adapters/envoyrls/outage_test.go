package envoyrls_test

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOutageDrill kills the Redis server under the service: each domain
// answers by its degraded action (deny: OVER_LIMIT with Retry-After 1;
// bypass: OK under the per-instance cap; local: the same limits on the
// in-process store), checks (hits_addend 0) too, every answer recorded as
// degraded, none a silent fail-open.
func TestOutageDrill(t *testing.T) {
	srv := redistest.NewServer(t)
	r := newRig(t, limitertest.Redis(t, srv.URL()), "sluice/shared.yaml", "sluice/degraded-bypass.yaml", "sluice/degraded-local.yaml")
	require.Equal(t, ok, r.call(t, "shared", 0, desc("tenant", "acme")).OverallCode, "healthy")
	require.NoError(t, srv.Kill())

	resp := r.call(t, "shared", 0, desc("tenant", "acme"))
	assert.Equal(t, over, resp.OverallCode, "deny")
	assert.Contains(t, resp.ResponseHeadersToAdd, header("Retry-After", "1"))
	assert.Equal(t, over, resp.Statuses[0].Code)

	// bypass: a limit of 2 per minute, a cap of 2 x 2 per minute.
	var codes []rlsv3.RateLimitResponse_Code
	for range 5 {
		codes = append(codes, r.call(t, "degraded_bypass", 0, desc("tenant", "acme")).OverallCode)
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, over}, codes, "bypass under its cap")

	// local: the domain's own limit of 2, counted in process.
	codes = nil
	for range 3 {
		codes = append(codes, r.call(t, "degraded_local", 0, desc("tenant", "acme")).OverallCode)
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, over}, codes, "local limits")

	// Checks (hits_addend 0) follow the same matrix: deny refuses; local
	// checks the in-process count without adding to it.
	check := func(tenant string) *rlcommon.RateLimitDescriptor {
		d := desc("tenant", tenant)
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	assert.Equal(t, over, r.call(t, "shared", 0, check("acme")).OverallCode, "deny")
	codes = nil
	for _, d := range []*rlcommon.RateLimitDescriptor{check("initech"), check("initech"), desc("tenant", "initech"), desc("tenant", "initech"), check("initech")} {
		codes = append(codes, r.call(t, "degraded_local", 0, d).OverallCode)
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, over}, codes, "local checks count nothing")

	states := map[domain.State]int{}
	for _, d := range r.rec.Decisions()[1:] {
		assert.True(t, d.Decision.Degraded, "every decision during the outage says so")
		states[d.Decision.State]++
	}
	assert.Equal(t, map[domain.State]int{domain.DeniedDegraded: 3, domain.BypassDegraded: 4, domain.Allowed: 6, domain.Throttled: 2}, states)
}

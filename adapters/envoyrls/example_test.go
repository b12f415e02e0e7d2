package envoyrls_test

import (
	"context"
	"fmt"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// A tenant of 100 requests per minute and a user of 2: the user's third
// request is refused, and the tenant's count holds only what passed.
func Example() {
	cfg, err := envoyrls.ParseConfig([]byte(`
domain: edge
hash_tag_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		panic(err)
	}
	primary, _ := local.New(local.Config{})
	defer primary.Close()
	fallback, _ := local.New(local.Config{})
	defer fallback.Close()
	lim, err := app.New(app.Config{HMACSecret: app.Secret(strings.Repeat("ab", 32))},
		app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	svc := envoyrls.New(lim, cfg)

	entry := func(k, v string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	for range 3 {
		resp, _ := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{entry("tenant", "acme"), entry("user", "alice")},
		})
		fmt.Println(resp.OverallCode, "tenant remaining", resp.Statuses[0].LimitRemaining, "user remaining", resp.Statuses[1].LimitRemaining)
	}
	// Output:
	// OK tenant remaining 99 user remaining 1
	// OK tenant remaining 98 user remaining 0
	// OVER_LIMIT tenant remaining 98 user remaining 0
}

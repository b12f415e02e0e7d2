package envoyrls

import (
	"errors"
	"fmt"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/app"
)

var (
	// ErrUnknownDomain: WindowsRequest names a domain no file configures.
	ErrUnknownDomain = errors.New("no configured domain of that name")
	// ErrNoLimit: none of the descriptors matches a limit of the domain.
	ErrNoLimit = errors.New("no descriptor matches a limit")
)

// WindowsRequest is the app.WindowsRequest the service would decide for
// descriptors sent to domainName, shadow-mode limits included and
// replaced limits left out, as ShouldRateLimit matches them: its keys are
// the service's, so that an operator's tool peeks and resets them through
// app.Limiter (PeekWindows, ResetWindows, ExplainWindows) without
// building a key by hand. Descriptors that match no limit are skipped;
// when none matches, the error wraps ErrNoLimit, and an unconfigured
// domain ErrUnknownDomain.
func (c *Config) WindowsRequest(domainName string, descriptors []*rlcommon.RateLimitDescriptor) (app.WindowsRequest, error) {
	d := c.domains[domainName]
	if d == nil {
		return app.WindowsRequest{}, fmt.Errorf("%w: %q (configured: %v)", ErrUnknownDomain, domainName, c.Domains())
	}
	plans, scope := d.plan(&rlsv3.RateLimitRequest{Domain: domainName, Descriptors: descriptors})
	wr := app.WindowsRequest{RouteKey: d.routeKey, Action: d.action, Scope: scope}
	for _, p := range plans {
		if p != nil {
			addWindow(&wr, p)
		}
	}
	if len(wr.Windows) == 0 {
		return app.WindowsRequest{}, fmt.Errorf("%w of domain %q", ErrNoLimit, domainName)
	}
	return wr, nil
}

package httpmw

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/domain"
)

// Header names written on every decided response.
const (
	HeaderLimit      = "X-RateLimit-Limit"
	HeaderRemaining  = "X-RateLimit-Remaining"
	HeaderReset      = "X-RateLimit-Reset"
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
	HeaderRetryAfter = "Retry-After"
)

// The header names in canonical form: Header.Set allocates to
// canonicalise any other spelling, on every response.
var (
	keyLimit      = http.CanonicalHeaderKey(HeaderLimit)
	keyRemaining  = http.CanonicalHeaderKey(HeaderRemaining)
	keyReset      = http.CanonicalHeaderKey(HeaderReset)
	keyPolicy     = http.CanonicalHeaderKey(HeaderPolicy)
	keyRateLimit  = http.CanonicalHeaderKey(HeaderRateLimit)
	keyRetryAfter = http.CanonicalHeaderKey(HeaderRetryAfter)
)

// PolicyName names a window in the RateLimit-Policy and RateLimit fields:
// "<dimension>-<window>", e.g. "user-burst" (domain.PolicyName).
func PolicyName(dim domain.Dimension, window string) string { return domain.PolicyName(dim, window) }

// setRateLimitHeaders writes the rate-limit fields of d on h
// (domain.Decision.RateLimitFields documents each); it writes nothing when
// no window was counted (invalid context, a profile none of whose windows
// applies, a degraded denial that counted nothing).
func setRateLimitHeaders(h http.Header, d *domain.Decision) {
	f, ok := d.RateLimitFields()
	if !ok {
		return
	}
	// One backing array for the five one-value slices Header.Set would
	// allocate one by one.
	v := [...]string{
		strconv.FormatInt(f.Limit, 10), strconv.FormatInt(f.Remaining, 10), strconv.FormatInt(f.Reset, 10),
		f.Policy, f.RateLimit,
	}
	vals := v[:]
	h[keyLimit], h[keyRemaining], h[keyReset] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	h[keyPolicy], h[keyRateLimit] = vals[3:4:4], vals[4:5:5]
}

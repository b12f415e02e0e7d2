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
	h.Set(keyLimit, strconv.FormatInt(f.Limit, 10))
	h.Set(keyRemaining, strconv.FormatInt(f.Remaining, 10))
	h.Set(keyReset, strconv.FormatInt(f.Reset, 10))
	h.Set(keyPolicy, f.Policy)
	h.Set(keyRateLimit, f.RateLimit)
}

package httpmw

import (
	"net/http"
	"strconv"
	"unsafe"

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
	f, ok := d.RateLimitFieldsMemo(&policies)
	if !ok {
		return
	}
	// One allocation for the five one-value slices Header.Set would
	// allocate one by one and for the digits of the three numbers, which
	// strconv.FormatInt would allocate one by one (any above 99).
	hv := new(headerValues)
	b := hv.digits[:0]
	b = strconv.AppendInt(b, f.Limit, 10)
	n0 := len(b)
	b = strconv.AppendInt(b, f.Remaining, 10)
	n1 := len(b)
	b = strconv.AppendInt(b, f.Reset, 10)
	// The digits are never written again: the values may share them.
	digits := unsafe.String(unsafe.SliceData(b), len(b))
	hv.v = [...]string{digits[:n0], digits[n0:n1], digits[n1:], f.Policy, f.RateLimit}
	vals := hv.v[:]
	h[keyLimit], h[keyRemaining], h[keyReset] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	h[keyPolicy], h[keyRateLimit] = vals[3:4:4], vals[4:5:5]
}

// policies remembers the RateLimit-Policy values of the profiles this
// process serves: each profile's is built once, not on every response.
var policies domain.PolicyMemo

// headerValues holds the values of one response's rate-limit fields.
type headerValues struct {
	v [5]string
	// digits holds three int64s in decimal: at most 20 bytes each.
	digits [3 * 20]byte
}

package httpmw

import (
	"net/http"
	"strconv"
	"strings"
	"time"

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

// PolicyName returns the name of a window in the RateLimit-Policy and
// RateLimit fields: "<dimension>-<window>", e.g. "user-burst",
// "tenant-sustained", "tenant_global-sustained". The dimension is part of
// the name because the draft requires names to be unique within a
// response, and the windows of two dimensions often share a name.
func PolicyName(dim domain.Dimension, window string) string {
	return dim.String() + "-" + window
}

// setRateLimitHeaders writes the rate-limit fields of d on h; it writes
// nothing when no window was counted (invalid context, a profile none of
// whose windows applies, a degraded denial that counted nothing).
//
//   - X-RateLimit-Limit: the limit of the limiting window (the one that
//     refused, or the one with the least remaining).
//   - X-RateLimit-Remaining: the minimum remaining across every window
//     checked, so across both layers of ADR-002.
//   - X-RateLimit-Reset: seconds until the limiting window is back to its
//     full quota.
//   - RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers): every window
//     checked, as a structured-field list: "user-burst";q=5;w=1. w is the
//     period in seconds, left out for a period that is not a whole number
//     of seconds (the draft has no sub-second windows). q counts units: a
//     profile with a cost above 1 spends that many per request.
//   - RateLimit: the limiting window: "user-burst";r=2;t=1. t is the
//     effective window: on a refusal, the seconds until the request would
//     pass (r units at most are available until then); otherwise the
//     seconds until the window is back to full, a conservative bound for a
//     sliding window, which frees units as they age out.
func setRateLimitHeaders(h http.Header, d *domain.Decision) {
	if d.Limit <= 0 || d.LimitingWindow == "" {
		return
	}
	remaining := max(d.Remaining, 0)
	h.Set(keyLimit, strconv.FormatInt(d.Limit, 10))
	h.Set(keyRemaining, strconv.FormatInt(remaining, 10))
	h.Set(keyReset, strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))

	var b strings.Builder
	limiting := PolicyName(d.LimitingDimension, d.LimitingWindow)
	listed := false
	for _, w := range d.Windows.All() {
		name := PolicyName(w.Dimension, w.Window.Name)
		listed = listed || name == limiting
		appendPolicy(&b, name, w.Window.Limit, w.Window.Period)
	}
	if !listed {
		// The limiting window is always a policy, even from a decision
		// whose window list is empty or partial.
		appendPolicy(&b, limiting, d.Limit, d.LimitingPeriod)
	}
	h.Set(keyPolicy, b.String())

	b.Reset()
	appendString(&b, limiting)
	b.WriteString(";r=")
	b.WriteString(strconv.FormatInt(remaining, 10))
	b.WriteString(";t=")
	b.WriteString(strconv.FormatInt(effectiveWindow(d), 10))
	h.Set(keyRateLimit, b.String())
}

// effectiveWindow is the t parameter of the RateLimit field, in seconds.
func effectiveWindow(d *domain.Decision) int64 {
	if !d.State.Passes() {
		return ceilSeconds(d.RetryAfter)
	}
	return ceilSeconds(d.ResetAfter)
}

// retryAfter is the Retry-After of a refusal, in seconds: never earlier
// than the request would pass, never earlier than the end of the
// effective window of the RateLimit field, and at least one second (a
// refusal that told a client to retry at once would invite a busy loop).
func retryAfter(d *domain.Decision) int64 {
	s := ceilSeconds(d.RetryAfter)
	if d.Limit > 0 && d.LimitingWindow != "" {
		s = max(s, effectiveWindow(d))
	}
	return max(s, 1)
}

// violatedPolicies names the windows that refused the request, for the
// problem details of a refusal; the limiting window when the decision
// lists none.
func violatedPolicies(d *domain.Decision) []string {
	var names []string
	for _, w := range d.Windows.All() {
		if !w.Allowed {
			names = append(names, PolicyName(w.Dimension, w.Window.Name))
		}
	}
	if len(names) == 0 && d.LimitingWindow != "" {
		names = append(names, PolicyName(d.LimitingDimension, d.LimitingWindow))
	}
	return names
}

// appendPolicy appends one quota policy item to a RateLimit-Policy list.
func appendPolicy(b *strings.Builder, name string, limit int64, period time.Duration) {
	if b.Len() > 0 {
		b.WriteString(", ")
	}
	appendString(b, name)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(limit, 10))
	if period >= time.Second && period%time.Second == 0 {
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(int64(period/time.Second), 10))
	}
}

// appendString serialises an RFC 9651 String: printable ASCII in quotes,
// with '"' and '\' escaped. Policy names are [a-z0-9_-] by configuration;
// anything else is replaced rather than allowed to break the field.
func appendString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// ceilSeconds rounds a duration up to whole seconds, never below 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

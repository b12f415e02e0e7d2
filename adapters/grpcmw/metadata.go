package grpcmw

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/domain"
)

// Metadata keys of a decided call: the HTTP middleware's header fields,
// lower-cased as gRPC metadata keys are.
const (
	MetadataLimit      = "x-ratelimit-limit"
	MetadataRemaining  = "x-ratelimit-remaining"
	MetadataReset      = "x-ratelimit-reset"
	MetadataPolicy     = "ratelimit-policy"
	MetadataRateLimit  = "ratelimit"
	MetadataRetryAfter = "retry-after"
)

// PolicyName returns the name of a window in the ratelimit-policy and
// ratelimit metadata and in QuotaFailure violations:
// "<dimension>-<window>", e.g. "user-burst". Names are unique within a
// call even when two dimensions have windows of the same name.
func PolicyName(dim domain.Dimension, window string) string {
	return dim.String() + "-" + window
}

// rateLimitMetadata returns the rate-limit metadata of d, nil when no
// window was counted. The values are those of the HTTP fields
// (draft-ietf-httpapi-ratelimit-headers): x-ratelimit-limit of the
// limiting window, x-ratelimit-remaining the minimum across every window,
// x-ratelimit-reset in seconds, ratelimit-policy listing every window
// checked ("user-burst";q=5;w=1) and ratelimit the limiting one
// ("user-burst";r=0;t=1, t being the seconds until the call would pass on
// a refusal, until the window is full again otherwise).
func rateLimitMetadata(d *domain.Decision) metadata.MD {
	if d.Limit <= 0 || d.LimitingWindow == "" {
		return nil
	}
	remaining := strconv.FormatInt(max(d.Remaining, 0), 10)
	limiting := PolicyName(d.LimitingDimension, d.LimitingWindow)
	var policies []string
	listed := false
	for _, w := range d.Windows.All() {
		name := PolicyName(w.Dimension, w.Window.Name)
		listed = listed || name == limiting
		policies = append(policies, policyItem(name, w.Window.Limit, w.Window.Period))
	}
	if !listed {
		policies = append(policies, policyItem(limiting, d.Limit, d.LimitingPeriod))
	}
	return metadata.Pairs(
		MetadataLimit, strconv.FormatInt(d.Limit, 10),
		MetadataRemaining, remaining,
		MetadataReset, strconv.FormatInt(ceilSeconds(d.ResetAfter), 10),
		MetadataPolicy, strings.Join(policies, ", "),
		MetadataRateLimit, quoted(limiting)+";r="+remaining+";t="+strconv.FormatInt(effectiveWindow(d), 10),
	)
}

// policyItem is one RFC 9651 list member of ratelimit-policy; w is left
// out for a period that is not a whole number of seconds.
func policyItem(name string, limit int64, period time.Duration) string {
	s := quoted(name) + ";q=" + strconv.FormatInt(limit, 10)
	if period >= time.Second && period%time.Second == 0 {
		s += ";w=" + strconv.FormatInt(int64(period/time.Second), 10)
	}
	return s
}

// quoted serialises an RFC 9651 String; policy names are [a-z0-9_-] by
// configuration, anything else is replaced.
func quoted(s string) string {
	var b strings.Builder
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
	return b.String()
}

// effectiveWindow is the t of the ratelimit metadata, in seconds.
func effectiveWindow(d *domain.Decision) int64 {
	if !d.State.Passes() {
		return ceilSeconds(d.RetryAfter)
	}
	return ceilSeconds(d.ResetAfter)
}

// retryAfter is the wait of a refusal: never earlier than the call would
// pass nor than t, at least one second.
func retryAfter(d *domain.Decision) time.Duration {
	s := ceilSeconds(d.RetryAfter)
	if d.Limit > 0 && d.LimitingWindow != "" {
		s = max(s, effectiveWindow(d))
	}
	return time.Duration(max(s, 1)) * time.Second
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

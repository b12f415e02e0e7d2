package grpcmw

import (
	"strconv"
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

// PolicyName names a window in the ratelimit-policy and ratelimit
// metadata and in QuotaFailure violations: "<dimension>-<window>", e.g.
// "user-burst" (domain.PolicyName).
func PolicyName(dim domain.Dimension, window string) string { return domain.PolicyName(dim, window) }

// rateLimitMetadata returns the rate-limit metadata of d, nil when no
// window was counted: the HTTP middleware's header fields under lower-case
// keys (domain.Decision.RateLimitFields documents each).
func rateLimitMetadata(d *domain.Decision) metadata.MD {
	f, ok := d.RateLimitFields()
	if !ok {
		return nil
	}
	return metadata.Pairs(
		MetadataLimit, strconv.FormatInt(f.Limit, 10),
		MetadataRemaining, strconv.FormatInt(f.Remaining, 10),
		MetadataReset, strconv.FormatInt(f.Reset, 10),
		MetadataPolicy, f.Policy,
		MetadataRateLimit, f.RateLimit,
	)
}

// retryAfter is the wait of a refusal: never earlier than the call would
// pass nor than the RateLimit field's t, at least one second.
func retryAfter(d *domain.Decision) time.Duration {
	return time.Duration(d.RetryAfterSeconds()) * time.Second
}

// Package envoyrls is sluice's door for every language: Envoy's global
// rate-limit service (envoy.service.ratelimit.v3.RateLimitService,
// ShouldRateLimit) on an app.Limiter, with the generated types of
// github.com/envoyproxy/go-control-plane, configured by envoyproxy/ratelimit's
// YAML as is (docs/adr/011).
//
//	cfg, err := envoyrls.LoadConfig("config/") // one domain per file
//	...
//	srv := grpc.NewServer()
//	rlsv3.RegisterRateLimitServiceServer(srv, envoyrls.New(lim, cfg))
//
// # One decision per request
//
// Every limited descriptor of a request is decided in one all-or-nothing
// decision (app.Limiter.EvaluateWindows): when one descriptor is over its
// limit, the request is OVER_LIMIT and nothing is consumed on any other
// (envoyproxy/ratelimit counts each descriptor on its own, so refused
// traffic still uses up the others: its issue #1060). Windows are sliding
// logs by default (exact), or GCRA per limit (algorithm: gcra).
//
// # What a descriptor counts per
//
// A descriptor counts per its entries (every key and value, an ip value
// grouped as sluice's ip dimension is) within the domain, and per scope:
// the file's hash_tag_key names the descriptor entry (e.g. tenant) whose
// value scopes a key, its Redis Cluster hash tag. A descriptor that
// carries the entry counts in its own value's scope; one whose key is in
// the file's unscoped_keys (e.g. remote_address) counts across scopes,
// under a tag of its own (an ip across tenants); any other counts in the
// request's scope, the value of its first hash_tag_key entry (a path
// within each tenant). Without hash_tag_key every key of the domain shares
// one tag. A request whose keys fall in several slots of a Redis Cluster
// is decided across them, still all or nothing, through a reservation
// per slot released when one refuses (docs/adr/013); one whose keys share
// a slot, or on a single server, is one store call.
//
// # The answer
//
// overall_code is OVER_LIMIT when the decision blocks; each descriptor's
// status carries its current_limit, its own limit_remaining and
// duration_until_reset, as envoyproxy/ratelimit answers: only the
// descriptors that refused are OVER_LIMIT, with nothing left, and hits
// that can never pass are refused with their whole period to reset.
// response_headers_to_add carries the IETF RateLimit and RateLimit-Policy
// fields (domain.RateLimitFields), and Retry-After on a refusal; Options
// add the peer's limit headers and dynamic metadata (NewWithOptions).
//
// # hits_addend
//
// As envoyproxy/ratelimit reads it: a descriptor's own hits_addend when
// set, else the request's, whose 0 means unset, hence 1 (both are
// unsigned in the API: a negative count cannot arrive). A descriptor's
// hits_addend of 0 is a check (app.Limiter.CheckWindows): it consumes
// nothing and is OVER_LIMIT once one more hit would be refused; a request
// whose check is refused consumes nothing on any descriptor.
// is_negative_hits (a refill) is answered OK and counts nothing: sluice
// gives back only the units a reservation holds (docs/adr/012).
//
// # The format
//
// Every construct of envoyproxy/ratelimit's format is read: wildcard values
// with '*' anywhere (foo*, bar*b, foo*bar*baz), share_threshold (every value
// a wildcard matches counts in one window), replaces (under rate_limit, or
// beside it), quota_mode, metadata, shadow_mode; detailed_metric and
// value_to_metric change nothing, as sluice never puts a descriptor's value
// in a metric label. LoadConfigWith's LoadOptions merge the files of one
// domain (MERGE_DOMAIN_CONFIG) and accept unlimited: true and
// requests_per_unit: 0 (AcceptUnlimited: a descriptor with no limit whose
// replaces are refused, and a block); without it both are refused
// (ErrUnlimited), as an allow list is. Every refusal is a *FileError naming
// the file, the domain and the descriptor; Config.Lookup tells what a
// descriptor matches.
//
// # Overrides, shadow mode, replaces, quotas
//
// A descriptor's limit override applies only when the domain
// sets limit_override_ceiling, and never above it. A limit in
// shadow_mode is decided and counted in a decision of its own that never
// refuses (so it never changes what the enforced limits consume);
// replaces drops the named limits from a request that matches the
// replacing one. A quota over its limit refuses the request only when
// every quota of the request is; the others are counted, all or nothing
// with the enforced descriptors.
//
// # When the store cannot answer
//
// The domain's degraded action (degraded: bypass, deny or local; bypass
// by default) decides, as sluice's degraded matrix does (docs/adr/005):
// bypass answers OK under a per-instance cap per scope, deny answers
// OVER_LIMIT with Retry-After 1, local keeps counting the same windows on
// the in-process store. Never a silent fail-open: every such decision is
// recorded as degraded.
package envoyrls

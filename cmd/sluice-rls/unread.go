package main

import (
	"slices"
	"strings"
)

// unread are envoyproxy/ratelimit's environment variables that
// sluice-rls does not read, with what stands for each: the rows of the
// README's settings table ("Envoy's rate-limit service") that say none
// or always on. A name ending in "*" stands for every variable it
// starts. A deployment moved from the peer keeps its environment;
// sluice-rls says at start which of it has no effect, rather than
// ignoring it without a word.
var unread = []struct {
	names   []string
	instead string
}{
	{[]string{"RUNTIME_WATCH_ROOT"}, "no hot reload, a restart reloads"},
	{[]string{"RUNTIME_IGNOREDOTFILES"}, "every *.yaml and *.yml is read, as the peer's default"},
	{[]string{"GRPC_UDS"}, "TCP only"},
	{[]string{"DEBUG_HOST", "DEBUG_PORT"}, "no debug server"},
	{[]string{"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE"}, "gRPC's defaults"},
	{[]string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}, "plaintext gRPC; TLS at the mesh or a sidecar"},
	{[]string{"CONFIG_TYPE", "CONFIG_GRPC_XDS_*", "XDS_CLIENT_*"}, "files only"},
	{[]string{"FORCE_START_WITHOUT_INITIAL_CONFIG", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}, "it never starts without a valid configuration"},
	{[]string{"QUOTA_MODE"}, "quota_mode per descriptor only"},
	{[]string{"BACKEND_TYPE"}, "REDIS_URL set: Redis; unset: the embedded store"},
	{[]string{"REDIS_SENTINEL_AUTH"}, "no Sentinel"},
	{[]string{"REDIS_POOL_SIZE", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_POOL_ON_EMPTY_WAIT_DURATION", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"},
		"one multiplexed, auto-pipelined connection per node; health is the breaker's probes"},
	{[]string{"REDIS_TIMEOUT"}, "-sluice-config's store_timeout bounds a decision's store call"},
	{[]string{"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"}, "it starts at once, DEGRADED while Redis does not answer, and connects when it does"},
	{[]string{"REDIS_PERSECOND*"}, "one store for every unit: per-second limits count on REDIS_URL too"},
	{[]string{"MEMCACHE_*"}, "no memcached"},
	{[]string{"LOCAL_CACHE_SIZE_IN_BYTES"}, "no cache of over-limit keys"},
	{[]string{"EXPIRATION_JITTER_MAX_SECONDS"}, "keys expire with their window"},
	{[]string{"CACHE_KEY_PREFIX"}, "keys are rl:{tag}:descriptor:... of HMAC pseudonyms"},
	{[]string{"NEAR_LIMIT_RATIO"}, "no near-limit statistic"},
	{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, "always on"},
	{[]string{"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS"}, "Prometheus at -metrics-addr"},
	{[]string{"USE_PROMETHEUS", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"}, "Prometheus always on, at /metrics"},
	{[]string{"LOG_LEVEL", "LOG_FORMAT"}, "text logs, application and audit channels"},
	{[]string{"TRACING_*"}, "no tracing"},
}

// unreadWhy returns what stands for the peer's variable name when
// sluice-rls does not read it, else "".
func unreadWhy(name string) string {
	for _, u := range unread {
		for _, n := range u.names {
			if prefix, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, prefix) || n == name {
				return u.instead
			}
		}
	}
	return ""
}

// unreadWarnings returns a warning for each variable of environ (as
// os.Environ gives it) that is set, non-empty, and one of the peer's that
// sluice-rls does not read, in name order.
func unreadWarnings(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if why := unreadWhy(name); why != "" && value != "" {
			out = append(out, name+" is set but sluice-rls does not read it: "+why)
		}
	}
	slices.Sort(out)
	return out
}

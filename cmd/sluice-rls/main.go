// Command sluice-rls is sluice as Envoy's global rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService): a drop-in for
// envoyproxy/ratelimit that reads its YAML as is and decides every
// descriptor of a request in one all-or-nothing decision (docs/adr/011).
//
//	sluice-rls -config deploy/envoy/config -dev   # make rls does this
//
// Flags:
//
//	-config        envoyproxy/ratelimit YAML: a file, or a directory of
//	               *.yaml files, one domain each (required)
//	-sluice-config sluice's own YAML (app.Config: store_timeout,
//	               probe_interval, shadow_mode...); optional
//	-grpc-addr     the RateLimitService and grpc.health.v1.Health
//	               (default :8081, envoyproxy/ratelimit's)
//	-health-addr   HTTP GET /healthcheck (default :8080)
//	-metrics-addr  HTTP GET /metrics, Prometheus (default :9090)
//	-dev           a throw-away HMAC secret when RATE_LIMIT_HMAC_SECRET is
//	               unset (counters start afresh at every start)
//	-accept-unlimited           load unlimited: true and requests_per_unit: 0
//	                            (refused otherwise: docs/adr/011)
//	-merge-domain-config        merge the files of one domain
//	-limit-response-headers     envoyproxy/ratelimit's limit headers
//	-limit-{limit,remaining,reset}-header  their names
//	-response-dynamic-metadata  the response's dynamic_metadata
//
// envoyproxy/ratelimit's environment variables give these flags their
// defaults (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY for
// -config, GRPC_HOST/GRPC_PORT, HOST/PORT, PROMETHEUS_ADDR,
// MERGE_DOMAIN_CONFIG, LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_*_HEADER,
// RESPONSE_DYNAMIC_METADATA), and SHADOW_MODE turns global shadow mode on;
// the README maps every one of its settings.
//
// Environment: REDIS_URL, in envoyproxy/ratelimit's forms (host:port, a
// comma-separated list with REDIS_TYPE=cluster, a socket path) with its
// REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_AUTH and REDIS_TLS (and TLS file)
// variables, or as a redis://, rediss:// or unix:// URL; without it the
// embedded local store, one instance's counts, which it warns about. A
// peer variable it cannot honour stops the start, naming the variable;
// one it does not read is named in a warning. RATE_LIMIT_HMAC_SECRET (64
// hex characters) is required without -dev. Started while Redis does not
// answer, it serves at once, DEGRADED (the degraded matrix decides; GET
// /healthcheck answers 200 and the state), and connects when Redis
// answers. SIGINT or SIGTERM stop it gracefully: health turns
// NOT_SERVING, calls in flight finish, then it exits.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// cli runs the service until ctx is done and returns the exit code. ready,
// when set, receives the bound addresses once every listener is up.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addrs)) int {
	if err := serve(ctx, args, stdout, stderr, ready); err != nil {
		fmt.Fprintln(stderr, "sluice-rls:", err)
		return 1
	}
	return 0
}

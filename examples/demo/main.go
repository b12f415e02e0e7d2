// Command demo is a small service wired with sluice: an HTTP API and a
// gRPC server, each limited by one app.Limiter configured from
// examples/demo/sluice.yaml, on the embedded local store or, with
// REDIS_URL set, on Redis.
//
//	go run ./examples/demo -dev            # make demo does this
//	go run ./examples/demo tour            # the scripted tour, against the running service
//
// The HTTP address also serves the Prometheus metrics at /metrics
// (adapters/otel) and GET /healthz (200 "OK" and the Limiter's state:
// DEGRADED too, since the demo serves by the degraded matrix while Redis
// is down); both log channels go to stderr. Started while Redis is down,
// it starts DEGRADED and recovers when Redis answers.
//
// Flags: -http-addr (default 127.0.0.1:8080), -grpc-addr (default
// 127.0.0.1:9090), -config (a YAML file; default the embedded sluice.yaml),
// -dev. sluice has no default HMAC secret: without RATE_LIMIT_HMAC_SECRET
// the demo refuses to start, unless -dev generates a throw-away one (and
// says so). -dev also opens /demo/outage, which simulates a store outage.
//
// Authentication is a stand-in: the X-Demo-User and X-Demo-Tenant headers
// (x-demo-user and x-demo-tenant gRPC metadata), and on HTTP
// X-Demo-API-Key, are believed as they are.
// A real service puts its own authenticator there; sluice only reads the
// identity it established.
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
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs the service, or the tour with "tour" as first argument, and
// returns the exit code.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 && args[0] == "tour" {
		err = tourMain(ctx, args[1:], stdout)
	} else {
		err = serveMain(ctx, args, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

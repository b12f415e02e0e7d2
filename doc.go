// Package sluice is a distributed rate limiter that Go services embed.
//
// For each request it decides, across several dimensions (ip, user, api
// key, tenant, and a tenant-wide quota) and several windows at once
// (burst, sustained…), whether the request may pass: atomically, in one
// round trip to the store, all or nothing — a refusal consumes nothing
// anywhere. When the store cannot answer it keeps deciding sensibly, per
// route family: reads pass under a per-instance cap, auth and costly routes
// fail closed, or a family keeps enforcing its limits in process.
//
// This package holds only this overview; the code is in its sub-packages:
//
//   - app: the decision pipeline (Limiter.Evaluate), its configuration
//     (YAML + environment, validated at boot), the health loop and
//     breaker, Peek and Reset, per-tenant plans, and the ADR-002 façades
//     Allow and AllowDual.
//   - domain: the pure core — windows and their two algorithms (an exact
//     sliding log and GCRA), decisions and their terminal states, the
//     health machine, keys, and typed errors with stable codes.
//   - ports: what the core needs from outside (Store, Clock, Prober,
//     Recorder), each with its contract; ports/recordertest and
//     ports/fakeclock for tests.
//   - adapters/redis (rueidis, one versioned Lua script, standalone and
//     Cluster) and adapters/local (in process, memory-bounded): the stores.
//   - adapters/httpmw and adapters/grpcmw: net/http middleware and gRPC
//     interceptors, with the RateLimit headers and uniform refusals.
//   - adapters/otel: OpenTelemetry metrics for Prometheus, traces, and the
//     application and security-audit log channels.
//   - conformance: the exported test suite every store passes.
//
// The decisions behind the design are in docs/adr; running it in
// production is in docs/runbook.md.
//
// A minimal wiring, on the in-process store:
//
//	primary, _ := local.New(local.Config{})
//	fallback, _ := local.New(local.Config{})
//	l, err := app.New(app.Config{HMACSecret: secret, Profiles: profiles},
//		app.Deps{Store: primary, Fallback: fallback, Recorder: recorder})
//	d, err := l.Evaluate(ctx, app.Request{Route: "GET /api/v1/search", ClientIP: ip})
//	if d.Blocks() {
//		// refuse: 429, 503 or 400 by d.State
//	}
package sluice

// Package otel is sluice's observability adapter: a ports.Recorder that
// exports metrics for Prometheus through OpenTelemetry, writes two
// log/slog channels, and optionally traces every decision.
//
// Build one and hand it to app.New; serve its metrics wherever the service
// serves them:
//
//	rec, err := otel.New(otel.Config{
//		InstanceID: cfg.InstanceID, // app.Config, defaults applied
//		Registry:   registry,       // nil: Prometheus' default registry
//		AppLog:     appLogger,      // *slog.Logger: no raw ip, identifier or route
//		AuditLog:   auditLogger,    // *slog.Logger: security audit
//	})
//	// The Limiter tells rec its store deadline (store_deadline_seconds).
//	lim, err := app.New(cfg, app.Deps{Store: store, Fallback: fallback, Recorder: rec})
//	mux.Handle("GET /metrics", rec.Handler())
//
// # Metrics
//
// Every name starts with Config.Prefix (default "sluice_"):
//
//	sluice_decisions_total{decision_state,route_profile,route_family,cause,instance_id}
//	sluice_rejected_total{tenant_id,layer}             THROTTLED and DENIED_DEGRADED (ADR-002)
//	sluice_system_state_changes_total{from,to}
//	sluice_system_state{instance_id,state}             1 for the current health state
//	sluice_breaker_open{instance_id}                   1 while store calls are skipped
//	sluice_store_latency_seconds{instance_id,op,outcome}  histogram, 100 µs to 50 ms and above (op: evaluate, peek, reset, reserve, settle, renew, allot)
//	sluice_store_deadline_seconds{instance_id}         the configured store deadline
//	sluice_node_state{instance_id,node,state}          1 for each store node's health state (Redis Cluster masters)
//
// With Prefix "hermes_rate_limit_" the ADR-002 series is exactly
// hermes_rate_limit_rejected_total{tenant_id,layer}. Label values come
// only from bounded sets: the domain's closed enums, the configured
// profiles (at most MaxProfiles), the instance id, and tenant pseudonyms
// capped to the most rejected Config.TenantSeries tenants (the rest count
// under "(other)"). A raw route, identifier or ip is never a label. The
// Grafana dashboard and Prometheus alerting rules in the repository's
// deploy/ directory use these names; a test keeps them in step.
//
// # Logs
//
// The application channel receives every decision (allowed ones at debug
// level, refusals and invalid contexts at info, degraded decisions and
// store failures at warn, a limit set the store refused at error), health
// transitions and resets; it never holds a raw ip, identifier or route:
// tenants appear as their pseudonym. In shadow mode decisions are counted
// and logged with the state they would have had, marked shadow=true in
// the logs. The security-audit channel receives
// THROTTLED and DENIED_DEGRADED decisions with the raw client ip and the
// route, invalid contexts with the route but no ip, and administrative
// resets with the actor and, when an ip was reset, the raw ip. Records go
// straight to each channel's slog.Handler, so a write that fails is
// returned by the Record method and reaches the Limiter's caller:
// observability fails closed. After Close every Record method returns
// ErrClosed for the same reason.
//
// # Tracing
//
// With Config.TracerProvider set, StartDecision opens a span per decision
// as a child of the incoming request's span, RecordStoreCall adds a span
// per store call, and the latency histogram carries exemplars pointing at
// them (visible in the OpenMetrics format, which Handler serves to
// scrapers that ask for it). Spans hold the state, profile, family, cause
// and limiting window; never an identifier.
package otel

// Package app is sluice's application service: the decision pipeline
// (Limiter.Evaluate), its configuration (Config, read from YAML and the
// environment and validated at boot), the health loop and breaker, the
// administrative entry points (Peek, Reset), Wait on a shared quota
// (docs/adr/010) and the ADR-002 compatibility façades (Allow, AllowDual
// and their context variants).
//
// # In one screen
//
// Build a Limiter from a Config and its ports, then decide each request:
//
//	cfg, err := app.LoadConfig("sluice.yaml", nil) // YAML + REDIS_URL + RATE_LIMIT_HMAC_SECRET
//	primary, _ := redis.New(redis.Config{URL: cfg.RedisURL})
//	fallback, _ := local.New(local.Config{})
//	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: recorder})
//	defer l.Close()
//
//	d, err := l.Evaluate(ctx, app.Request{Route: "GET /api/v1/search", ClientIP: ip, User: user, Tenant: tenant})
//	if err != nil { /* the decision could not be recorded: fail closed */ }
//	if d.Blocks() { /* 429 (Throttled), 503 (DeniedDegraded) or 400 (RejectedInvalidContext) */ }
//
// The HTTP middleware (adapters/httpmw) and the gRPC interceptors
// (adapters/grpcmw) do the extraction and the answers; adapters/otel is
// the production Recorder.
//
// # Reservations
//
// A route whose cost is known only once served, or that bounds requests
// in flight (a concurrency window), decides through Limiter.Reserve: the
// decision of Evaluate plus a lease, held in a Reservation until the
// entry point settles it (Finish, Settle) or its lease expires
// (docs/adr/012). Limiter.Reserving tells such routes apart; Evaluate
// leaves concurrency windows out.
//
// # What a Decision says
//
// State is terminal (Allowed, Throttled, BypassDegraded, DeniedDegraded,
// RejectedInvalidContext) and Cause is from a closed set. Windows lists
// every window checked with its own remaining and reset. Degraded is true
// when the primary store did not decide (breaker open, failure, timeout)
// and the degraded matrix did; a degraded decision may still pass (a read
// bypassing under its cap, or local enforcement), but its counts are this
// instance's alone (Source). Config.StoreTimeout is the one store deadline,
// and it counts the store's time: time the service itself could not run,
// or spent queued behind a coalesced call or in the store's own queue
// before the call was sent, is not Redis', nor is a node's time spent on
// the calls ahead of it (docs/adr/008, "Every call, under its own
// deadline").
// A decision that waited for the store past Config.ShedAfter, or whose
// caller gave up, is refused (DeniedDegraded, cause overloaded or
// caller_gone), never bypassed. A store's own capabilities (the Redis
// store's per-node prober and memory check: ports.HealthProber,
// ports.MemoryChecker) come without naming them in Deps.
//
// # Allotments
//
// A key set this instance decides often, far from its limits, is decided
// in process from an allotment: a block of requests reserved at the store
// in one call, ahead of the instant (ports.Allotter), spent over a hold
// (Config.AllotmentHold), the rest given back; near a limit the store
// decides one request at a time. Such decisions say Source allotment;
// they never admit past a window, across instances (docs/adr/019).
// Config.Allotments, a profile's or a window's "off", and
// CountedWindow.NoAllotments turn them off; Limiter.Allotments reports
// them.
//
// # Rules kept
//
// The pipeline, the degraded matrix, the health machine and the
// invariants (no allow list, no hot reload, uniform invalid-context
// answers, fail-closed observability) are in docs/adr/005; hash tags and
// what each dimension counts per in docs/adr/004 and docs/adr/013 (an ip
// window counts per ip, and a decision whose keys span cluster slots
// stays all or nothing through reservations); plans in docs/adr/006; the
// façades in docs/adr/002.
//
// No raw identifier leaves the Limiter in a store key or a recorded label:
// identities are normalised and pseudonymised (HMAC-SHA256 under the
// configured secret) before any key is built. The raw client address is
// handed to the Recorder only as DecisionRecord.ClientIP (and
// ResetRecord.ClientIP), for the security-audit channel.
//
// The package depends on domain and ports only; adapters plug in through
// Deps. Everything time-driven reads the ports.Clock, so tests step a fake
// clock through every health transition without sleeping.
package app

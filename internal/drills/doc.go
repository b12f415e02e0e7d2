// Package drills holds sluice's reliability and security drills: tests
// that break real redis-server processes (started by internal/redistest)
// and the network to them (internal/faultproxy) under steady traffic,
// and assert what the service does. docs/runbook.md gives the figures
// they measure and what an operator does about each case.
//
// The package has no code outside its tests. Run it with
//
//	go test -count=1 -v ./internal/drills/ | grep FIGURE
//
// to see the figures (docs/runbook.md was written from such a run). Every drill uses production's 50 ms store deadline
// and a probe interval shortened to 250 ms through the configuration, as
// an operator would shorten it; the drills about counts rather than time
// use a 2 s deadline instead, so that a lone slow call on a loaded machine
// is not noise in a count, and run in parallel with each other. The
// drills assert states, counts and ordering, never a speed: the one bound
// on time is that no decision waits past the deadline plus a margin of
// ten deadlines (see latencyMargin), which only a hang can exceed.
//
// # What each drill does
//
// TestOutageKill: steady traffic on every route family (reads, logins,
// exports, a ledger) from eight goroutines while redis-server is killed
// with SIGKILL, then started again, empty. The breaker opens before the
// next probe; reads bypass under the per-client cap of 2 × burst per
// minute, logins and exports are denied with Retry-After 1 s; recovery is
// replayed probe by probe through the health machine (RECOVERING at the
// first good probe, HEALTHY after three); counts are exact again. The
// ledger shows what the empty restart forgot. TestHTTPOutage is the same
// drill through the real HTTP middleware, asserting status codes,
// Retry-After and problem types.
//
// TestLimiterStartsDuringARedisOutage: a Limiter wired as the README
// shows, started while redis-server is down (a port chosen before):
// DEGRADED at once on its state and metrics, the degraded matrix
// deciding, HEALTHY once the server starts (the health loop connects the
// store); the Redis password reaches no log line. sluice-rls and the
// demo run the same drill as processes in their own packages.
//
// TestSlowRedis, TestBlackHole, TestCutReplies: the fault proxy delays
// every reply past the deadline and the probe timeout, accepts and never
// answers, or cuts replies in half. The breaker opens on in-band failures
// before any probe; every decision meanwhile is the degraded matrix's; the
// ledger shows that nothing was lost and that the only extra units are
// those of calls that failed after reaching Redis. TestSlowerThanDeadline:
// Redis slower than the deadline but fast enough for the probes: the
// breaker cycles, and the drill measures the cycle.
//
// TestClusterFailover: a cluster of three masters with one replica each;
// the master holding the ledger is killed under traffic, its replica takes
// over, and the old master comes back as a replica. It measures how long
// decisions were degraded and whether the ledger lost or gained units
// (replication is asynchronous).
//
// TestClusterOperations (docs/adr/008): on a cluster of three masters
// with one replica each (cluster-require-full-coverage no), under 16
// workers: a hot tenant's slot resharded as redis-cli does it (TRYAGAIN
// retried, no breaker opens, every tenant exact); a slot left half
// migrated (each call stops at the redirection bound, degraded with
// redis.ErrRedirections, no breaker opens); a replica killed (nothing
// degrades); then its master killed and restarted (its node's breaker
// only; the other masters' tenants exact and primary).
//
// TestForeignValues: a key holding a LIST, HASH, SET, STREAM or a
// malformed value: that decision's StoreValueError, degraded with cause
// store_value and audited; the breaker never opens.
//
// TestBurstOpensNoBreaker: bursts of 1 000 concurrent identical requests
// through the HTTP middleware with the demo's configuration: the store
// counts each burst exactly, and missed deadlines the store does not
// confirm open no breaker (SLUICE_DRILL_BURSTS=50 measures 50 bursts and
// asserts none opened it). TestBreakerOpensUnderLoad: SIGKILL, SIGSTOP, a
// black hole and a Redis slower than the deadline still open it on
// in-band failures under 32 workers.
//
// TestEvictionFigures: for each maxmemory-policy, how many requests of
// one user pass in one window of 20 per 6 s on a full 3 MB Redis
// (SLUICE_DRILL_EVICTION=all for all eight policies).
//
// TestRestart (per persistence setting and kind of stop), TestScriptFlush,
// TestMemoryFull (noeviction) and TestMemoryEvicting (allkeys-lru,
// volatile-lru): what happens to the counts and the decisions, asserted.
//
// TestReplicasOnFallback: ADR-002's release evidence, three instances on
// one Redis, then Redis down: with the local action a client passes limit
// × 3; with deny, nothing.
//
// TestSpikeNoRace: 20 bursts of 1 000 identical requests over HTTP on
// Redis (from raw keep-alive connections, a load tool's cost), then a 5 s
// mixed spike from 96 clients with a login client on the side, with
// production's deadline and probe interval: every burst exact, no login
// 503, no breaker opening; figures for Redis calls per decision and per
// burst (coalescing, docs/adr/007) and latencies. It runs alone and
// without the race detector, whose slowness would make the 50 ms deadline
// meaningless.
//
// TestNoRawIdentifier, TestSecretRotation, TestRedisCredentials,
// TestRedisCredentialsRefused, TestMalformedRedisURLKeepsThePasswordOut,
// TestHTTPInvalidContextIsUniform, TestHTTPSpoofedForwardedHeader: no raw
// identifier in Redis keys, metrics or logs; rotating the HMAC secret
// starts every counter afresh (and how to roll it without a burst);
// passwords, ACL users and TLS; the uniform 400; spoofed forwarding
// headers.
package drills

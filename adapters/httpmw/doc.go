// Package httpmw is sluice's net/http entry point: a
// func(http.Handler) http.Handler that decides every request with an
// app.Limiter before the handler runs.
//
//	mux := httpmw.NewServeMux()
//	mux.HandleFunc("GET /api/v1/users/{id}", getUser)
//	if err := lim.CheckRoutes(mux.Patterns()); err != nil { // every route has a profile
//		return err
//	}
//	limit, err := httpmw.New(lim, httpmw.Config{Route: mux.Route(), Identity: fromAuth})
//	...
//	http.ListenAndServe(addr, authenticate(limit(mux)))
//
// # What a request is counted by
//
// Route: the template the router matched, never the raw path. With Go's
// ServeMux, the middleware either wraps the whole mux (Config.Route =
// MuxRoute(mux), which asks the mux where it will route the request) or
// wraps each registered handler (the default, RequestPattern, reads
// http.Request.Pattern). ServeMux wildcards are handled: "GET
// /api/v1/users/{id}" is the profile route "GET /api/v1/users/:id". Other
// routers plug in a RouteFunc (the package example shows chi). A request
// that matches no route is not a pass: it is invalid context (400).
//
// The catch-all pattern "/" cannot be limited: a route needs at least one
// character after its slash (domain.RoutePattern), so a mux that
// registers "/" (or "/{$}") fails the boot check, and requests it would
// catch are answered 400. Register the catch-all as "/{path...}" and give it a
// profile: every request no other route matches then counts there, which
// is what a catch-all should cost.
//
// Client address: RemoteAddr. Only when RemoteAddr is inside
// Config.TrustedProxies is one forwarding header (Config.ProxyHeader:
// X-Forwarded-For or RFC 7239 Forwarded) read, taking the right-most hop
// that is not itself a trusted proxy. A forwarding header from any other
// peer is ignored, so a client cannot choose the address it is counted
// by.
//
// Identity: Config.Identity, called after the service's authentication
// (wrap the middleware inside it). An authenticated request (user, api
// key, tenant) is counted on every dimension its profile lists; an
// anonymous one on its ip windows only.
//
// # Responses
//
// A request that passes reaches the handler with the rate-limit headers
// set. A refusal never reaches it:
//
//   - Throttled: 429, Retry-After, and an application/problem+json body of
//     the quota-exceeded problem type naming the violated policies.
//   - DeniedDegraded (the shared store cannot answer and the route family
//     fails closed): 503, Retry-After (1 s), and a problem of the
//     temporary-reduced-capacity type.
//   - RejectedInvalidContext: 400 with exactly {"error":"invalid_context"},
//     whatever the cause (invalid or unmatched route, unresolved address,
//     malformed identity): the cause goes to logs and metrics only.
//   - A decision that could not be recorded: 500 (Config.OnError); sluice's
//     observability fails closed.
//
// Every decided response that counted a window carries X-RateLimit-Limit,
// X-RateLimit-Remaining (the minimum across every window, so across both
// layers of ADR-002), X-RateLimit-Reset (seconds), and the fields of
// draft-ietf-httpapi-ratelimit-headers: RateLimit-Policy lists every window
// checked ("ip-burst";q=20;w=1, "user-burst";q=5;w=1, ...) and RateLimit
// gives the limiting one ("user-burst";r=0;t=1). Policy names are
// "<dimension>-<window>" (see PolicyName). On a refusal, Retry-After is
// never earlier than the RateLimit field's t, nor than the moment the
// request would pass.
//
// While the shared store cannot answer, the headers describe the counts
// that decided, which are per instance: for a bypassed (read) route, the
// per-instance degraded cap ("ip-degraded_cap" or "user-degraded_cap",
// 2 × burst per 60 s); for a route family on the local action, its own
// windows counted by this instance alone. In shadow mode every request
// passes; the headers still say what would have been enforced (r=0 on a
// request that would have been refused), without Retry-After.
//
// A handler that panics after an allowed decision leaves that decision
// recorded: the Limiter records it before the handler runs.
//
// # Reservations
//
// A route whose profile has a concurrency window or settle rules (see
// Reserver; every route, with WithCost) is decided by the Limiter's
// Reserve, and its reservation is settled once the handler returns
// (docs/adr/012): at the cost the handler reports in the profile's cost
// header or trailer (or through WithCost's function), at nothing when
// the request failed (a 5xx or a panic) and the profile refunds
// failures, else at the cost reserved; a concurrency window's slot is
// held until then, and the lease renewed every third of its TTL while the
// handler runs. The settlement runs on a context detached from the
// request's (Config.SettleTimeout), also when the client went away or the
// handler panicked. The handler sees a writer with the same optional
// interfaces as the server's (http.Flusher, http.Hijacker,
// io.ReaderFrom, http.Pusher), and http.ResponseController reaches the
// server's writer through Unwrap. The client sees nothing of this beyond
// the usual rate-limit fields and refusals.
package httpmw

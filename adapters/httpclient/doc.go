// Package httpclient is sluice's outbound entry point: an
// http.RoundTripper that waits on a shared quota before each request, so
// that every replica of a service calling one third party stays within
// the quota the third party grants the fleet.
//
//	lim, _ := app.New(cfg, deps) // cfg has a profile for "/outbound/partner": ip window "quota", 5 per 1 s, as the partner states it
//	tr, err := httpclient.New(lim, httpclient.Config{Route: "/outbound/partner"})
//	client := &http.Client{Transport: tr}
//	resp, err := client.Do(req) // waits for the quota, then sends
//
// # What a request is counted by
//
// Config.Route names the profile that holds the quota; write its windows
// as the upstream states its quota ("5 per second": 5 per 1 s). For each
// request, Limiter.Explain gives the windows the profile and its plan
// count for the request's identities, and the Transport decides them,
// widened by its margin (below), through Limiter.EvaluateWindows: all or
// nothing, on the shared store, with the degraded matrix of the profile's
// family, every decision recorded. Config.Identity may name whose quota a
// request spends (an api key, a tenant); without it only the profile's
// ip windows count, under Config.ClientIP (0.0.0.0 by default), the same
// key on every replica: one quota for the fleet. The windows count on
// keys of their own, not the route's (Transport.Quota gives them, for
// Limiter.PeekWindows and ResetWindows). Concurrency windows are left
// out, as Limiter.Evaluate leaves them out.
//
// Pick the algorithm the upstream counts with: a sliding-log window (the
// default) for an upstream that counts its requests per period (a
// sliding or a fixed window), a GCRA window for one that is itself a
// GCRA or token bucket (a burst of L, then one every P/L). A GCRA window
// of L per P lets up to 2L − 1 requests through in one period: it says
// nothing of periods.
//
// # Waiting
//
// Each request waits under its own context, as Limiter.Wait does
// (docs/adr/010): it is sent once a decision passes on the shared store
// (it has then spent its units), never before, and no later than the
// store's retry instant plus the timer's latency. A context that ends
// first, or whose deadline comes before the retry instant, fails the
// request without sending it, with a *WaitError that keeps the last
// decision (its RetryAfter says when to come back). The degraded matrix
// applies to the route's family: a costly or auth route waits out a
// store outage (DeniedDegraded, 1 s at a time); a read route passes
// under the instance's bypass cap.
//
// # Margin
//
// The store counts each request at the instant it decides it, its stamp
// s (Redis' clock by default); the upstream counts it at the instant it
// reads it, its arrival a: some milliseconds later (the store's answer
// on its way back, the scheduler of two busy processes, a connection,
// the upstream's own reading), and not the same delay for every request.
// Five decisions in a second can be six arrivals in one of the
// upstream's seconds. Config.Margin (m, default 100 ms) is a bound on
// that spread: every request arrives between δ and δ + m after its stamp,
// δ being the promptest request's delay (whatever it is). The Transport
// widens each window by m, so that the upstream never sees more than its
// quota:
//
//   - A sliding log of L per P is counted as L per P + m. The store never
//     holds L + 1 stamps within a span shorter than P + m: a request is
//     admitted only while fewer than L units are stamped in the P + m
//     before it, later stamps included (ports.Store). Were L + 1 arrivals
//     within a span shorter than P, their stamps, each its arrival minus
//     a delay between δ and δ + m, would lie within a span shorter than
//     P + m. So at most L arrivals in any span shorter than P: within the
//     quota of an upstream counting a sliding period, and of one counting
//     fixed periods.
//   - A GCRA window of L per P, T = P/L (rounded up to the microsecond),
//     keeps its rate and gives up ⌈m/T⌉ units of burst: L' = L − ⌈m/T⌉
//     per L'·T. GCRA with burst B and interval T admits at most
//     1 + ⌊(d + (B − 1)·T)/T⌋ requests in any span d of stamps; arrivals
//     within a span d have stamps within d + m, and (L' − 1)·T + m ≤
//     (L − 1)·T, so they are never more than the upstream's GCRA admits
//     in d. When the burst cannot absorb the margin (m > (L − 1)·T), the
//     window becomes 1 per T' = ⌈(T + m)/L⌉ (T' > T). The upstream
//     admits any L arrivals at once, and L + k (k ≥ 1) within a span of
//     k·T; L + k arrivals of the widened window have stamps at least
//     (L + k − 1)·T' apart, so arrivals at least (L + k − 1)·T' − m ≥
//     T + (k − 1)·T' ≥ k·T apart.
//
// TestWidenKeepsArrivalsWithinTheUpstreamQuota checks both on simulated
// timelines, and that the windows as configured overshoot on the same
// timelines. What m must cover: the delay's spread, a connection set up
// inside it included (a TLS handshake on loaded cores can exceed 100 ms:
// keep connections alive, or raise the margin), and, when the store
// counts on the callers' clocks (redis.CallerTime), the replicas' clock
// disagreement. A request later than that can overshoot. What it costs:
// a sliding log of 5 per second runs at 5 per 1.1 s (91 % of the
// upstream's rate; for 100 per minute, 99.8 %); a GCRA window keeps its
// rate and gives up burst.
//
// Measured (TestFleetStaysWithinTheUpstreamQuota, three replicas of four
// workers on one Redis, an upstream that allows 5 per second counted in a
// sliding second on arrival, the window written 5 per 1 s, 4 s, 5 runs on
// a shared 2-core machine under the race detector): no second over 5,
// no 429, 20 of the 20 arrivals the upstream allows in 4 s in every run;
// six consecutive arrivals 1.084 to 1.100 s apart. The same fleet
// without the margin: 1 to 3 seconds over 5 (6 to 7 arrivals within
// 990 to 999 ms) and as many 429s per run.
//
// # An upstream that says "slow down"
//
// When the upstream answers one of Config.HoldStatuses (429 and 503) with
// a Retry-After of ra (seconds, or an HTTP date), the requests that spend
// the same quota (the same identities; all of them without
// Config.Identity) are held for min(ra + margin, Config.MaxHold) from
// the instant the answer arrived, on every replica, and no longer; a
// Retry-After of 0 (or a date past) holds nothing. The answer is
// returned as is; Config.Retries sends the request again first, once the
// hold is over, if it may be sent twice.
//
//   - This Transport holds at once, its requests already waiting
//     included: one whose decision passes inside the hold is not sent; it
//     waits out the hold and is decided again (the unit it spent is lost:
//     the quota only gets stricter). A request already handed to
//     Config.Next cannot be recalled, here or on another replica.
//   - Every replica: the hold is a GCRA key of its own on the shared
//     store, one per quota, with an emission interval of 1 µs. Every
//     decision checks it, in the same all-or-nothing call as the quota,
//     at a cost of one unit (1 µs of TAT) under a window of 100 ms + 1
//     unit: it passes once
//     the key's TAT is at most 100 ms ahead, and refuses before with a
//     retry-after of exactly what is left of the hold. A hold of h is
//     written under a window of 100 ms + h, which GCRA never lets the
//     TAT pass: spending that window (one call, or two when checks moved
//     the TAT meanwhile: the refusal's Remaining is the room left) puts
//     the TAT at the write + 100 ms + h, never further, whoever writes
//     and however often. So the hold ends h after the write (for what is
//     left of the hold then), holds are never summed, and a shorter one
//     never shortens a longer one.
//
// What it costs: one more key per decision, and one or two store calls
// per hold, recorded as decisions of the route (an upstream_hold window
// limits the decisions it refuses). At a hold's end the key lets one
// request of the quota pass per microsecond: a hundred waiters resume
// within 0.1 ms. A store that cannot take the write (an outage) leaves
// this Transport's own hold only. A crash leaves nothing to clean up:
// the key expires after its TAT. MaxHold is at most HoldCeiling (15
// minutes: the hold window's units, one per microsecond, stay within
// domain.MaxLimit).
//
// # Retries
//
// Config.Retries resends a request the upstream held, once the hold is
// over and the quota lets it go, only if sending it twice is safe: an
// idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE; RFC 9110,
// 9.2.2), or a request its caller marks with an Idempotency-Key (or
// X-Idempotency-Key) header, present whatever its value: the mark
// net/http's own Transport honours, and one an upstream that
// deduplicates requests reads. Its body must be readable again (none, or
// Request.GetBody, which http.NewRequest sets for in-memory bodies).
// Anything else, a POST after a 503 among them, gets the upstream's
// answer, sent once.
package httpclient

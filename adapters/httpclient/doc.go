// Package httpclient is sluice's outbound entry point: an
// http.RoundTripper that waits on a shared quota before each request, so
// that every replica of a service calling one third party stays within
// the quota the third party grants the fleet.
//
//	lim, _ := app.New(cfg, deps) // cfg has a profile for "/outbound/partner": ip window "quota", 100 per 1 m
//	tr, err := httpclient.New(lim, httpclient.Config{Route: "/outbound/partner"})
//	client := &http.Client{Transport: tr}
//	resp, err := client.Do(req) // waits for the quota, then sends
//
// # What a request is counted by
//
// Config.Route names the profile that holds the quota; its windows are
// the quota (docs/adr/010). Config.Identity may name whose quota a request
// spends (an api key, a tenant); without it only the profile's ip windows
// count, under Config.ClientIP (0.0.0.0 by default), the same key on
// every replica: one quota for the fleet. Use a sliding-log window (the
// default algorithm): it says exactly how many calls the third party saw
// in its last period.
//
// # Waiting
//
// Each request waits with app.Limiter.Wait under its own context: it is
// sent once a decision passes on the shared store (it has then spent its
// unit), never before, and no later than the store's retry instant plus
// the timer's latency. A context that ends first, or whose deadline comes
// before the retry instant, fails the request without sending it, with a
// *WaitError that keeps the last decision (its RetryAfter says when to
// come back). The Limiter's degraded matrix applies to the route's
// family: a costly or auth route waits out a store outage (DeniedDegraded,
// 1 s at a time); a read route passes under the instance's bypass cap.
//
// # An upstream that says "slow down"
//
// When the upstream answers one of Config.HoldStatuses (429 and 503) with
// a Retry-After (seconds or an HTTP date, bounded by Config.MaxHold), the
// Transport feeds it back in two ways, then returns the response as is
// (Config.Retries sends it again first, when its body can be replayed):
//
//   - This Transport sends nothing before the Retry-After (plus
//     Config.Margin) has passed: its callers wait, on the Limiter's clock,
//     with the same deadline rule as Wait, including those already inside
//     Wait when the refusal arrived (a decision that passes inside the
//     hold is not sent: the caller waits out the hold, then on the quota
//     again). A request already handed to Config.Next cannot be recalled.
//   - The quota's remaining units are spent on the shared store (one
//     Evaluate of 1 unit, then of what it reports remaining, a few times
//     over while other replicas spend too), so every replica's next
//     decision is refused until units leave the window. With a sliding
//     log, the units spent now leave one period later and the older ones
//     as they age out: the upstream's own window, if it counts as the
//     quota does, reopens at the same pace.
//
// Why this way: it goes through the Limiter's public API alone, each call
// all or nothing, so it never admits anything and never overshoots; it
// needs no new store state, so a crashed replica leaves nothing to clean
// up; and it costs a few store calls per upstream refusal, none per
// request. What it does not do: hold other replicas for exactly the
// Retry-After. They are held until the quota's units leave its window,
// which is shorter than the Retry-After when the window held units older
// than the refusal, or when the Retry-After exceeds the window's period;
// only the Transport that received the refusal honours the Retry-After to
// the end. The units spent count against every window of the profile
// (the smallest remaining is spent on each), so a second, longer window
// is charged too: conservative, never more permissive. Every store call
// is an ordinary recorded decision: the drain shows in the metrics as
// allowed decisions of the route.
//
// # Margin
//
// The store counts decisions at the instants it makes them; the upstream
// counts arrivals at the instants it reads them: some milliseconds later
// (the store's answer, a connection set up, the scheduler of two busy
// processes), and not the same for every request. Five decisions in a
// second can be six arrivals in one of the upstream's seconds. Keep a
// margin (Config.Margin, default 100 ms): make the quota's window the
// upstream's period plus the margin (5 per 1.1 s for 5 per second; for a
// quota per minute, 100 ms is nothing), and a hold lasts the Retry-After
// plus the margin. Any arrivals moved by up to the margin then stay
// within the upstream's quota. Measured (TestMarginKeepsArrivalsWithinQuota,
// three replicas of four workers on one Redis, an upstream that allows 5
// per second and counts a sliding second): with the margin, at most 5
// arrivals in any second and no 429 (5 runs of 2 s); with the window at
// exactly 1 s, 5 to 8 in one second and up to 3 429s per run: waiting
// workers decide together as units leave the window, so the decisions
// of two windows sit a hair apart, and a millisecond of delay puts both
// in one of the upstream's seconds. The connections to the upstream
// were set up before the runs: a connection set up on loaded cores can
// move an arrival by more than 100 ms.
package httpclient

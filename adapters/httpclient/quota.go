package httpclient

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// quota is what one outbound request spends: the windows the Transport
// decides for it (the profile's, widened by the margin, and the hold
// window), under the scope its holds are kept by.
type quota struct {
	// req is the decision the Transport asks for before each attempt.
	req app.WindowsRequest
	// scope names whose quota the request spends: the identities the
	// profile's windows count under, joined. Holds are kept per scope.
	scope string
}

// Quota returns the decision the Transport asks the Limiter for before
// it sends r: r's windows, widened by the margin, and the check of its
// scope's hold. The Transport counts on keys of its own (those of
// Limiter.EvaluateWindows, under the profile's name), not on the route's:
// pass it to Limiter.PeekWindows to read what r's quota has left, or to
// Limiter.ResetWindows to forget it. An error is the *domain.ContextError
// Limiter.Explain refuses r's identities with.
func (t *Transport) Quota(r *http.Request) (app.WindowsRequest, error) {
	q, _, err := t.quotaOf(r)
	return q.req, err
}

// quotaOf resolves r's quota: the windows Limiter.Explain says the
// route's profile and plan give r's identities, each widened by the
// margin (widen), plus the check of the scope's hold (holdCheck), in one
// WindowsRequest: one all-or-nothing store call per attempt. Concurrency
// windows are left out, as Limiter.Evaluate leaves them out: they count
// requests in flight, which only a reservation holds.
func (t *Transport) quotaOf(r *http.Request) (quota, app.Request, error) {
	req := t.request(r)
	x, err := t.lim.Explain(req)
	if err != nil {
		return quota{}, req, err
	}
	scope := strings.Join([]string{req.ClientIP.String(), req.User, req.Tenant, req.APIKey}, "\x00")
	ws := make([]app.CountedWindow, 0, len(x.Windows)+1)
	for _, w := range x.Windows {
		if w.Window.Algorithm == domain.Concurrency {
			continue
		}
		// The window's key names it uniquely (dimension, identity, route,
		// window) and holds pseudonyms only.
		ws = append(ws, app.CountedWindow{Subject: w.Key, Window: widen(w.Window, t.margin), Cost: x.Cost})
	}
	ws = append(ws, app.CountedWindow{Subject: holdSubject, Window: holdCheck, Cost: 1})
	return quota{
		req: app.WindowsRequest{
			RouteKey: x.Profile, Family: x.Family, Action: x.Degraded,
			Scope: scope, Windows: ws, ClientIP: req.ClientIP,
		},
		scope: scope,
	}, req, nil
}

// request is the Limiter's view of r.
func (t *Transport) request(r *http.Request) app.Request {
	req := app.Request{Route: t.cfg.Route, ClientIP: t.cfg.ClientIP, Method: r.Method}
	if t.cfg.Identity != nil {
		id := t.cfg.Identity(r)
		req.User, req.Tenant, req.APIKey = id.User, id.Tenant, id.APIKey
	}
	return req
}

// widen returns the window the Transport counts for w, the upstream's
// quota as configured, so that arrivals moved by up to m after their
// decisions never exceed w at the upstream (the package documentation,
// "Margin", gives the argument):
//
//   - a sliding log of L per P becomes L per P + m;
//   - a GCRA window of L per P (burst L, then one unit every T = P/L,
//     rounded up to the microsecond) keeps its rate and gives up
//     ⌈m/T⌉ units of burst when it has them: L − ⌈m/T⌉ per that many
//     T; a window whose burst cannot absorb m (m > (L−1)·T) becomes 1
//     per ⌈(T + m)/L⌉.
//
// m ≤ 0 leaves w as it is. m is rounded up to the microsecond.
func widen(w domain.Window, m time.Duration) domain.Window {
	if m <= 0 {
		return w
	}
	mu := ceilDiv(int64(m), int64(time.Microsecond))
	if w.Algorithm != domain.GCRA {
		w.Period += time.Duration(mu) * time.Microsecond
		return w
	}
	l := w.Limit
	t := ceilDiv(w.PeriodMicros(), l)
	if mu <= (l-1)*t {
		l -= ceilDiv(mu, t)
	} else {
		l, t = 1, ceilDiv(t+mu, l)
	}
	w.Limit, w.Period = l, time.Duration(l*t)*time.Microsecond
	return w
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

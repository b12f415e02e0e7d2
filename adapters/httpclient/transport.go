package httpclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Decider resolves and decides the Transport's windows; *app.Limiter is
// one. Explain gives the windows a request's profile and plan count;
// EvaluateWindows decides them, widened by the margin, with the hold's
// check, all or nothing; Evaluate records a request whose context
// Explain refused (it decides nothing else).
type Decider interface {
	Explain(req app.Request) (app.Explanation, error)
	EvaluateWindows(ctx context.Context, req app.WindowsRequest) (domain.Decision, error)
	Evaluate(ctx context.Context, req app.Request) (domain.Decision, error)
}

var _ Decider = (*app.Limiter)(nil)

// Identity is whose quota an outbound request spends (e.g. the api key
// the third party issued). Empty fields are absent identities.
type Identity struct {
	User, Tenant, APIKey string
}

// Defaults of Config.
const (
	// DefaultMaxHold bounds the hold an upstream's Retry-After may impose.
	DefaultMaxHold = time.Minute
	// DefaultMargin is the safety margin of Config.Margin.
	DefaultMargin = 100 * time.Millisecond
	// minRetry is the sleep after a refusal whose retry-after is zero,
	// as in Limiter.Wait: a floor against a busy loop.
	minRetry = time.Millisecond
)

// Config configures a Transport. The zero value of every field but Route
// is its documented default.
type Config struct {
	// Route is the route template whose profile holds the quota (e.g.
	// "/outbound/partner"), its windows written as the upstream states
	// its quota (5 per 1 s). Required; it must have a profile.
	Route string
	// Identity returns whose quota a request spends. nil means none: only
	// the profile's ip windows count, under ClientIP.
	Identity func(*http.Request) Identity
	// ClientIP is the address the profile's ip windows count under. The
	// zero Addr means 0.0.0.0: every replica then counts on one key, so
	// the ip windows are the fleet's shared quota.
	ClientIP netip.Addr
	// Next sends the request once it may go. nil means
	// http.DefaultTransport.
	Next http.RoundTripper
	// HoldStatuses are the upstream statuses whose Retry-After holds the
	// quota shut. Empty means 429 and 503.
	HoldStatuses []int
	// MaxHold bounds the hold one Retry-After imposes, margin included
	// (default DefaultMaxHold, at most HoldCeiling): an upstream cannot
	// stop the fleet for longer.
	MaxHold time.Duration
	// Retries is how many times a request the upstream answered with a
	// hold status and a Retry-After is sent again, once the hold is over
	// and the quota lets it go, before its answer is returned. 0 (the
	// default) returns every answer as is. Only a request that may be
	// sent twice is retried: an idempotent method (GET, HEAD, OPTIONS,
	// TRACE, PUT, DELETE; RFC 9110, 9.2.2), or one its caller marks with
	// an Idempotency-Key or X-Idempotency-Key header, the mark
	// net/http's Transport honours too; and its body must be readable
	// again (none, or Request.GetBody).
	Retries int
	// Clock tells time for the local hold; it must be the Limiter's. nil
	// means ports.SystemClock.
	Clock ports.Clock
	// Margin bounds how much the delays between the store's decisions
	// and the upstream's arrivals differ (default DefaultMargin; negative
	// means none). The Transport widens each window of the quota by it (a
	// sliding log of 5 per 1 s is counted as 5 per 1.1 s), so that an
	// upstream counting arrivals never sees more than its quota in any
	// of its periods; and a hold lasts the Retry-After plus Margin (see
	// the package documentation, "Margin").
	Margin time.Duration
}

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	switch {
	case c.Route == "":
		return &domain.ConfigError{Field: "httpclient.route", Reason: "required"}
	case c.MaxHold < 0:
		return &domain.ConfigError{Field: "httpclient.max_hold", Reason: "negative"}
	case c.MaxHold > HoldCeiling:
		return &domain.ConfigError{Field: "httpclient.max_hold", Reason: "above " + HoldCeiling.String()}
	case c.Retries < 0:
		return &domain.ConfigError{Field: "httpclient.retries", Reason: "negative"}
	}
	for _, s := range c.HoldStatuses {
		if s < 100 || s > 999 {
			return &domain.ConfigError{Field: "httpclient.hold_statuses", Reason: "not an HTTP status"}
		}
	}
	return nil
}

// WaitError is a request that was not sent because the quota did not let
// it go: its context ended (or its deadline would pass first), its
// context is invalid for the Limiter, or the decision could not be
// recorded. Decision is the Limiter's last decision (the zero Decision
// when the request ended in this Transport's own hold, before any
// decision); Err wraps the cause
// (context.Canceled, context.DeadlineExceeded, domain.ErrInvalidContext,
// the Recorder's error).
type WaitError struct {
	Decision domain.Decision
	Err      error
}

func (e *WaitError) Error() string { return "httpclient: quota wait: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *WaitError) Unwrap() error { return e.Err }

// Transport is an http.RoundTripper that waits on a shared quota before
// each request. It is safe for simultaneous use.
type Transport struct {
	lim   Decider
	cfg   Config
	clock ports.Clock
	// margin is Config.Margin, 0 when none.
	margin time.Duration
	holds  holds
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that spends lim's quota for cfg.Route. A route
// without a profile is refused.
func New(lim Decider, cfg Config) (*Transport, error) {
	if lim == nil {
		return nil, &domain.ConfigError{Field: "httpclient.limiter", Reason: "required"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.ClientIP.IsValid() {
		cfg.ClientIP = netip.IPv4Unspecified()
	}
	if _, err := lim.Explain(app.Request{Route: cfg.Route, ClientIP: cfg.ClientIP}); err != nil {
		return nil, &domain.ConfigError{Field: "httpclient.route", Reason: err.Error()}
	}
	if cfg.Next == nil {
		cfg.Next = http.DefaultTransport
	}
	if len(cfg.HoldStatuses) == 0 {
		cfg.HoldStatuses = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}
	}
	cfg.MaxHold = cmp.Or(cfg.MaxHold, DefaultMaxHold)
	cfg.Margin = cmp.Or(cfg.Margin, DefaultMargin)
	t := &Transport{lim: lim, cfg: cfg, clock: cfg.Clock, margin: max(cfg.Margin, 0)}
	t.holds.until = map[string]time.Time{}
	if t.clock == nil {
		t.clock = ports.SystemClock{}
	}
	return t, nil
}

// RoundTrip waits until the quota lets r go (the hold of r's scope first,
// then the quota's windows, with r's context), sends it through Next,
// and holds the scope when the upstream asks for it. It returns the
// upstream's response as is, or a *WaitError when r was not sent.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	q, req, err := t.quotaOf(r)
	if err != nil {
		// Decided by the Limiter too, so that the refusal is recorded.
		d, rerr := t.lim.Evaluate(r.Context(), req)
		closeBody(r)
		return nil, &WaitError{Decision: d, Err: errors.Join(err, rerr)}
	}
	for attempt := 0; ; attempt++ {
		if err := t.wait(r.Context(), &q); err != nil {
			closeBody(r)
			return nil, err
		}
		resp, err := t.cfg.Next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		received := t.clock.Now()
		ra, ok := t.retryAfter(resp, received)
		if !ok {
			return resp, nil
		}
		t.hold(r.Context(), &q, t.holdFor(ra), received)
		if attempt >= t.cfg.Retries || !replayable(r) {
			return resp, nil
		}
		next, err := rewind(r)
		if err != nil {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r = next
	}
}

// wait sleeps out the scope's hold on this Transport, then decides q
// until a decision passes, sleeping each refusal's retry-after (the
// store's hold of the scope is one of q's windows, so every replica's
// hold is waited out here), and returns nil once one passes with no hold
// of this Transport set meanwhile: a request that was waiting when a hold
// arrived waits it out and is decided again (the unit it spent is lost:
// the quota only ever gets stricter), so that nothing of this Transport
// is sent inside its hold. Like Limiter.Wait (docs/adr/010), it returns
// at once when a retry instant is not before ctx's deadline, and waits
// out DeniedDegraded decisions.
func (t *Transport) wait(ctx context.Context, q *quota) error {
	var d domain.Decision
	for {
		if err := ctx.Err(); err != nil {
			return &WaitError{Decision: d, Err: err}
		}
		if left := t.holds.left(q.scope, t.clock.Now()); left > 0 {
			if err := t.sleep(ctx, left); err != nil {
				return &WaitError{Decision: d, Err: err}
			}
			continue
		}
		var err error
		d, err = t.lim.EvaluateWindows(ctx, q.req)
		switch {
		case err != nil:
			return &WaitError{Decision: d, Err: err}
		case !d.Blocks():
			if t.holds.left(q.scope, t.clock.Now()) > 0 {
				continue
			}
			return nil
		case d.State == domain.RejectedInvalidContext:
			return &WaitError{Decision: d, Err: fmt.Errorf("quota of %s: %w", t.cfg.Route, domain.ErrInvalidContext)}
		}
		// The store's retry-after, to the microsecond: a hold's end lets
		// one check pass per microsecond (holdCheck); only a zero one is
		// floored, as in Limiter.Wait.
		if err := t.sleep(ctx, cmp.Or(max(d.RetryAfter, 0), minRetry)); err != nil {
			return &WaitError{Decision: d, Err: err}
		}
	}
}

// sleep waits d on the clock; like Limiter.Wait, it returns at once when
// ctx's deadline comes first.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if deadline, ok := ctx.Deadline(); ok && !t.clock.Now().Add(d).Before(deadline) {
		return fmt.Errorf("retry in %v is past the deadline: %w", d, context.DeadlineExceeded)
	}
	tm := t.clock.NewTimer(d)
	select {
	case <-tm.C():
		return nil
	case <-ctx.Done():
		tm.Stop()
		return ctx.Err()
	}
}

// replayable reports whether r may be sent again (Config.Retries): an
// idempotent method (RFC 9110, 9.2.2), or a request marked with an
// Idempotency-Key or X-Idempotency-Key header (as net/http's Transport
// reads it: the header present, whatever its value), and a body that can
// be read again.
func replayable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody && r.GetBody == nil {
		return false
	}
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := r.Header["Idempotency-Key"]
	_, xkey := r.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewind returns a copy of r whose body reads from the start again.
func rewind(r *http.Request) (*http.Request, error) {
	next := r.Clone(r.Context())
	if r.GetBody != nil {
		body, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

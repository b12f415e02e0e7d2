package httpclient

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Waiter waits on a shared quota and decides single requests;
// *app.Limiter is one.
type Waiter interface {
	Wait(ctx context.Context, req app.Request) (domain.Decision, error)
	Evaluate(ctx context.Context, req app.Request) (domain.Decision, error)
}

var _ Waiter = (*app.Limiter)(nil)

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
	// drainAttempts bounds the store calls one hold spends draining the
	// quota while other replicas spend it too.
	drainAttempts = 4
)

// Config configures a Transport. The zero value of every field but Route
// is its documented default.
type Config struct {
	// Route is the route template whose profile holds the quota (e.g.
	// "/outbound/partner"). Required; it must have a profile.
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
	// MaxHold bounds the hold one Retry-After imposes (default
	// DefaultMaxHold): an upstream cannot stop the fleet for longer.
	MaxHold time.Duration
	// Retries is how many times a request the upstream answered with a
	// hold status and a Retry-After is sent again, once the quota lets it
	// go, before its answer is returned. 0 (the default) returns every
	// answer as is. Only a request whose body can be read again (no body,
	// or Request.GetBody) is retried.
	Retries int
	// Clock tells time for the local hold; it must be the Limiter's. nil
	// means ports.SystemClock.
	Clock ports.Clock
	// Margin is the safety margin between the instants sluice decides
	// and those the upstream sees (default DefaultMargin; negative means
	// none): a request reaches the upstream some time after its quota
	// decision (the store's answer, the connection, the scheduler), and
	// not always the same time. An upstream hold lasts the Retry-After
	// plus Margin. Configure the quota's window likewise: the upstream's
	// period plus Margin (5 per 1.1 s for an upstream that allows 5 per
	// second), so that an upstream that counts arrivals sees at most its
	// quota in any of its periods however the arrivals move, up to
	// Margin (see the package documentation, "Margin").
	Margin time.Duration
}

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	switch {
	case c.Route == "":
		return &domain.ConfigError{Field: "httpclient.route", Reason: "required"}
	case c.MaxHold < 0:
		return &domain.ConfigError{Field: "httpclient.max_hold", Reason: "negative"}
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
	lim   Waiter
	cfg   Config
	clock ports.Clock
	// holdUntil is the end of the local hold, in microseconds since the
	// epoch on the clock; 0 when none was set.
	holdUntil atomic.Int64
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that spends lim's quota for cfg.Route.
func New(lim Waiter, cfg Config) (*Transport, error) {
	if lim == nil {
		return nil, &domain.ConfigError{Field: "httpclient.limiter", Reason: "required"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.ClientIP.IsValid() {
		cfg.ClientIP = netip.IPv4Unspecified()
	}
	if cfg.Next == nil {
		cfg.Next = http.DefaultTransport
	}
	if len(cfg.HoldStatuses) == 0 {
		cfg.HoldStatuses = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}
	}
	cfg.MaxHold = cmp.Or(cfg.MaxHold, DefaultMaxHold)
	cfg.Margin = cmp.Or(cfg.Margin, DefaultMargin)
	t := &Transport{lim: lim, cfg: cfg, clock: cfg.Clock}
	if t.clock == nil {
		t.clock = ports.SystemClock{}
	}
	return t, nil
}

// RoundTrip waits until the quota lets r go (the local hold first, then
// Limiter.Wait with r's context), sends it through Next, and feeds an
// upstream hold back into the quota. It returns the upstream's response
// as is, or a *WaitError when r was not sent.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	req := t.request(r)
	for attempt := 0; ; attempt++ {
		if err := t.wait(r.Context(), req); err != nil {
			closeBody(r)
			return nil, err
		}
		resp, err := t.cfg.Next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		hold, ok := t.holdOf(resp)
		if !ok {
			return resp, nil
		}
		t.hold(r.Context(), req, hold)
		if attempt >= t.cfg.Retries || (r.Body != nil && r.Body != http.NoBody && r.GetBody == nil) {
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

// request is the Limiter's view of r.
func (t *Transport) request(r *http.Request) app.Request {
	req := app.Request{Route: t.cfg.Route, ClientIP: t.cfg.ClientIP, Method: r.Method}
	if t.cfg.Identity != nil {
		id := t.cfg.Identity(r)
		req.User, req.Tenant, req.APIKey = id.User, id.Tenant, id.APIKey
	}
	return req
}

// wait sleeps out the local hold, then waits on the shared quota, until
// a decision passes with no hold set meanwhile: a request that was inside
// Limiter.Wait when an upstream hold arrived waits out the hold, then
// waits on the quota again (the unit it spent is lost: the quota only
// ever gets stricter), so that nothing of this Transport is sent inside
// the hold.
func (t *Transport) wait(ctx context.Context, req app.Request) error {
	for {
		if d := t.held(); d > 0 {
			if err := t.sleep(ctx, d); err != nil {
				return &WaitError{Err: err}
			}
		}
		d, err := t.lim.Wait(ctx, req)
		if err != nil {
			return &WaitError{Decision: d, Err: err}
		}
		if t.held() > 0 {
			continue
		}
		return nil
	}
}

// held is how long this Transport's hold still lasts (0 or less: none).
func (t *Transport) held() time.Duration {
	until := t.holdUntil.Load()
	if until == 0 {
		return 0
	}
	return time.Duration(until-t.clock.Now().UnixMicro()) * time.Microsecond
}

// sleep waits d on the clock; like Limiter.Wait, it returns at once when
// ctx's deadline comes first.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if deadline, ok := ctx.Deadline(); ok && !t.clock.Now().Add(d).Before(deadline) {
		return fmt.Errorf("upstream hold of %v is past the deadline: %w", d, context.DeadlineExceeded)
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

// holdOf returns the hold an upstream answer asks for: a hold status with
// a Retry-After (seconds or an HTTP date), bounded by MaxHold.
func (t *Transport) holdOf(resp *http.Response) (time.Duration, bool) {
	held := false
	for _, s := range t.cfg.HoldStatuses {
		held = held || resp.StatusCode == s
	}
	if !held {
		return 0, false
	}
	v := resp.Header.Get("Retry-After")
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
		d = time.Duration(min(secs, int64(t.cfg.MaxHold/time.Second)+1)) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(t.clock.Now())
	} else {
		return 0, false
	}
	return min(max(d, 0), t.cfg.MaxHold), true
}

// hold keeps the quota shut after an upstream hold of d: this Transport
// sends nothing before now + d + Margin, and the quota's remaining units are spent
// on the shared store, so every replica waits until they leave their
// windows (see the package documentation).
func (t *Transport) hold(ctx context.Context, req app.Request, d time.Duration) {
	until := t.clock.Now().Add(d + max(t.cfg.Margin, 0)).UnixMicro()
	for {
		cur := t.holdUntil.Load()
		if cur >= until || t.holdUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	ctx = context.WithoutCancel(ctx)
	cost := int64(1)
	for range drainAttempts {
		req.Cost = cost
		dec, err := t.lim.Evaluate(ctx, req)
		if err != nil || dec.Degraded || dec.Remaining <= 0 {
			return
		}
		cost = dec.Remaining
	}
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

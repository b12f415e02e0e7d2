package httpclient

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// An upstream hold lives on the shared store as one GCRA key per scope
// whose emission interval is one microsecond (the package documentation,
// "An upstream that says slow down"). Its TAT is the hold's end plus
// holdSlack:
//
//   - every decision checks it at cost 1 under holdCheck, a window of
//     holdSlack + 1 units: admitted iff TAT − now ≤ holdSlack, i.e. once
//     the hold has ended, and refused before with a retry-after of exactly
//     what is left of the hold. An admitted check moves the TAT one
//     microsecond on: holdSlack is the room for checks at one instant
//     (100 000), and they drain as fast as time passes (10⁶ a second);
//   - a hold of h is written under holdWindow(h), a window of holdSlack +
//     h units: GCRA never lets the TAT pass now + holdSlack + h, so the
//     hold ends at most h after the write, whoever writes and however
//     often; spending the whole window moves it there.
//
// Both windows have the same emission interval, so each reads the TAT
// the other wrote as it is (docs/adr/009, rule S1).
const (
	holdSubject = "upstream-hold"
	holdName    = "upstream_hold"
	holdSlack   = int64(100 * time.Millisecond / time.Microsecond)
	// holdAttempts bounds the store calls that write one hold while
	// checks move the TAT meanwhile.
	holdAttempts = 4
	// HoldCeiling bounds Config.MaxHold: the hold window's units, one per
	// microsecond, stay within domain.MaxLimit.
	HoldCeiling = 15 * time.Minute
)

// holdCheck is the window every decision checks its scope's hold with.
var holdCheck = holdWindow(1)

// holdWindow is the hold key's window for a hold of h microseconds.
func holdWindow(h int64) domain.Window {
	n := holdSlack + h
	return domain.Window{Name: holdName, Algorithm: domain.GCRA, Limit: n, Period: time.Duration(n) * time.Microsecond}
}

// holds are this Transport's own holds: the instant each scope's ends,
// on the clock. They stop this Transport's requests at once, those
// already waiting included, before the store has the hold.
type holds struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// left returns how long scope's hold still lasts at now (≤ 0: none).
func (h *holds) left(scope string, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.until[scope]
	if !ok {
		return 0
	}
	return until.Sub(now)
}

// set holds scope until until, unless a later hold is set; holds over at
// now are forgotten.
func (h *holds) set(scope string, until, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s, u := range h.until {
		if !u.After(now) {
			delete(h.until, s)
		}
	}
	if until.After(h.until[scope]) {
		h.until[scope] = until
	}
}

// retryAfter returns the wait an upstream answer asks for: true for one
// of Config.HoldStatuses with a Retry-After (delay-seconds, or an HTTP
// date: one in the past asks for 0), false for any other answer.
func (t *Transport) retryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	if !slices.Contains(t.cfg.HoldStatuses, resp.StatusCode) {
		return 0, false
	}
	v := resp.Header.Get("Retry-After")
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
		// Bounded before the multiplication, which could overflow.
		return time.Duration(min(secs, int64(t.cfg.MaxHold/time.Second)+1)) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// holdFor is the hold a Retry-After of ra imposes: none for 0, else ra
// plus the margin, bounded by MaxHold.
func (t *Transport) holdFor(ra time.Duration) time.Duration {
	if ra <= 0 {
		return 0
	}
	return min(ra+t.margin, t.cfg.MaxHold)
}

// hold shuts q's scope for d from received, the instant the upstream's
// answer arrived: this Transport at once, then every replica through the
// scope's hold key on the shared store, written for what is left of d
// at the write. The write spends the whole hold window (one call when no
// hold is set); when that is refused because a check or another hold
// moved the TAT, the refusal's Remaining is the room left below the
// window's bound, spent in the next call. A refusal with no room means a
// hold as long is already set. A write the store cannot take (an outage)
// is given up: this Transport's own hold still stands.
func (t *Transport) hold(ctx context.Context, q *quota, d time.Duration, received time.Time) {
	if d <= 0 {
		return
	}
	t.holds.set(q.scope, received.Add(d), received)
	h := int64((d - t.clock.Now().Sub(received)) / time.Microsecond)
	if h < 1 {
		return
	}
	w := holdWindow(h)
	req := q.req
	req.Windows = []app.CountedWindow{{Subject: holdSubject, Window: w, Cost: w.Limit}}
	ctx = context.WithoutCancel(ctx)
	for range holdAttempts {
		dec, err := t.lim.EvaluateWindows(ctx, req)
		if err != nil || dec.State != domain.Throttled || dec.Remaining <= 0 {
			return
		}
		req.Windows[0].Cost = dec.Remaining
	}
}

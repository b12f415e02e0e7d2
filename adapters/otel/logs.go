package otel

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Log messages: stable, so that log queries can match them.
const (
	MsgDecision   = "rate limit decision"
	MsgRefusal    = "rate limit refusal"
	MsgInvalid    = "rate limit invalid context"
	MsgTransition = "rate limit system state change"
	MsgReset      = "rate limit reset"
)

// maxAuditRoute bounds the raw route written to the audit log: a route
// is client input when the context is invalid.
const maxAuditRoute = 300

// Bounds of the requested method and path written to the audit record of
// an invalid context, in bytes of input: both are raw client input.
const (
	maxAuditMethod = 32
	maxAuditPath   = 256
)

// channels are the two log channels. Records go to the handlers directly,
// not through slog.Logger, whose methods drop a handler's error: a record
// that cannot be written is an error for the caller.
type channels struct {
	app, audit slog.Handler
}

// appLevel is the application log's level for a decision: allowed
// decisions are debug noise, degraded ones and store failures warnings, a
// request shape the store refused (a defect) an error.
func appLevel(rec *ports.DecisionRecord) slog.Level {
	d := &rec.Decision
	switch {
	case d.Cause == domain.CauseInvalidLimit:
		return slog.LevelError
	case d.Degraded, d.State == domain.BypassDegraded, d.State == domain.DeniedDegraded:
		return slog.LevelWarn
	case d.State == domain.Throttled, d.State == domain.RejectedInvalidContext:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// decision writes a decision to the application log (no ip, no route, no
// identifier: the tenant is its pseudonym) and, when it is a refusal or an
// invalid context, to the audit log.
// The clock is read only when a record is written.
func (c *channels) decision(ctx context.Context, clock ports.Clock, rec *ports.DecisionRecord) error {
	var appErr, auditErr error
	if lvl := appLevel(rec); c.app.Enabled(ctx, lvl) {
		r := slog.NewRecord(clock.Now(), lvl, MsgDecision, 0)
		decisionAttrs(&r, rec)
		r.AddAttrs(
			slog.Bool("degraded", rec.Decision.Degraded),
			slog.String("source", rec.Decision.Source.String()),
			slog.Int64("limit", rec.Decision.Limit),
			slog.Int64("remaining", rec.Decision.Remaining),
		)
		if rec.StoreLatency > 0 {
			r.AddAttrs(slog.Duration("store_latency", rec.StoreLatency))
		}
		errAttrs(&r, rec.Err)
		appErr = c.app.Handle(ctx, r)
	}
	switch rec.Decision.State {
	case domain.Throttled, domain.DeniedDegraded:
		auditErr = c.refusal(ctx, clock, rec)
	case domain.RejectedInvalidContext:
		auditErr = c.invalid(ctx, clock, rec)
	}
	return joinLogErrors(appErr, auditErr)
}

// refusal writes a THROTTLED or DENIED_DEGRADED decision to the audit log,
// the one place the raw client ip is written.
func (c *channels) refusal(ctx context.Context, clock ports.Clock, rec *ports.DecisionRecord) error {
	if !c.audit.Enabled(ctx, slog.LevelWarn) {
		return nil
	}
	r := slog.NewRecord(clock.Now(), slog.LevelWarn, MsgRefusal, 0)
	if rec.ClientIP.IsValid() {
		r.AddAttrs(slog.String("client_ip", rec.ClientIP.String()))
	}
	decisionAttrs(&r, rec)
	r.AddAttrs(slog.Duration("retry_after", rec.Decision.RetryAfter))
	routeAttrs(&r, rec.Route)
	return c.audit.Handle(ctx, r)
}

// invalid writes a REJECTED_INVALID_CONTEXT decision to the audit log:
// the raw route and the cause, never the ip.
func (c *channels) invalid(ctx context.Context, clock ports.Clock, rec *ports.DecisionRecord) error {
	if !c.audit.Enabled(ctx, slog.LevelWarn) {
		return nil
	}
	r := slog.NewRecord(clock.Now(), slog.LevelWarn, MsgInvalid, 0)
	decisionAttrs(&r, rec)
	routeAttrs(&r, rec.Route)
	requestedAttrs(&r, rec)
	errAttrs(&r, rec.Err)
	return c.audit.Handle(ctx, r)
}

// decisionAttrs are the bounded fields both channels share.
func decisionAttrs(r *slog.Record, rec *ports.DecisionRecord) {
	d := &rec.Decision
	r.AddAttrs(
		slog.String("decision_state", d.State.String()),
		slog.String("route_profile", d.Profile),
		slog.String("route_family", d.Family.String()),
		slog.String("cause", string(d.Cause)),
		slog.String("system_state", d.SystemState.String()),
	)
	if rec.TenantID != "" {
		r.AddAttrs(slog.String("tenant_id", rec.TenantID))
	}
	if d.LimitingWindow != "" {
		r.AddAttrs(slog.String("limiting_dimension", d.LimitingDimension.String()),
			slog.String("limiting_window", d.LimitingWindow))
	}
	if d.Plan != "" {
		r.AddAttrs(slog.String("plan", d.Plan))
	}
	if d.Shadow {
		r.AddAttrs(slog.Bool("shadow", true))
	}
}

// routeAttrs adds the raw route, cut to maxAuditRoute bytes.
func routeAttrs(r *slog.Record, route string) {
	if len(route) > maxAuditRoute {
		r.AddAttrs(slog.String("route", strings.ToValidUTF8(route[:maxAuditRoute], "")), slog.Bool("route_truncated", true))
		return
	}
	r.AddAttrs(slog.String("route", route))
}

// requestedAttrs adds what the client asked for (the method and the path
// as received), so that an operator can see the request no route matched.
// Both are cut to their bound and escaped (escapeAudit).
func requestedAttrs(r *slog.Record, rec *ports.DecisionRecord) {
	if rec.Method != "" {
		m, cut := escapeAudit(rec.Method, maxAuditMethod)
		r.AddAttrs(slog.String("requested_method", m))
		if cut {
			r.AddAttrs(slog.Bool("requested_method_truncated", true))
		}
	}
	if rec.Path != "" {
		p, cut := escapeAudit(rec.Path, maxAuditPath)
		r.AddAttrs(slog.String("requested_path", p))
		if cut {
			r.AddAttrs(slog.Bool("requested_path_truncated", true))
		}
	}
}

// escapeAudit cuts s to at most limit bytes of input, on a rune boundary,
// and escapes what a log reader must not receive raw: control and format
// characters (line breaks, terminal escapes, bidirectional overrides) as
// \uXXXX, bytes that are not UTF-8 as \xXX, and the backslash itself, so
// that an escape in the output is always one the writer made. It
// allocates only for input that needs it.
func escapeAudit(s string, limit int) (string, bool) {
	cut := len(s) > limit
	if cut {
		s = s[:limit]
		// Not in the middle of the last rune: its first bytes alone would
		// read as invalid UTF-8.
		for j := len(s) - 1; j >= 0 && j >= len(s)-utf8.UTFMax; j-- {
			if utf8.RuneStart(s[j]) {
				if !utf8.FullRuneInString(s[j:]) {
					s = s[:j]
				}
				break
			}
		}
	}
	clean := true
	for _, c := range s {
		if needsEscape(c) {
			clean = false
			break
		}
	}
	if clean {
		return s, cut
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case c == '\\':
			b.WriteString(`\\`)
		case needsEscape(c):
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), cut
}

// needsEscape reports the runes escapeAudit escapes.
func needsEscape(c rune) bool {
	return c == utf8.RuneError || c == '\\' || unicode.IsControl(c) || unicode.Is(unicode.Cf, c)
}

func errAttrs(r *slog.Record, err error) {
	if err == nil {
		return
	}
	if code := domain.CodeOf(err); code != "" {
		r.AddAttrs(slog.String("error_code", string(code)))
	}
	r.AddAttrs(slog.String("error", err.Error()))
}

// transition writes a health transition to the application log: a warning
// when the store is lost, information when it comes back.
func (c *channels) transition(ctx context.Context, change domain.StateChange, at time.Time) error {
	lvl := slog.LevelInfo
	if change.To == domain.Degraded {
		lvl = slog.LevelWarn
	}
	if !c.app.Enabled(ctx, lvl) {
		return nil
	}
	r := slog.NewRecord(at, lvl, MsgTransition, 0)
	r.AddAttrs(slog.String("from", change.From.String()), slog.String("to", change.To.String()))
	return joinLogErrors(c.app.Handle(ctx, r), nil)
}

// reset writes an administrative reset to both channels: the application
// log knows what was reset (dimension, key count, pseudonyms), the audit
// log also who asked and, for an ip, the raw address.
func (c *channels) reset(ctx context.Context, now time.Time, rec *ports.ResetRecord) error {
	lvl := slog.LevelInfo
	if rec.Err != nil {
		lvl = slog.LevelWarn
	}
	var appErr, auditErr error
	if c.app.Enabled(ctx, lvl) {
		r := slog.NewRecord(now, lvl, MsgReset, 0)
		resetAttrs(&r, rec)
		errAttrs(&r, rec.Err)
		appErr = c.app.Handle(ctx, r)
	}
	if c.audit.Enabled(ctx, lvl) {
		r := slog.NewRecord(now, lvl, MsgReset, 0)
		r.AddAttrs(slog.String("actor", rec.Actor))
		if rec.ClientIP.IsValid() {
			r.AddAttrs(slog.String("client_ip", rec.ClientIP.String()))
		}
		if rec.ClientPrefix.IsValid() {
			r.AddAttrs(slog.String("client_prefix", rec.ClientPrefix.String()))
		}
		resetAttrs(&r, rec)
		errAttrs(&r, rec.Err)
		auditErr = c.audit.Handle(ctx, r)
	}
	return joinLogErrors(appErr, auditErr)
}

// resetAttrs writes a reset's phase (begun: written before any key is
// deleted; done: with the outcome, and the keys deleted when the store
// tells), dimension, keys and pseudonyms.
func resetAttrs(r *slog.Record, rec *ports.ResetRecord) {
	phase := "begun"
	if rec.Done {
		phase = "done"
	}
	r.AddAttrs(slog.String("phase", phase), slog.String("dimension", rec.Dimension.String()), slog.Int("keys", rec.Keys))
	if rec.Done && rec.Deleted >= 0 {
		r.AddAttrs(slog.Int("deleted", rec.Deleted))
	}
	if rec.SubjectID != "" {
		r.AddAttrs(slog.String("subject_id", rec.SubjectID))
	}
	if rec.TenantID != "" {
		r.AddAttrs(slog.String("tenant_id", rec.TenantID))
	}
}

// joinLogErrors names the channel that failed.
func joinLogErrors(appErr, auditErr error) error {
	switch {
	case appErr == nil && auditErr == nil:
		return nil
	case auditErr == nil:
		return fmt.Errorf("sluice otel: application log: %w", appErr)
	case appErr == nil:
		return fmt.Errorf("sluice otel: audit log: %w", auditErr)
	}
	return fmt.Errorf("sluice otel: application log: %w; audit log: %w", appErr, auditErr)
}

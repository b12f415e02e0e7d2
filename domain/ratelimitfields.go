package domain

import (
	"strconv"
	"sync/atomic"
	"time"
)

// RateLimitFields are the rate-limit fields of a decision, as every entry
// point sends them: the HTTP middleware as headers, the gRPC interceptors
// as metadata. They follow draft-ietf-httpapi-ratelimit-headers, whose
// values are RFC 9651 structured fields, plus the widespread X-RateLimit
// trio.
type RateLimitFields struct {
	// Limit is the limit of the limiting window (X-RateLimit-Limit).
	Limit int64
	// Remaining is the minimum remaining across every window checked, so
	// across both layers of ADR-002 (X-RateLimit-Remaining).
	Remaining int64
	// Reset is the seconds until the limiting window is back to its full
	// quota (X-RateLimit-Reset).
	Reset int64
	// Policy lists every window checked as a structured-field list
	// (RateLimit-Policy): "user-burst";q=5;w=1, "tenant-sustained";q=100;w=60.
	// q counts units (a request of cost c spends c); w, the period in
	// seconds, is left out for a period that is not a whole number of
	// seconds, as the draft has no sub-second windows.
	Policy string
	// RateLimit names the limiting window with what is left of it
	// (RateLimit): "user-burst";r=2;t=1. t is the effective window: on a
	// refusal the seconds until the request would pass, otherwise the
	// seconds until the window is back to full (a conservative bound for a
	// sliding log, which frees units as they age out).
	RateLimit string
}

// PolicyName names a window in the rate-limit fields and in the details of
// a refusal: "<dimension>-<window>", e.g. "user-burst",
// "tenant_global-sustained". The dimension is part of the name because the
// names of one response must be unique and the windows of two dimensions
// often share a name.
func PolicyName(dim Dimension, window string) string {
	return dim.String() + "-" + window
}

// RateLimitFields returns the decision's rate-limit fields; ok is false
// when no window was counted (an invalid context, a profile none of whose
// windows applies, a degraded denial that counted nothing), and then
// nothing should be sent.
func (d *Decision) RateLimitFields() (f RateLimitFields, ok bool) {
	if d.Limit <= 0 || d.LimitingWindow == "" {
		return f, false
	}
	f.Limit, f.Remaining, f.Reset = d.Limit, max(d.Remaining, 0), ceilSeconds(d.ResetAfter)
	limiting := PolicyName(d.LimitingDimension, d.LimitingWindow)
	// Both fields are built in one buffer and cut from one string: one
	// allocation per decision.
	var buf [1024]byte
	b := buf[:0]
	listed := false
	for _, w := range d.Windows.All() {
		name := PolicyName(w.Dimension, w.Window.Name)
		listed = listed || name == limiting
		b = appendPolicy(b, name, w.Window.Limit, w.Window.Period)
	}
	if !listed {
		// The limiting window is always a policy, even from a decision
		// whose window list is partial.
		b = appendPolicy(b, limiting, d.Limit, d.LimitingPeriod)
	}
	cut := len(b)
	b = appendSFString(b, limiting)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, f.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, d.effectiveWindow(), 10)
	s := string(b)
	f.Policy, f.RateLimit = s[:cut], s[cut:]
	return f, true
}

// RateLimitFieldsMemo is RateLimitFields with the RateLimit-Policy value
// taken from m when m holds it for the decision's windows (and remembered
// there when not): the same fields, without building and copying the
// policy list on every decision of a profile. A nil m, or a decision
// whose limiting window is not among its windows, builds it as
// RateLimitFields does.
func (d *Decision) RateLimitFieldsMemo(m *PolicyMemo) (f RateLimitFields, ok bool) {
	if d.Limit <= 0 || d.LimitingWindow == "" {
		return f, false
	}
	ws := d.Windows.All()
	listed := false
	for i := range ws {
		if samePolicyName(ws[i].Dimension, ws[i].Window.Name, d.LimitingDimension, d.LimitingWindow) {
			listed = true
			break
		}
	}
	if m == nil || !listed {
		return d.RateLimitFields()
	}
	f.Limit, f.Remaining, f.Reset = d.Limit, max(d.Remaining, 0), ceilSeconds(d.ResetAfter)
	f.Policy = m.policy(ws)
	var buf [128]byte
	b := appendSFString(buf[:0], PolicyName(d.LimitingDimension, d.LimitingWindow))
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, f.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, d.effectiveWindow(), 10)
	f.RateLimit = string(b)
	return f, true
}

// samePolicyName reports whether PolicyName(d1, w1) == PolicyName(d2,
// w2), without building either.
func samePolicyName(d1 Dimension, w1 string, d2 Dimension, w2 string) bool {
	if d1 == d2 {
		return w1 == w2
	}
	a, b := d1.String(), d2.String()
	n := len(a) + 1 + len(w1)
	if len(b)+1+len(w2) != n {
		return false
	}
	at := func(dim, w string, i int) byte {
		switch {
		case i < len(dim):
			return dim[i]
		case i == len(dim):
			return '-'
		}
		return w[i-len(dim)-1]
	}
	for i := range n {
		if at(a, w1, i) != at(b, w2, i) {
			return false
		}
	}
	return true
}

// PolicyMemo remembers RateLimit-Policy values with the windows they
// list: every decision of one profile (and plan) lists the same windows,
// hence the same policy. It holds policyMemoSlots values, in slots chosen
// by a hash of the windows; a miss builds the value and takes the slot.
// The zero value is ready to use; it is safe for simultaneous use.
type PolicyMemo struct {
	slots [policyMemoSlots]atomic.Pointer[policyMemoEntry]
}

// policyMemoSlots bounds a PolicyMemo: a service has a few profiles.
const policyMemoSlots = 16

type policyMemoEntry struct {
	windows []policyWindow
	policy  string
}

// policyWindow is what a window contributes to a policy value.
type policyWindow struct {
	dim    Dimension
	name   string
	limit  int64
	period time.Duration
}

// policy returns the RateLimit-Policy value listing ws.
func (m *PolicyMemo) policy(ws []WindowCheck) string {
	h := uint64(len(ws))
	for i := range ws {
		w := &ws[i]
		h = h*0x9e3779b97f4a7c15 + uint64(w.Dimension)<<56 + uint64(len(w.Window.Name))<<48 + uint64(w.Window.Limit) + uint64(w.Window.Period)
	}
	slot := &m.slots[(h^h>>29)%policyMemoSlots]
	if e := slot.Load(); e != nil && e.lists(ws) {
		return e.policy
	}
	e := &policyMemoEntry{windows: make([]policyWindow, len(ws))}
	var buf [1024]byte
	b := buf[:0]
	for i := range ws {
		w := &ws[i]
		e.windows[i] = policyWindow{dim: w.Dimension, name: w.Window.Name, limit: w.Window.Limit, period: w.Window.Period}
		b = appendPolicy(b, PolicyName(w.Dimension, w.Window.Name), w.Window.Limit, w.Window.Period)
	}
	e.policy = string(b)
	slot.Store(e)
	return e.policy
}

// lists reports whether e's policy lists exactly ws.
func (e *policyMemoEntry) lists(ws []WindowCheck) bool {
	if len(e.windows) != len(ws) {
		return false
	}
	for i := range ws {
		w, p := &ws[i], &e.windows[i]
		if w.Dimension != p.dim || w.Window.Limit != p.limit || w.Window.Period != p.period || w.Window.Name != p.name {
			return false
		}
	}
	return true
}

// RetryAfterSeconds is the Retry-After of a refusal, in whole seconds:
// never earlier than the request would pass, never earlier than the end of
// the effective window of the RateLimit field, and at least one second (a
// refusal that told a client to retry at once would invite a busy loop).
func (d *Decision) RetryAfterSeconds() int64 {
	s := ceilSeconds(d.RetryAfter)
	if d.Limit > 0 && d.LimitingWindow != "" {
		s = max(s, d.effectiveWindow())
	}
	return max(s, 1)
}

// ViolatedPolicies names the windows that refused the request, for the
// details of a refusal; the limiting window when the decision lists none.
func (d *Decision) ViolatedPolicies() []string {
	var names []string
	for _, w := range d.Windows.All() {
		if !w.Allowed {
			names = append(names, PolicyName(w.Dimension, w.Window.Name))
		}
	}
	if len(names) == 0 && d.LimitingWindow != "" {
		names = append(names, PolicyName(d.LimitingDimension, d.LimitingWindow))
	}
	return names
}

// effectiveWindow is the t parameter of the RateLimit field, in seconds.
func (d *Decision) effectiveWindow() int64 {
	if !d.State.Passes() {
		return ceilSeconds(d.RetryAfter)
	}
	return ceilSeconds(d.ResetAfter)
}

// appendPolicy appends one quota policy item to a RateLimit-Policy list.
func appendPolicy(b []byte, name string, limit int64, period time.Duration) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = appendSFString(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, limit, 10)
	if period >= time.Second && period%time.Second == 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, int64(period/time.Second), 10)
	}
	return b
}

// appendSFString serialises an RFC 9651 String: printable ASCII in quotes,
// with '"' and '\' escaped. Policy names are [a-z0-9_-] by configuration;
// anything else is replaced rather than allowed to break the field.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ceilSeconds rounds a duration up to whole seconds, never below 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

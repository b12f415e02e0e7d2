package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Evaluator is what the service needs of an app.Limiter: a decision on
// windows, and a check of windows that consumes nothing (a descriptor's
// hits_addend of 0).
type Evaluator interface {
	EvaluateWindows(ctx context.Context, req app.WindowsRequest) (domain.Decision, error)
	CheckWindows(ctx context.Context, req app.WindowsRequest) (domain.Decision, error)
}

var _ Evaluator = (*app.Limiter)(nil)

// Service is envoy.service.ratelimit.v3.RateLimitService on a Limiter. It
// is safe for simultaneous use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim Evaluator
	cfg *Config
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns the service deciding with lim under cfg.
func New(lim Evaluator, cfg *Config) *Service { return &Service{lim: lim, cfg: cfg} }

// planned is one request descriptor, matched.
type planned struct {
	rule    *rule
	window  domain.Window
	unit    string
	mult    uint32
	subject string
	// scope is the scope of the descriptor's key: "" for the request's.
	scope  string
	cost   int64
	shadow bool
	// check marks a descriptor whose hits_addend is 0: a check that
	// consumes nothing, refused when one more hit would be (cost is 1).
	check bool
	// index is the descriptor's place in the request and its status'.
	index int
	// slot is the descriptor's window in its kind's counted decision
	// (enforced or shadow; -1 for a check), checkSlot in its check;
	// several descriptors with one subject, scope and window share one.
	slot, checkSlot int
}

// ShouldRateLimit decides every limited descriptor of req in one
// all-or-nothing decision (docs/adr/011): a refusal consumes nothing on
// any descriptor. Descriptors whose hits_addend is 0 are checks: the
// request's windows are checked first, consuming nothing, and a refused
// check refuses the request before anything is counted. Descriptors in
// shadow mode are decided apart, in decisions that never refuse. A request
// with no domain or no descriptor is InvalidArgument; a decision that
// could not be recorded is Internal (observability fails closed).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" || len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "domain and at least one descriptor are required")
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	d := s.cfg.domains[req.Domain]
	if d == nil {
		return resp, nil // nothing configured: nothing limited
	}
	plans, scope := d.plan(req)
	for _, shadow := range []bool{false, true} {
		if err := s.decide(ctx, resp, d, plans, scope, shadow); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// decide decides the plans in shadow mode or not, and writes their
// statuses. Without checks it is one EvaluateWindows. With checks, one
// CheckWindows of every window (the checks at one hit, the counted at
// their cost) comes first: when it refuses, or lets the request through
// degraded (bypass counts no descriptor), it is the answer; otherwise the
// counted descriptors are decided by EvaluateWindows. A check can go stale
// between the two calls (another request may spend the checked window),
// never a counted window: those are decided exactly, all or nothing.
func (s *Service) decide(ctx context.Context, resp *rlsv3.RateLimitResponse, d *domainRules, plans []*planned, scope string, shadow bool) error {
	counted := app.WindowsRequest{RouteKey: d.routeKey, Action: d.action, Scope: scope, Shadow: shadow}
	checked := counted
	var mine, checks, rest []*planned
	for _, p := range plans {
		if p == nil || p.shadow != shadow {
			continue
		}
		mine = append(mine, p)
		if p.check {
			checks = append(checks, p)
		} else {
			rest = append(rest, p)
			p.slot, p.checkSlot = addWindow(&counted, p), addWindow(&checked, p)
		}
	}
	// The checks go in last, so each knows the cost counted on its key.
	for _, p := range checks {
		p.slot, p.checkSlot = -1, addWindow(&checked, p)
	}
	bySlot := func(p *planned) int { return p.slot }
	if len(checks) > 0 {
		if len(checked.Windows) > domain.MaxLimits {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			return nil
		}
		dec, err := s.lim.CheckWindows(ctx, checked)
		if err != nil {
			return status.Error(codes.Internal, "decision not recorded")
		}
		byCheck := func(p *planned) int { return p.checkSlot }
		if len(rest) == 0 || dec.Blocks() || dec.State == domain.BypassDegraded {
			s.answer(resp, &dec, mine, byCheck, shadow, true)
			return nil
		}
		// The checks' statuses; the fields come from the decision below.
		s.answer(resp, &dec, checks, byCheck, shadow, false)
	}
	if len(counted.Windows) == 0 {
		return nil
	}
	if len(counted.Windows) > domain.MaxLimits {
		// More limited descriptors than one decision holds: refused
		// whole rather than decided in parts.
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		return nil
	}
	dec, err := s.lim.EvaluateWindows(ctx, counted)
	if err != nil {
		return status.Error(codes.Internal, "decision not recorded")
	}
	s.answer(resp, &dec, rest, bySlot, shadow, true)
	return nil
}

// addWindow adds p's window to wr, merging a descriptor whose subject,
// scope and window are already there, and returns its index. Merged hits add up
// (envoyproxy/ratelimit increments the key twice); a check, added after
// the descriptors that count, asks for one hit, which any cost covers.
func addWindow(wr *app.WindowsRequest, p *planned) int {
	for i, w := range wr.Windows {
		if w.Subject == p.subject && w.Scope == p.scope && w.Window.Name == p.window.Name {
			if p.check {
				wr.Windows[i].Cost = max(w.Cost, p.cost)
			} else {
				wr.Windows[i].Cost += p.cost
			}
			wr.Windows[i].Window = minWindow(w.Window, p.window)
			return i
		}
	}
	wr.Windows = append(wr.Windows, app.CountedWindow{Subject: p.subject, Scope: p.scope, Window: p.window, Cost: p.cost})
	return len(wr.Windows) - 1
}

func minWindow(a, b domain.Window) domain.Window {
	if b.Limit < a.Limit {
		return b
	}
	return a
}

// plan matches every descriptor of req, applies replaces, and returns one
// plan per descriptor (nil: not limited) and the request's scope: the
// value of the first hash_tag_key entry. A descriptor that carries that
// entry counts in its own value's scope, one of unscoped_keys in a scope
// of its own, any other in the request's (docs/adr/011).
func (d *domainRules) plan(req *rlsv3.RateLimitRequest) ([]*planned, string) {
	plans := make([]*planned, len(req.Descriptors))
	scope := ""
	replaced := map[string]bool{}
	for i, desc := range req.Descriptors {
		keys, values := entries(desc)
		own, tagged := d.tagOf(keys, values)
		if scope == "" && tagged {
			scope = own
		}
		p := d.planOne(desc, keys, values, req.GetHitsAddend())
		if p == nil {
			continue
		}
		p.index = i
		switch {
		case tagged:
			p.scope = own
		case d.unscoped[keys[0]]:
			// Never a tag value: those are header values, without NUL.
			p.scope = bounded("\x00" + p.subject)
		}
		if p.rule != nil {
			for _, r := range p.rule.replaces {
				replaced[r] = true
			}
		}
		plans[i] = p
	}
	for i, p := range plans {
		if p != nil && p.rule != nil && p.rule.name != "" && replaced[p.rule.name] {
			plans[i] = nil
		}
	}
	return plans, scope
}

// tagOf returns the value of a descriptor's hash_tag_key entry, and
// whether it has one.
func (d *domainRules) tagOf(keys, values []string) (string, bool) {
	if d.tagKey == "" {
		return "", false
	}
	for j, k := range keys {
		if k == d.tagKey {
			return bounded(values[j]), true
		}
	}
	return "", false
}

// planOne matches one descriptor: its rule, the limit override within the
// ceiling, its cost. nil when nothing is limited.
//
// The cost is envoyproxy/ratelimit's: the descriptor's own hits_addend
// when set, 0 included, else the request's, whose 0 means unset, hence 1
// (a uint32 in the API: a negative count cannot arrive). A descriptor's 0
// is a check (docs/adr/011). is_negative_hits asks for a refill, which
// sluice does not apply: the descriptor is answered OK and counts nothing.
func (d *domainRules) planOne(desc *rlcommon.RateLimitDescriptor, keys, values []string, requestHits uint32) *planned {
	cost := int64(max(requestHits, 1))
	if h := desc.GetHitsAddend(); h != nil {
		cost = int64(min(h.GetValue(), domain.MaxLimit+1))
	}
	if desc.GetIsNegativeHits() || len(keys) == 0 {
		// A descriptor without entries names nothing.
		return nil
	}
	r := d.match(keys, values)
	p := &planned{rule: r, cost: cost, subject: subject(keys, values)}
	if cost == 0 {
		// A check asks whether one more hit would pass.
		p.cost, p.check = 1, true
	}
	if r != nil {
		p.window, p.unit, p.mult, p.shadow = r.window, r.unit, r.mult, r.shadow
	}
	if o := desc.GetLimit(); o != nil && d.ceiling != nil {
		if w, unit, mult, ok := d.override(o, r); ok {
			p.window, p.unit, p.mult = w, unit, mult
		}
	}
	if p.window.Limit == 0 {
		return nil
	}
	return p
}

// override turns a descriptor's limit override into a window, its rate
// lowered to the domain's ceiling.
func (d *domainRules) override(o *rlcommon.RateLimitDescriptor_RateLimitOverride, r *rule) (domain.Window, string, uint32, bool) {
	unit := o.GetUnit().String()
	period, ok := units[unit]
	if !ok || o.GetRequestsPerUnit() == 0 {
		return domain.Window{}, "", 0, false
	}
	mult := max(o.GetUnitMultiplier().GetValue(), uint32(1))
	if period > domain.MaxPeriod/time.Duration(mult) {
		return domain.Window{}, "", 0, false
	}
	period *= time.Duration(mult)
	// The ceiling's rate over the override's period, in whole requests.
	ceil := int64(float64(d.ceiling.limit) * (float64(period) / float64(d.ceiling.period)))
	limit := min(int64(o.GetRequestsPerUnit()), ceil, domain.MaxLimit)
	if limit < 1 {
		// Under one request per the override's period: the ceiling's own
		// window is the highest rate allowed.
		limit, period, unit, mult = d.ceiling.limit, d.ceiling.period, d.ceiling.unit, d.ceiling.mult
	}
	w := domain.Window{Name: "override", Limit: limit, Period: period, Algorithm: domain.SlidingLog}
	if r != nil {
		w.Name, w.Algorithm = r.window.Name, r.window.Algorithm
	}
	if w.Algorithm == domain.SlidingLog {
		w.Limit = min(w.Limit, domain.MaxSlidingLogLimit)
	}
	return w, unit, mult, true
}

// entries returns a descriptor's keys and values, an ip value normalised
// as sluice's ip dimension is (IPv6 grouped by /64).
func entries(desc *rlcommon.RateLimitDescriptor) (keys, values []string) {
	for _, e := range desc.GetEntries() {
		v := e.GetValue()
		if a, err := netip.ParseAddr(v); err == nil {
			if n, err := domain.NormaliseIP(a); err == nil {
				v = n
			}
		}
		keys, values = append(keys, e.GetKey()), append(values, v)
	}
	return keys, values
}

// subject is what a descriptor counts: its entries, length-prefixed so no
// two lists of entries join to the same string.
func subject(keys, values []string) string {
	var b strings.Builder
	for i, k := range keys {
		for _, s := range [2]string{k, values[i]} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return bounded(b.String())
}

// bounded keeps an identity within app.MaxSubjectLen: a longer one (a long
// path or header value) is counted by its SHA-256, which the Limiter then
// pseudonymises like any identity, rather than refused.
func bounded(s string) string {
	if len(s) <= app.MaxSubjectLen && utf8.ValidString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// answer writes one decision into the response: the statuses of plans,
// each read at its slot in the decision, the overall code and, with
// headers, the rate-limit fields. A shadow decision never refuses.
func (s *Service) answer(resp *rlsv3.RateLimitResponse, dec *domain.Decision, plans []*planned, slot func(*planned) int, shadow, headers bool) {
	checks := dec.Windows.All()
	// A bypass decision counted the degraded cap, not the descriptors.
	perWindow := dec.State != domain.BypassDegraded
	for _, p := range plans {
		st := resp.Statuses[p.index]
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
			Name: ruleName(p), RequestsPerUnit: uint32(p.window.Limit),
			Unit: rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[p.unit]),
		}
		switch i := slot(p); {
		case dec.State == domain.DeniedDegraded || dec.State == domain.RejectedInvalidContext:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.DurationUntilReset = durationpb.New(max(dec.RetryAfter, domain.DeniedRetryAfter))
		case perWindow && i >= 0 && i < len(checks):
			c := checks[i]
			if !c.Allowed {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			st.LimitRemaining = uint32(min(max(c.Remaining, 0), int64(^uint32(0))))
			st.DurationUntilReset = durationpb.New(max(c.ResetAfter, c.RetryAfter))
		}
		if shadow || dec.Shadow {
			// Shadow mode reports the count and never refuses.
			st.Code = rlsv3.RateLimitResponse_OK
		}
	}
	if dec.Blocks() {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if shadow || !headers {
		return
	}
	if f, ok := dec.RateLimitFields(); ok {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			header("RateLimit-Policy", f.Policy), header("RateLimit", f.RateLimit))
	}
	if dec.Blocks() {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			header("Retry-After", strconv.FormatInt(dec.RetryAfterSeconds(), 10)))
	}
}

func ruleName(p *planned) string {
	if p.rule != nil && p.rule.name != "" {
		return p.rule.name
	}
	return p.window.Name
}

func header(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }

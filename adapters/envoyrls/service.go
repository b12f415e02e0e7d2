package envoyrls

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

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

// Options are the service's optional answers, envoyproxy/ratelimit's
// settings of the same names.
type Options struct {
	// LimitHeaders adds envoyproxy/ratelimit's rate-limit response headers
	// (its LIMIT_RESPONSE_HEADERS_ENABLED) to response_headers_to_add: the
	// limit, the remaining and the seconds to reset of the descriptor
	// closest to its limit, or of the one over it. Beside them sluice
	// always sends the IETF RateLimit-Policy and RateLimit fields.
	LimitHeaders bool
	// LimitHeader, RemainingHeader and ResetHeader name them; empty:
	// envoyproxy/ratelimit's defaults, RateLimit-Limit, RateLimit-Remaining
	// and RateLimit-Reset (its LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
	// LIMIT_RESET_HEADER).
	LimitHeader, RemainingHeader, ResetHeader string
	// DynamicMetadata sets the response's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the request's descriptors (their entries "key=value", limit override
	// and hits_addend), the request's hits_addend, and under "metadata" the
	// configured metadata of every limited descriptor answered OK, merged.
	// The entries are the request's own values, returned to the Envoy that
	// sent them; sluice puts none in a key, a label or a log.
	DynamicMetadata bool
}

// Service is envoy.service.ratelimit.v3.RateLimitService on a Limiter. It
// is safe for simultaneous use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim  Evaluator
	cfg  *Config
	opts Options
	// globalShadow: the Limiter's Config.ShadowMode, which a refusal
	// decided without it (a descriptor that can never pass) honours too.
	globalShadow bool
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns the service deciding with lim under cfg, without the
// optional answers.
func New(lim Evaluator, cfg *Config) *Service { return NewWithOptions(lim, cfg, Options{}) }

// NewWithOptions returns the service deciding with lim under cfg, with
// the optional answers o asks for.
func NewWithOptions(lim Evaluator, cfg *Config, o Options) *Service {
	o.LimitHeader = cmp.Or(o.LimitHeader, "RateLimit-Limit")
	o.RemainingHeader = cmp.Or(o.RemainingHeader, "RateLimit-Remaining")
	o.ResetHeader = cmp.Or(o.ResetHeader, "RateLimit-Reset")
	s := &Service{lim: lim, cfg: cfg, opts: o}
	if c, ok := lim.(interface{ Config() app.Config }); ok {
		s.globalShadow = c.Config().ShadowMode
	}
	return s
}

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
	quota  bool
	// check marks a descriptor whose hits_addend is 0: a check that
	// consumes nothing, refused when one more hit would be (cost is 1).
	check bool
	// unlimited: answered OK with no limit. never: a block, or a cost
	// above the whole limit: it can never pass, and is decided without
	// the store.
	unlimited, never bool
	metadata         *structpb.Struct
	// index is the descriptor's place in the request and its status'.
	index int
	// slot is the descriptor's window in the counted decision, checkSlot
	// in the check (-1: not in it); several descriptors with one subject,
	// scope and window share one.
	slot, checkSlot int
}

// ShouldRateLimit decides every limited descriptor of req in one
// all-or-nothing decision (docs/adr/011): a refusal consumes nothing on
// any descriptor. Descriptors whose hits_addend is 0 are checks, and
// quota descriptors are checked too: the request's windows are checked
// first, consuming nothing; a refused check, or every quota refused,
// refuses the request before anything is counted. A descriptor that can
// never pass (requests_per_unit 0, hits above its whole limit) refuses the
// request without counting anything. Descriptors in shadow mode are decided
// apart, in decisions that never refuse. A request with no domain or no
// descriptor is InvalidArgument; a decision that could not be recorded is
// Internal (observability fails closed).
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
		s.optional(resp, req, nil)
		return resp, nil // nothing configured: nothing limited
	}
	plans, scope := d.plan(req)
	for _, p := range plans {
		if p != nil && p.unlimited {
			// envoyproxy/ratelimit's answer to an unlimited descriptor.
			resp.Statuses[p.index].LimitRemaining = math.MaxUint32
		}
	}
	for _, shadow := range []bool{false, true} {
		if err := s.decide(ctx, resp, d, plans, scope, shadow); err != nil {
			return nil, err
		}
	}
	s.optional(resp, req, plans)
	return resp, nil
}

// decide decides the plans in shadow mode or not, and writes their
// statuses. Without checks, quotas or a descriptor that can never pass it
// is one EvaluateWindows. Otherwise one CheckWindows of every window (the
// checks at one hit, the others at their cost) comes first, consuming
// nothing: when a descriptor that is not a quota is refused there, or can
// never pass, or every quota is refused, or the decision lets the request
// through degraded (bypass counts no descriptor), it is the answer;
// otherwise the counted descriptors and the quotas the check admitted are
// decided by EvaluateWindows, all or nothing. A check can go stale
// between the two calls (another request may spend the checked window),
// never a counted window: those are decided exactly.
func (s *Service) decide(ctx context.Context, resp *rlsv3.RateLimitResponse, d *domainRules, plans []*planned, scope string, shadow bool) error {
	var mine, never []*planned
	needCheck := false
	for _, p := range plans {
		if p == nil || p.unlimited || p.shadow != shadow {
			continue
		}
		p.slot, p.checkSlot = -1, -1
		if p.never {
			never = append(never, p)
			continue
		}
		mine = append(mine, p)
		needCheck = needCheck || p.check || p.quota
	}
	if len(never) > 0 {
		needCheck = true
		for _, p := range never {
			s.neverPasses(resp.Statuses[p.index], p, shadow || s.globalShadow)
		}
	}
	base := app.WindowsRequest{RouteKey: d.routeKey, Action: d.action, Scope: scope, Shadow: shadow}
	if !needCheck {
		return s.count(ctx, resp, base, mine, shadow)
	}
	refusedNever := len(never) > 0 && !shadow && !s.globalShadow
	checked := base
	// The checks go in last, so each knows the cost counted on its key.
	for _, p := range mine {
		if !p.check {
			p.checkSlot = addWindow(&checked, p)
		}
	}
	for _, p := range mine {
		if p.check {
			p.checkSlot = addWindow(&checked, p)
		}
	}
	if len(checked.Windows) == 0 {
		if refusedNever {
			s.refuse(resp, never)
		}
		return nil
	}
	if len(checked.Windows) > domain.MaxLimits {
		// More limited descriptors than one decision holds: refused
		// whole rather than decided in parts.
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		return nil
	}
	dec, err := s.lim.CheckWindows(ctx, checked)
	if err != nil {
		return status.Error(codes.Internal, "decision not recorded")
	}
	byCheck := func(p *planned) int { return p.checkSlot }
	wins := dec.Windows.All()
	perWindow := len(wins) == len(checked.Windows) && dec.State != domain.BypassDegraded &&
		dec.State != domain.DeniedDegraded && dec.State != domain.RejectedInvalidContext
	allowed := func(p *planned) bool { return perWindow && wins[p.checkSlot].Allowed }
	refused, quotas, quotasRefused := false, 0, 0
	var rest, answered []*planned
	for _, p := range mine {
		switch {
		case p.quota:
			quotas++
			switch {
			case !allowed(p):
				quotasRefused++
				answered = append(answered, p)
			case p.check:
				answered = append(answered, p)
			default:
				rest = append(rest, p)
			}
		case !allowed(p):
			refused = true
			answered = append(answered, p)
		case p.check:
			answered = append(answered, p)
		default:
			rest = append(rest, p)
		}
	}
	refused = refused || (quotas > 0 && quotas == quotasRefused)
	if !perWindow {
		// Degraded, or rejected whole: the decision's own answer.
		refused = dec.Blocks()
	}
	refused = refused || refusedNever
	if !perWindow || refused || len(rest) == 0 {
		// The check is the answer: nothing is counted.
		s.statuses(resp, &dec, mine, byCheck, shadow)
		s.conclude(resp, &dec, refused && !shadow && !dec.Shadow, shadow, never)
		return nil
	}
	// The checks' and the refused quotas' statuses; the request's fields
	// come from the decision below.
	s.statuses(resp, &dec, answered, byCheck, shadow)
	return s.count(ctx, resp, base, rest, shadow)
}

// count decides plans in one EvaluateWindows and answers.
func (s *Service) count(ctx context.Context, resp *rlsv3.RateLimitResponse, counted app.WindowsRequest, plans []*planned, shadow bool) error {
	for _, p := range plans {
		p.slot = addWindow(&counted, p)
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
	s.statuses(resp, &dec, plans, func(p *planned) int { return p.slot }, shadow)
	s.conclude(resp, &dec, dec.Blocks(), shadow, nil)
	return nil
}

// neverPasses answers a descriptor that can never pass: OVER_LIMIT (OK in
// shadow mode), nothing left, and a reset of its whole period, as no
// retry within it can pass.
func (s *Service) neverPasses(st *rlsv3.RateLimitResponse_DescriptorStatus, p *planned, shadow bool) {
	st.CurrentLimit = currentLimit(p)
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	if shadow {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	st.LimitRemaining = 0
	st.DurationUntilReset = durationpb.New(p.window.Period)
}

// refuse answers a request refused by descriptors that can never pass
// alone: OVER_LIMIT, Retry-After their longest period.
func (s *Service) refuse(resp *rlsv3.RateLimitResponse, never []*planned) {
	resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		header("Retry-After", strconv.FormatInt(ceilSeconds(longest(never)), 10)))
}

func longest(ps []*planned) time.Duration {
	var l time.Duration
	for _, p := range ps {
		l = max(l, p.window.Period)
	}
	return l
}

func ceilSeconds(d time.Duration) int64 { return max(int64((d+time.Second-1)/time.Second), 1) }

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
			wr.Windows[i].NoAllotments = w.NoAllotments || p.noAllot()
			return i
		}
	}
	wr.Windows = append(wr.Windows, app.CountedWindow{Subject: p.subject, Scope: p.scope, Window: p.window, Cost: p.cost, NoAllotments: p.noAllot()})
	return len(wr.Windows) - 1
}

// noAllot reports whether p's limit turns allotments off.
func (p *planned) noAllot() bool { return p.rule != nil && p.rule.noAllot }

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
		keys, values, norm := entries(desc)
		own, tagged := d.tagOf(keys, norm)
		if scope == "" && tagged {
			scope = own
		}
		p := d.planOne(desc, keys, values, norm, req.GetHitsAddend())
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
// The entries match the tree with their values as sent (values), and
// count with their ip values grouped (norm), a share_threshold entry as
// its wildcard pattern.
func (d *domainRules) planOne(desc *rlcommon.RateLimitDescriptor, keys, values, norm []string, requestHits uint32) *planned {
	cost := int64(max(requestHits, 1))
	if h := desc.GetHitsAddend(); h != nil {
		cost = int64(min(h.GetValue(), domain.MaxLimit+1))
	}
	if desc.GetIsNegativeHits() || len(keys) == 0 {
		// A descriptor without entries names nothing.
		return nil
	}
	m := d.match(keys, values)
	if m.shared != nil {
		norm = slices.Clone(norm)
		for i, pat := range m.shared {
			if pat != "" {
				// Never a request value: those are header values, without NUL.
				norm[i] = "\x00" + pat
			}
		}
	}
	r := m.rule
	p := &planned{rule: r, cost: cost, subject: subject(keys, norm), metadata: m.metadata}
	if cost == 0 {
		// A check asks whether one more hit would pass.
		p.cost, p.check = 1, true
	}
	if r != nil {
		p.window, p.unit, p.mult, p.shadow, p.quota = r.window, r.unit, r.mult, r.shadow, r.quota
		p.unlimited, p.never = r.unlimited, r.block
	}
	if o := desc.GetLimit(); o != nil && d.ceiling != nil && (r == nil || !r.block) {
		// A request never lifts a block; it may limit an unlimited
		// descriptor, within the ceiling.
		if w, unit, mult, ok := d.override(o, r); ok {
			p.window, p.unit, p.mult, p.unlimited = w, unit, mult, false
		}
	}
	if p.unlimited {
		return p
	}
	if p.window.Limit == 0 && !p.never {
		return nil
	}
	if p.cost > p.window.Limit {
		// More hits than the whole limit: no wait lets them pass.
		p.never = true
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

// entries returns a descriptor's keys, its values as sent, and its
// values with an ip value normalised as sluice's ip dimension is (IPv6
// grouped by /64): the same slice as values when no value changed.
func entries(desc *rlcommon.RateLimitDescriptor) (keys, values, norm []string) {
	es := desc.GetEntries()
	keys, values = make([]string, len(es)), make([]string, len(es))
	norm = values
	for i, e := range es {
		keys[i], values[i] = e.GetKey(), e.GetValue()
		if a, err := netip.ParseAddr(values[i]); err == nil {
			if g, err := domain.NormaliseIP(a); err == nil && g != values[i] {
				if &norm[0] == &values[0] {
					norm = slices.Clone(values)
				}
				norm[i] = g
			}
		}
	}
	return keys, values, norm
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

// statuses writes plans' statuses from a decision, each read at its slot:
// OVER_LIMIT on the windows that refused, with nothing left, as
// envoyproxy/ratelimit answers; each window's own remaining and reset
// otherwise. A shadow decision never refuses.
func (s *Service) statuses(resp *rlsv3.RateLimitResponse, dec *domain.Decision, plans []*planned, slot func(*planned) int, shadow bool) {
	checks := dec.Windows.All()
	// A bypass decision counted the degraded cap, not the descriptors.
	perWindow := dec.State != domain.BypassDegraded
	for _, p := range plans {
		st := resp.Statuses[p.index]
		st.CurrentLimit = currentLimit(p)
		switch i := slot(p); {
		case dec.State == domain.DeniedDegraded || dec.State == domain.RejectedInvalidContext:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.DurationUntilReset = durationpb.New(max(dec.RetryAfter, domain.DeniedRetryAfter))
		case perWindow && i >= 0 && i < len(checks):
			c := checks[i]
			st.LimitRemaining = uint32(min(max(c.Remaining, 0), int64(^uint32(0))))
			if !c.Allowed {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				st.LimitRemaining = 0
			}
			st.DurationUntilReset = durationpb.New(max(c.ResetAfter, c.RetryAfter))
		}
		if shadow || dec.Shadow {
			// Shadow mode reports the count and never refuses.
			st.Code = rlsv3.RateLimitResponse_OK
		}
	}
}

// conclude writes a decision's request-wide answer: the overall code and,
// outside shadow mode, the IETF rate-limit fields and Retry-After on a
// refusal (the longest period of never, descriptors that can never pass,
// when that is later).
func (s *Service) conclude(resp *rlsv3.RateLimitResponse, dec *domain.Decision, refused, shadow bool, never []*planned) {
	if refused {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if shadow {
		return
	}
	if f, ok := dec.RateLimitFields(); ok {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			header("RateLimit-Policy", f.Policy), header("RateLimit", f.RateLimit))
	}
	if refused {
		after := dec.RetryAfterSeconds()
		if len(never) > 0 {
			after = max(after, ceilSeconds(longest(never)))
		}
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			header("Retry-After", strconv.FormatInt(after, 10)))
	}
}

func currentLimit(p *planned) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{
		Name: ruleName(p), RequestsPerUnit: uint32(p.window.Limit),
		Unit: rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[p.unit]),
	}
}

// optional adds the answers Options asks for: envoyproxy/ratelimit's
// rate-limit headers and dynamic metadata.
func (s *Service) optional(resp *rlsv3.RateLimitResponse, req *rlsv3.RateLimitRequest, plans []*planned) {
	if s.opts.LimitHeaders {
		// The descriptor closest to its limit, or the last one over it
		// (not a quota), as envoyproxy/ratelimit picks it.
		var pick *rlsv3.RateLimitResponse_DescriptorStatus
		least := uint32(math.MaxUint32)
		for i, st := range resp.Statuses {
			if st.CurrentLimit == nil {
				continue
			}
			if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && (plans == nil || plans[i] == nil || !plans[i].quota) {
				pick, least = st, 0
				continue
			}
			if st.LimitRemaining < least {
				pick, least = st, st.LimitRemaining
			}
		}
		if pick != nil {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
				header(s.opts.LimitHeader, strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)),
				header(s.opts.RemainingHeader, strconv.FormatUint(uint64(pick.LimitRemaining), 10)),
				header(s.opts.ResetHeader, strconv.FormatInt(resetSeconds(pick.DurationUntilReset), 10)))
		}
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, resp, plans)
	}
}

// resetSeconds is a status' duration_until_reset in whole seconds, rounded
// up: a client told to come back then finds the window reset.
func resetSeconds(d *durationpb.Duration) int64 {
	if d == nil {
		return 0
	}
	return ceilSeconds(d.AsDuration())
}

// dynamicMetadata is envoyproxy/ratelimit's: the domain, the request's
// descriptors, its hits_addend, and the metadata of the limited
// descriptors answered OK, merged.
func dynamicMetadata(req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, plans []*planned) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	list := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		es := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			es = append(es, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: es})}
		if d.GetLimit() != nil {
			df["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		list = append(list, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: list})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, p := range plans {
		if p != nil && !p.unlimited && p.metadata != nil && resp.Statuses[i].Code == rlsv3.RateLimitResponse_OK {
			mergeStruct(merged, p.metadata)
		}
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct merges src into dst: maps present in both merge, any other
// key already in dst stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(have.GetStructValue(), v.GetStructValue())
		}
	}
}

func ruleName(p *planned) string {
	if p.rule != nil && p.rule.name != "" {
		return p.rule.name
	}
	return p.window.Name
}

func header(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }

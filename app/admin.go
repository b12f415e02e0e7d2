package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// ErrBreakerOpen is returned (wrapped with domain.ErrStoreUnavailable) by
// Peek and Reset while the breaker is open: they need the primary store's
// own answer, and the degraded matrix has none to give.
var ErrBreakerOpen = errors.New("breaker open")

// errBreakerOpen is ErrBreakerOpen as Peek and Reset return it.
var errBreakerOpen = fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, ErrBreakerOpen)

// Peek answers what Evaluate would answer for req right now, consuming
// nothing: the quota a `/quota` endpoint shows a customer. It takes the
// same path as Evaluate up to the store (profile, plan, pseudonymised keys)
// and asks the primary store under Config.StoreTimeout; Remaining is what
// is left before the request's cost.
//
// A request whose context is invalid gets a RejectedInvalidContext
// decision and its *domain.ContextError. When the primary store cannot
// answer (breaker open, failure, timeout) the error wraps
// domain.ErrStoreUnavailable or domain.ErrStoreTimeout and the decision is
// the zero Decision: a quota read from one instance's fallback would be
// wrong for the fleet. Peek is not a decision: only its store call is
// recorded.
//
// A reserving profile's concurrency windows are peeked too (their
// Remaining is the slots free). A request whose keys span partitions
// peeks each partition at once (docs/adr/013); nothing is held.
func (l *Limiter) Peek(ctx context.Context, req Request) (domain.Decision, error) {
	ev := getEvaluation()
	defer putEvaluation(ev)
	l.begin(ev)
	ev.mode = modePeek
	if err := l.prepare(ev, req); err != nil {
		ev.reject(err)
		return ev.d, err
	}
	if ev.n == 0 {
		ev.d.State, ev.d.Cause, ev.d.Remaining = domain.Allowed, domain.CauseNoWindow, -1
		return ev.d, nil
	}
	return l.peekPrepared(ctx, ev)
}

// peekPrepared asks the primary store what ev's windows have left,
// consuming nothing: one call, or one per partition; the breaker's
// refusal and a store error are returned as they are.
func (l *Limiter) peekPrepared(ctx context.Context, ev *evaluation) (domain.Decision, error) {
	var res domain.Result
	var err error
	if parts := l.partitions(ev); parts.n > 1 {
		res, err = l.peekSplit(ctx, ev, &parts)
	} else {
		if !l.allowed(l.nodeOf(ev)) {
			return domain.Decision{}, errBreakerOpen
		}
		res, _, err = l.callStore(ctx, ev, ports.OpPeek)
	}
	if err != nil {
		return domain.Decision{}, err
	}
	l.fromResult(ev, &res, domain.SourcePrimary)
	return ev.d, nil
}

// ResetRequest names whose counts Limiter.Reset forgets: the windows of
// one Dimension, for the identity given, as requests with that identity
// count them (docs/adr/004).
type ResetRequest struct {
	// Dimension is whose windows are reset: ip, user, apikey or tenant
	// (tenant also resets the tenant-global windows and the façade's tenant
	// layer). Required.
	Dimension domain.Dimension
	// ClientIP, User, Tenant and APIKey are raw identities, as in a
	// Request. The Dimension's own identity is required; the others scope
	// the reset as they scope a request's keys: the windows of user u in
	// tenant t are not those of user u without a tenant. An ip's windows
	// count per ip whoever sends (docs/adr/013): an ip reset forgets them
	// whatever identity it names beside the ip.
	ClientIP             netip.Addr
	User, Tenant, APIKey string
	// Profiles limits the reset to these profiles ("facade" names the
	// ADR-002 façades); empty means every profile and the façades.
	Profiles []string
	// Actor says who asked (a support agent's id), for the audit record.
	Actor string
}

// ResetResult is what Limiter.Reset and Limiter.ResetWindows did.
type ResetResult struct {
	// Keys is how many keys the reset names: every window's own key (which
	// covers the shared logs of docs/adr/015) and the degraded cap of the
	// identity.
	Keys int
	// Deleted is how many of them held counts on the primary store and
	// were forgotten. 0 means the reset unblocked no one: nothing was
	// counted under these keys, because nothing was counted yet, or
	// because they are not the service's (another HMAC secret, a user
	// reset without the tenant that scopes the user's windows). -1 when
	// the primary store cannot say (it does not implement
	// ports.Forgetter).
	Deleted int
}

// Reset forgets the counts of an identity: support unblocking a user or
// an ip. The raw identity goes in; the pseudonymised keys of every window
// of req.Dimension are reset on the primary store and on the fallback
// (which holds the degraded counts and the bypass caps), refusals this
// instance remembers are dropped, and the act is recorded on the
// security-audit channel (the Recorder's RecordReset) twice: before any
// key is deleted, and with the outcome (ports.ResetRecord). When the first
// record cannot be written, nothing is deleted and the error is returned.
//
// An ip reset forgets the ip's windows in every tenant, whatever identity
// it names beside the ip (an ip's windows count per ip whoever sends,
// docs/adr/013); an IPv6 address stands for its /64, as it counts.
//
// A request naming no identity for its dimension, or an unknown profile,
// is refused with a *domain.ContextError before anything is reset or
// recorded. A primary store that cannot answer makes Reset fail
// (wrapping domain.ErrStoreUnavailable or domain.ErrStoreTimeout); the
// failure is recorded too.
func (l *Limiter) Reset(ctx context.Context, req ResetRequest) (ResetResult, error) {
	keys, id, err := l.resetKeys(req)
	if err != nil {
		return ResetResult{}, err
	}
	rec := ports.ResetRecord{Dimension: req.Dimension, SubjectID: id.of(req.Dimension), TenantID: id.tenant, Actor: req.Actor}
	if req.ClientIP.IsValid() {
		rec.ClientIP = req.ClientIP
	}
	if req.Dimension == domain.DimensionIP {
		rec.TenantID = ""
		rec.ClientPrefix = clientPrefix(req.ClientIP)
	}
	return l.resetAudited(ctx, keys, rec)
}

// clientPrefix is the addresses a's windows count: its /64 for IPv6
// (domain.NormaliseIP), the address alone for IPv4.
func clientPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	bits := a.BitLen()
	if a.Is6() {
		bits = domain.IPv6GroupBits
	}
	p, _ := a.Prefix(bits)
	return p
}

// resetAudited resets keys between the reset's two audit records: the
// first one before anything is deleted (an error there stops the reset),
// the second one with the outcome.
func (l *Limiter) resetAudited(ctx context.Context, keys []string, rec ports.ResetRecord) (ResetResult, error) {
	res := ResetResult{Keys: len(keys), Deleted: -1}
	rec.Keys, rec.Deleted = len(keys), -1
	if err := l.rec.RecordReset(ctx, rec); err != nil {
		return res, fmt.Errorf("reset not done: its audit record could not be written: %w", err)
	}
	res.Deleted, rec.Err = l.resetAll(ctx, keys)
	// After the store's reset, so that a refusal whose call began before
	// it is never repeated (docs/adr/005).
	l.refusals.reset()
	rec.Done, rec.Deleted = true, res.Deleted
	return res, errors.Join(rec.Err, l.rec.RecordReset(ctx, rec))
}

// resetAll resets keys on the primary store, under the store deadline
// for each, and on the fallback. It returns how many keys the primary
// store held (ports.Forgetter), -1 when it cannot say.
func (l *Limiter) resetAll(ctx context.Context, keys []string) (int, error) {
	if l.BreakerOpen() {
		return 0, errBreakerOpen
	}
	if l.allots != nil {
		// The allotments on those keys are forgotten with their counts,
		// here and across the fleet (docs/adr/019, "A reset").
		defer l.allots.reset(ctx, keys)
	}
	forgetter, counts := l.store.(ports.Forgetter)
	deleted := 0
	if !counts {
		deleted = -1
	}
	var errs []error
	for _, k := range keys {
		sctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
		start := l.clock.Now()
		var err error
		if counts {
			var held bool
			held, err = forgetter.Forget(sctx, k)
			if held {
				deleted++
			}
		} else {
			err = l.store.Reset(sctx, k)
		}
		err = classify(err)
		cancel()
		l.rec.RecordStoreCall(ctx, ports.StoreCall{Op: ports.OpReset, Start: start, Latency: l.clock.Now().Sub(start), Keys: 1, Err: err})
		if err != nil {
			return deleted, err // the store is out: the rest would fail alike
		}
		if err := l.fallback.Reset(ctx, k); err != nil {
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}

// resetKeys lists the keys a reset forgets.
func (l *Limiter) resetKeys(req ResetRequest) ([]string, identity, error) {
	id, err := l.identify(req.requestOf())
	if err != nil {
		return nil, id, err
	}
	if !req.ClientIP.IsValid() {
		id.ip = ""
	}
	if req.Dimension == domain.DimensionIP {
		// An ip's windows are the ip's alone (docs/adr/013): no other
		// identity scopes them, and the degraded cap forgotten is the
		// ip's own.
		id = identity{ip: id.ip}
	}
	dims := []domain.Dimension{req.Dimension}
	switch req.Dimension {
	case domain.DimensionTenant:
		dims = append(dims, domain.DimensionTenantGlobal)
	case domain.DimensionIP, domain.DimensionUser, domain.DimensionAPIKey:
	default:
		return nil, id, &domain.ContextError{Cause: domain.CauseDimensionInvalid, Detail: "reset needs a dimension: ip, user, apikey or tenant"}
	}
	if id.of(req.Dimension) == "" {
		return nil, id, &domain.ContextError{Cause: domain.CauseDimensionInvalid, Detail: "reset of " + req.Dimension.String() + " needs that identity"}
	}
	profiles, facade, err := l.resetProfiles(req.Profiles)
	if err != nil {
		return nil, id, err
	}
	var keys []string
	for _, p := range profiles {
		keys = append(keys, profileResetKeys(p, id, dims)...)
	}
	if facade {
		keys = append(keys, l.facadeKeys(id, req.Dimension)...)
	}
	slices.Sort(keys)
	return slices.Compact(keys), id, nil
}

// resetProfiles resolves the profile names of a reset.
func (l *Limiter) resetProfiles(names []string) (profiles []*profile, facade bool, err error) {
	if len(names) == 0 {
		for _, name := range slices.Sorted(maps.Keys(l.profiles.byName)) {
			profiles = append(profiles, l.profiles.byName[name])
		}
		return profiles, true, nil
	}
	for _, n := range names {
		if n == DefaultFacadeProfile {
			facade = true
			continue
		}
		p, ok := l.profiles.byName[n]
		if !ok {
			return nil, false, &domain.ContextError{Cause: domain.CauseProfileMissing, Detail: "reset names an unknown profile"}
		}
		profiles = append(profiles, p)
	}
	return profiles, facade, nil
}

// profileResetKeys lists the keys of p's windows of dims for id, and the
// bypass cap's when id's client is of one of dims. It lists every
// window's own key: a shared log is the key of one of its windows
// (docs/adr/015), and a window whose log moved (a change of period or
// algorithm) left its units on its own key or the old log's, another
// window's own key.
func profileResetKeys(p *profile, id identity, dims []domain.Dimension) []string {
	// No key layout: every window names its own key.
	only := &profile{RouteProfile: domain.RouteProfile{Name: p.Name}}
	for _, dw := range p.Dimensions {
		if slices.Contains(dims, dw.Dimension) {
			only.Dimensions = append(only.Dimensions, dw)
		}
	}
	var ev evaluation
	ev.addProfileKeys(only, id, 1, true)
	keys := make([]string, 0, ev.n+1)
	for _, lim := range ev.limits[:ev.n] {
		keys = append(keys, lim.Key)
	}
	if capDim, capID := id.client(); slices.Contains(dims, capDim) {
		keys = append(keys, domain.KeyParts{Tag: capID, Dimension: capDim, ID: capID, RouteKey: p.Name, Window: capWindowName}.Key())
	}
	return keys
}

// facadeKeys lists the façade keys of id's dimension d.
func (l *Limiter) facadeKeys(id identity, d domain.Dimension) []string {
	if id.tenant == "" {
		return nil // every façade key lives under a tenant
	}
	var base string
	var windows []facadeWindow
	switch d {
	case domain.DimensionTenant:
		base, windows = domain.TenantKey(id.tenant), l.facade.tenant
	case domain.DimensionUser:
		base, windows = domain.TenantUserKey(id.tenant, id.user), l.facade.user
	case domain.DimensionAPIKey:
		base, windows = domain.TenantAPIKeyKey(id.tenant, id.apiKey), l.facade.user
	default:
		return nil
	}
	keys := make([]string, 0, len(windows)+1)
	for _, w := range windows {
		keys = append(keys, base+w.suffix)
	}
	// The bypass cap of a façade call counts per (façade, client).
	capDim, capID := d, id.of(d)
	keys = append(keys, domain.KeyParts{Tag: capID, Dimension: capDim, ID: capID, RouteKey: DefaultFacadeProfile, Window: capWindowName}.Key())
	return keys
}

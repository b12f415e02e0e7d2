package otel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Label names. Every label takes its values from a bounded set: the
// domain's closed enums, the configured profiles, the instance id, and the
// capped tenant pseudonyms. Never a raw route, identifier or ip.
const (
	LabelDecisionState = "decision_state"
	LabelRouteProfile  = "route_profile"
	LabelRouteFamily   = "route_family"
	LabelCause         = "cause"
	LabelInstanceID    = "instance_id"
	LabelTenantID      = "tenant_id"
	LabelLayer         = "layer"
	LabelFrom          = "from"
	LabelTo            = "to"
	LabelState         = "state"
	LabelOp            = "op"
	LabelOutcome       = "outcome"
)

// Label values that stand for something other than a name. The
// parentheses keep them apart from every real value: profile names are
// [a-z0-9_-], tenant pseudonyms hex.
const (
	// ValueNone: no profile or family (the context was rejected before
	// the route resolved).
	ValueNone = "(none)"
	// ValueOther: past a cap (profiles, tenants), or outside a closed set.
	ValueOther = "(other)"
	// ValueAnonymous: the tenant_id of a request without a tenant.
	ValueAnonymous = "(anonymous)"
)

// MaxProfiles bounds the route_profile values: profiles past it (a
// configuration that large is unusual) count as "(other)".
const MaxProfiles = 128

// Families and states have fixed slots; index 0 of each is the "(none)"
// or "(other)" slot.
const (
	nFamilies      = int(domain.FamilyCostly) + 2 // (none), read, auth, costly, (other)
	familyOther    = nFamilies - 1
	nStates        = int(domain.RejectedInvalidContext) + 1 // (other), ALLOWED … REJECTED_INVALID_CONTEXT
	nSystemStates  = int(domain.Recovering) + 1
	nOps           = int(ports.OpAllot) + 1 // (other), evaluate, peek, reset, reserve, settle, renew, allot
	outcomeOK      = 0
	outcomeUnknown = len(outcomes) - 1
)

// outcomes are the outcome label's values for store calls.
var outcomes = [...]string{"ok", "store_unavailable", "store_timeout", "invalid_limit", "cross_slot", "canceled", "overloaded", "error"}

func familyIndex(f domain.RouteFamily) int {
	if f <= domain.FamilyCostly {
		return int(f)
	}
	return familyOther
}

func familyLabel(i int) string {
	switch i {
	case 0:
		return ValueNone
	case familyOther:
		return ValueOther
	}
	return domain.RouteFamily(i).String()
}

func stateIndex(s domain.State) int {
	if s >= domain.Allowed && s <= domain.RejectedInvalidContext {
		return int(s)
	}
	return 0
}

func stateLabel(i int) string {
	if i == 0 {
		return ValueOther
	}
	return domain.State(i).String()
}

// decisionSets counts decisions_total: one counter per (profile, family,
// state, cause), created with its attribute set on first use. A decision
// is an atomic add on its counter, which allocates nothing and costs far
// less than a synchronous instrument's attribute lookup; the observable
// counter reports every counter at collection.
type decisionSets struct {
	instance   attribute.KeyValue
	causes     []string
	causeIndex map[domain.Cause]int // read-only after newDecisionSets

	profiles sync.Map // profile name → *profileCells
	mu       sync.Mutex
	count    int // profiles stored, under mu
	none     *profileCells
	other    *profileCells
}

// profileCells are one profile's counters, indexed by (family, state,
// cause).
type profileCells struct {
	name  string
	cells []atomic.Pointer[decisionCell]
}

// decisionCell is one series of decisions_total.
type decisionCell struct {
	n    atomic.Int64
	opts []metric.ObserveOption
}

func newDecisionSets(instanceID string) *decisionSets {
	s := &decisionSets{
		instance:   attribute.String(LabelInstanceID, instanceID),
		causeIndex: map[domain.Cause]int{},
	}
	for i, c := range domain.Causes() {
		s.causes = append(s.causes, string(c))
		s.causeIndex[c] = i
	}
	s.causes = append(s.causes, ValueOther)
	s.none, s.other = s.newCells(ValueNone), s.newCells(ValueOther)
	return s
}

func (s *decisionSets) newCells(name string) *profileCells {
	return &profileCells{name: name, cells: make([]atomic.Pointer[decisionCell], nFamilies*nStates*len(s.causes))}
}

// add counts d in its series.
func (s *decisionSets) add(d *domain.Decision) {
	pc := s.profile(d.Profile)
	cause, ok := s.causeIndex[d.Cause]
	switch {
	case d.Cause == "":
		cause = s.causeIndex[domain.CauseNone]
	case !ok:
		cause = len(s.causes) - 1
	}
	fam, st := familyIndex(d.Family), stateIndex(d.State)
	slot := &pc.cells[(fam*nStates+st)*len(s.causes)+cause]
	c := slot.Load()
	if c == nil {
		c = &decisionCell{opts: []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String(LabelDecisionState, stateLabel(st)),
			attribute.String(LabelRouteProfile, pc.name),
			attribute.String(LabelRouteFamily, familyLabel(fam)),
			attribute.String(LabelCause, s.causes[cause]),
			s.instance,
		))}}
		if !slot.CompareAndSwap(nil, c) {
			c = slot.Load()
		}
	}
	c.n.Add(1)
}

// observe reports every series counted so far.
func (s *decisionSets) observe(o observeFunc) {
	report := func(pc *profileCells) {
		for i := range pc.cells {
			if c := pc.cells[i].Load(); c != nil {
				o(c.n.Load(), c.opts...)
			}
		}
	}
	report(s.none)
	s.profiles.Range(func(_, pc any) bool {
		report(pc.(*profileCells))
		return true
	})
	report(s.other)
}

// profile returns the cells of a profile, creating them up to MaxProfiles.
func (s *decisionSets) profile(name string) *profileCells {
	if name == "" {
		return s.none
	}
	if pc, ok := s.profiles.Load(name); ok {
		return pc.(*profileCells)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pc, ok := s.profiles.Load(name); ok {
		return pc.(*profileCells)
	}
	if s.count >= MaxProfiles {
		return s.other
	}
	pc := s.newCells(name)
	s.profiles.Store(name, pc)
	s.count++
	return pc
}

// storeSets holds the record options of the latency histogram per
// (op, outcome).
type storeSets [nOps][len(outcomes)][]metric.RecordOption

func newStoreSets(instance attribute.KeyValue) *storeSets {
	var s storeSets
	for op := range nOps {
		name := ValueOther
		if op > 0 {
			name = ports.StoreOp(op).String()
		}
		for o, outcome := range outcomes {
			s[op][o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
				instance, attribute.String(LabelOp, name), attribute.String(LabelOutcome, outcome)))}
		}
	}
	return &s
}

func (s *storeSets) options(call *ports.StoreCall) []metric.RecordOption {
	op := int(call.Op)
	if op >= nOps {
		op = 0
	}
	return s[op][outcomeIndex(call.Err)]
}

// outcomeIndex classifies a store call's error by its domain code.
func outcomeIndex(err error) int {
	if err == nil {
		return outcomeOK
	}
	switch domain.CodeOf(err) {
	case domain.CodeStoreUnavailable:
		return 1
	case domain.CodeStoreTimeout:
		return 2
	case domain.CodeInvalidLimit:
		return 3
	case domain.CodeCrossSlot:
		return 4
	case domain.CodeOverloaded:
		return 6
	}
	switch {
	case errors.Is(err, context.Canceled):
		return 5
	case errors.Is(err, context.DeadlineExceeded):
		return 2
	}
	return outcomeUnknown
}

// systemStateLabel names a health state; states outside the machine's
// three are "(other)".
func systemStateLabel(s domain.SystemState) string {
	if int(s) < nSystemStates {
		return s.String()
	}
	return ValueOther
}

// transitionSets holds the add options of system_state_changes_total for
// every (from, to) pair of known states.
type transitionSets [nSystemStates][nSystemStates][]metric.AddOption

func newTransitionSets() *transitionSets {
	var t transitionSets
	for from := range nSystemStates {
		for to := range nSystemStates {
			t[from][to] = transitionOptions(domain.SystemState(from), domain.SystemState(to))
		}
	}
	return &t
}

func transitionOptions(from, to domain.SystemState) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String(LabelFrom, systemStateLabel(from)),
		attribute.String(LabelTo, systemStateLabel(to)),
	))}
}

func (t *transitionSets) options(c domain.StateChange) []metric.AddOption {
	if int(c.From) < nSystemStates && int(c.To) < nSystemStates {
		return t[c.From][c.To]
	}
	return transitionOptions(c.From, c.To)
}

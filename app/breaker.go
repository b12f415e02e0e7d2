package app

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The breaker (docs/adr/008-failure-classes-and-breaker.md): one health
// machine per node of the primary store, so that one dead Redis Cluster
// master opens the breaker of its own slots only. A store whose Prober is
// not a ports.NodeProber is one node, named "".
//
// A store fault counts toward the breaker of the node the decision's keys
// live on; a success clears the count. BreakerFailures faults in a row
// open the breaker at once when one of them was a refusal or a broken
// connection: no CPU of the service's causes those. When every one was a
// missed deadline, which a saturated service causes as well as a dead
// store, two witnesses must agree: a confirming probe of the node (a
// probe that answers within the store deadline proves the store up: the
// misses were the service's own, and the count starts afresh; a probe
// that failed while the service itself stalled proves nothing, and is
// asked again at the next miss), and the run itself, whose calls must
// have begun at least one store deadline apart with no success in between
// (a burst's calls begin together; a dead store also fails the calls
// begun after its first misses).

// nodeHealth is one node's health.
type nodeHealth struct {
	machine  domain.HealthMachine // guarded by Limiter.hmu
	state    atomic.Uint32        // mirrors machine.State() for the hot path
	failures atomic.Int64         // store faults in a row
	refused  atomic.Bool          // one of them was a refusal, not a missed deadline
	first    atomic.Int64         // when the earliest of their calls began (unix ns); 0 without
	last     atomic.Int64         // when the latest of their calls began (unix ns)
	down     atomic.Bool          // a confirming probe of the run failed
	// answered counts the node's successful store calls: a probe round
	// during which it moved saw the node answer (health.go).
	answered atomic.Uint64
}

// began extends the run's span of call starts with one at t (unix ns).
func (n *nodeHealth) began(t int64) {
	for f := n.first.Load(); f == 0 || t < f; f = n.first.Load() {
		if n.first.CompareAndSwap(f, t) {
			break
		}
	}
	for l := n.last.Load(); t > l; l = n.last.Load() {
		if n.last.CompareAndSwap(l, t) {
			break
		}
	}
}

// span is how far apart the run's calls began.
func (n *nodeHealth) span() time.Duration {
	return time.Duration(n.last.Load() - n.first.Load())
}

// clear forgets the run of store faults.
func (n *nodeHealth) clear() {
	n.failures.Store(0)
	n.refused.Store(false)
	n.first.Store(0)
	n.last.Store(0)
	n.down.Store(false)
}

func newNodeHealth(clearing int) *nodeHealth {
	return &nodeHealth{machine: domain.NewHealthMachine(clearing)}
}

func (n *nodeHealth) healthy() bool { return domain.SystemState(n.state.Load()) == domain.Healthy }

// nodeSet maps node names to their health. It is replaced whole (copy on
// write, under Limiter.hmu), so the hot path reads it without a lock.
type nodeSet map[string]*nodeHealth

// nodeOf names the node that serves the evaluation's keys ("" for a store
// of one node, or a node no probe has seen yet). The keys of one decision
// share a hash tag, hence a node.
func (l *Limiter) nodeOf(ev *evaluation) string {
	if l.nodeProber == nil || ev.n == 0 {
		return ""
	}
	return l.nodeProber.NodeOf(ev.limits[0].Key)
}

// health returns the health of node; for "" in a store of several nodes,
// the health of the unattributed calls, whose breaker follows the whole
// store.
func (l *Limiter) health(node string) *nodeHealth {
	if n, ok := (*l.nodes.Load())[node]; ok {
		return n
	}
	return l.unknown
}

// allowed reports whether a decision on node may call the store: its
// node's breaker is closed. A node no probe has seen is allowed while the
// store as a whole is HEALTHY.
func (l *Limiter) allowed(node string) bool {
	if n, ok := (*l.nodes.Load())[node]; ok {
		return n.healthy()
	}
	return l.SystemState() == domain.Healthy
}

// storeOutcome accounts one store call on node by its failure class
// (docs/adr/008): a success clears the node's run of store faults, a
// request fault or a safe retry counts for nothing, a store fault extends
// the run, which may open the node's breaker (see above). It returns a
// Recorder failure met on the way.
func (l *Limiter) storeOutcome(ctx context.Context, node string, start time.Time, err error) error {
	n := l.health(node)
	if err == nil {
		n.answered.Add(1)
		if n.failures.Load() != 0 {
			n.clear()
		}
		return nil
	}
	if !storeFault(ctx, err) {
		return nil
	}
	n.began(start.UnixNano())
	if !errors.Is(err, domain.ErrStoreTimeout) {
		n.refused.Store(true)
	}
	if n.failures.Add(1) < int64(l.cfg.BreakerFailures) || !n.healthy() {
		return nil
	}
	if !n.refused.Load() {
		if !n.down.Load() && !l.confirm(ctx, node, n) {
			return nil
		}
		if n.span() < l.cfg.StoreTimeout {
			// Calls that all began within one deadline: a burst, or the
			// first of an outage; the next miss decides.
			return nil
		}
	}
	_, terr := l.applyProbes(ctx, probeResults{probes: []ports.NodeProbe{{Node: node, Err: err}}})
	l.retick()
	return terr
}

// storeFault reports whether err, from a store call made under ctx, is
// the store's fault: not a caller that gave up, not an instance past its
// shed bound (ErrOverloaded: the service's overload), not a request fault (a
// value, a shape or a key set the store refuses), not a refusal that ran
// nothing for a passing reason (ports.ErrNotRun).
func storeFault(ctx context.Context, err error) bool {
	switch {
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, domain.ErrStoreValue), errors.Is(err, domain.ErrInvalidLimit),
		errors.Is(err, domain.ErrCrossSlot), errors.Is(err, ports.ErrNotRun),
		errors.Is(err, ErrOverloaded):
		return false
	}
	return true
}

// requestFault returns the decision's cause when err is the fault of the
// request rather than of the store: a key holding a value the store cannot
// interpret (cause store_value: the degraded matrix decides that one
// request), or a retry that ran out of time while a slot moved (the
// degraded matrix, with the store's own cause).
func requestFault(err error) (domain.Cause, bool) {
	switch {
	case errors.Is(err, domain.ErrStoreValue):
		return domain.CauseStoreValue, true
	case errors.Is(err, ports.ErrNotRun) && errors.Is(err, domain.ErrStoreTimeout):
		return domain.CauseStoreTimeout, true
	case errors.Is(err, ports.ErrNotRun):
		return domain.CauseStoreUnavailable, true
	}
	return "", false
}

// confirm asks the store whether node answers, with a probe of its own
// (ConfirmingProbe marks its context) under the probe's store deadline
// (probeRound: store time, as every store call's) and not the caller's
// cancellation, one at a time across the instance and never beside a
// scheduled probe. It reports whether the node is down (the witness is
// kept in n); when it answers, n's run is cleared: the misses were not
// the store's. A round the service was too starved to finish, or during
// which it stalled for half a deadline, proves nothing: the next miss
// asks again. The probe feeds no health machine.
func (l *Limiter) confirm(ctx context.Context, node string, n *nodeHealth) (down bool) {
	if !l.confirming.CompareAndSwap(false, true) {
		return false
	}
	defer l.confirming.Store(false)
	l.probeMu.Lock()
	defer l.probeMu.Unlock()
	res, stalled, starved := l.probeRound(context.WithValue(context.WithoutCancel(ctx), confirmingKey{}, true))
	for _, p := range res.probes {
		if p.Err != nil && (node == "" || p.Node == node) {
			down = true
		}
	}
	switch {
	case starved, down && stalled:
		return false
	case !down:
		n.clear()
	default:
		n.down.Store(true)
	}
	return down
}

// lagTick is how often the lag meter's ticking witness looks at the
// clock.
const lagTick = time.Millisecond

// probeResults is the outcome of one probe round: one entry per node, or
// for a store of one node the single entry "".
type probeResults struct {
	probes []ports.NodeProbe
	// all is true when probes lists every node that serves decisions, so
	// a node absent from it no longer does.
	all bool
}

// applyProbes feeds one probe round to the node machines and recomputes
// the instance's state (the worst node's), recording every transition.
func (l *Limiter) applyProbes(ctx context.Context, res probeResults) (domain.SystemState, error) {
	type nodeChange struct {
		node   string
		change domain.StateChange
	}
	var nodeChanges []nodeChange
	l.hmu.Lock()
	old := *l.nodes.Load()
	next := make(nodeSet, len(res.probes))
	if !res.all {
		maps.Copy(next, old)
	}
	for _, p := range res.probes {
		n, ok := next[p.Node]
		if !ok {
			if n, ok = old[p.Node]; !ok {
				n = newNodeHealth(l.cfg.ClearingProbes)
			}
			next[p.Node] = n
		}
		ev := domain.ProbeOK
		if p.Err != nil {
			ev = domain.ProbeFailed
		}
		m, change, changed, err := n.machine.Apply(ev)
		if err != nil {
			l.hmu.Unlock()
			return l.SystemState(), err
		}
		n.machine = m
		n.state.Store(uint32(m.State()))
		if changed {
			// A fresh state starts a fresh run of store faults.
			n.clear()
			nodeChanges = append(nodeChanges, nodeChange{p.Node, change})
		}
	}
	if n, ok := next[""]; ok && res.all && l.nodeProber != nil && n.healthy() {
		// The unattributed entry of a store down before any node was
		// known has cleared: its nodes speak for themselves now.
		delete(next, "")
	}
	l.nodes.Store(&next)
	from, to := l.SystemState(), worst(next)
	// The unattributed calls follow the store as a whole.
	l.unknown.state.Store(uint32(to))
	if from != to {
		l.unknown.clear()
	}
	l.state.Store(uint32(to))
	l.hmu.Unlock()

	var errs []error
	if l.nodeRec != nil && l.nodeProber != nil {
		for _, c := range nodeChanges {
			errs = append(errs, l.nodeRec.RecordNodeTransition(ctx, c.node, c.change, l.clock.Now()))
		}
	}
	for _, c := range aggregateChanges(from, to) {
		errs = append(errs, l.rec.RecordTransition(ctx, c, l.clock.Now()))
	}
	return to, errors.Join(errs...)
}

// worst is the instance's state: DEGRADED when a node is, else
// RECOVERING when a node is, else HEALTHY (also with no node at all).
func worst(nodes nodeSet) domain.SystemState {
	st := domain.Healthy
	for _, n := range nodes {
		switch domain.SystemState(n.state.Load()) {
		case domain.Degraded:
			return domain.Degraded
		case domain.Recovering:
			st = domain.Recovering
		}
	}
	return st
}

// aggregateChanges lists the transitions of the instance's state from
// from to to, each one the machine lists. Nodes move one edge per probe,
// so the worst of them does too, but for one case: the last DEGRADED node
// leaving the store (scale-in, a slot map that no longer names it) takes
// the instance from DEGRADED to HEALTHY, recorded through RECOVERING.
func aggregateChanges(from, to domain.SystemState) []domain.StateChange {
	switch {
	case from == to:
		return nil
	case from == domain.Degraded && to == domain.Healthy:
		return []domain.StateChange{{From: from, To: domain.Recovering}, {From: domain.Recovering, To: to}}
	}
	return []domain.StateChange{{From: from, To: to}}
}

// NodeStates returns the health of every node of the primary store that
// the last probe saw, by node name: for a Redis Cluster each master that
// owns slots, DEGRADED or RECOVERING for those whose keys the breaker
// keeps off the store. A store of one node has the one entry "" unless
// its Prober names it (ports.NodeProber).
func (l *Limiter) NodeStates() map[string]domain.SystemState {
	nodes := *l.nodes.Load()
	out := make(map[string]domain.SystemState, len(nodes))
	for name, n := range nodes {
		out[name] = domain.SystemState(n.state.Load())
	}
	return out
}

// probeState is what the Limiter keeps for its breaker.
type probeState struct {
	// hmu guards the node machines and the replacement of nodes.
	hmu   sync.Mutex
	nodes atomic.Pointer[nodeSet]
	// unknown counts the store faults of decisions on no known node.
	unknown *nodeHealth
	// probeMu serialises probe rounds, so that machines see the outcomes
	// in the order the probes ended.
	probeMu    sync.Mutex
	confirming atomic.Bool
	nodeProber ports.NodeProber   // nil: the store is one node
	nodeRec    ports.NodeRecorder // nil unless the Recorder observes nodes
}

func (p *probeState) init(clearing int, prober ports.Prober, rec ports.Recorder) {
	p.unknown = newNodeHealth(clearing)
	empty := nodeSet{}
	if np, ok := prober.(ports.NodeProber); ok {
		p.nodeProber = np
	} else {
		empty[""] = newNodeHealth(clearing)
	}
	p.nodes.Store(&empty)
	p.nodeRec, _ = rec.(ports.NodeRecorder)
}

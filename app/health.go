package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// maxLoopErrors bounds the recorder errors the health loop keeps for Close.
const maxLoopErrors = 8

// MemoryCheck is a boot check (docs/adr/005): it compares the
// store's memory ceiling (Redis maxmemory) with budgetBytes and returns a
// warning for each problem (below the budget, unreadable, evicting). err is
// for a check that cannot run at all. A store that can check itself
// (ports.MemoryChecker: the Redis adapter) is checked without one: set
// Deps.MemoryCheck only to check something else.
type MemoryCheck func(ctx context.Context, budgetBytes int64) (warnings []string, err error)

// healthLoop probes the store on every tick of the clock until Close.
// The ticker runs at Config.ProbeInterval while the instance is HEALTHY
// and at the recovery interval otherwise (retick), so that recovery takes
// seconds whatever the healthy interval (docs/adr/008).
func (l *Limiter) healthLoop() {
	defer l.wg.Done()
	defer l.stopTicker()
	for {
		select {
		case <-l.done:
			return
		case <-l.tickerChanged:
			// retick replaced the ticker: wait on the new one.
		case <-l.currentTicker().C():
			if _, err := l.ProbeOnce(l.loopCtx); err != nil {
				l.keepLoopErr(err)
			}
			l.retick()
			if l.afterTick != nil {
				l.afterTick()
			}
		}
	}
}

// firstProbe runs one probe round before the Limiter serves a store that
// is not connected yet, so that it starts in the state its store is in:
// HEALTHY leaves DEGRADED at once when the store cannot answer (a
// service started during an outage), and the transition is recorded as
// any other. A Recorder failure is kept for Close, as the loop's are.
func (l *Limiter) firstProbe() {
	if _, err := l.ProbeOnce(context.Background()); err != nil {
		l.keepLoopErr(err)
	}
}

// probeEvery is the interval the health loop should tick at now.
func (l *Limiter) probeEvery() time.Duration {
	if l.SystemState() == domain.Healthy {
		return l.cfg.ProbeInterval
	}
	return min(l.cfg.RecoveryProbeInterval, l.cfg.ProbeInterval)
}

// retick replaces the loop's ticker when the state calls for another
// interval. It runs in the loop after a probe and wherever store faults
// opened a breaker; the new ticker exists when it returns, so a
// test that moves a fake clock next finds it.
func (l *Limiter) retick() {
	every := l.probeEvery()
	l.tickMu.Lock()
	defer l.tickMu.Unlock()
	if l.tickStopped || every == l.tickEvery {
		return
	}
	l.ticker.Stop()
	l.ticker, l.tickEvery = l.clock.NewTicker(every), every
	select {
	case l.tickerChanged <- struct{}{}:
	default:
	}
}

func (l *Limiter) currentTicker() ports.Ticker {
	l.tickMu.Lock()
	defer l.tickMu.Unlock()
	return l.ticker
}

func (l *Limiter) stopTicker() {
	l.tickMu.Lock()
	defer l.tickMu.Unlock()
	l.tickStopped = true
	l.ticker.Stop()
}

// ProbeOnce runs one probe round now, feeds its outcome to the health
// machines (one per node of the store, docs/adr/008) and records the
// transitions, if any. It returns the instance's state after the probe
// (the worst node's); the error is non-nil only when the Recorder failed
// (a failed probe is an event, not an error). The health loop calls it on
// every interval; tests and boot code may call it too.
//
// A probe has Config.ProbeTimeout, and no more than Config.StoreTimeout
// of the store's time: a store too slow to answer a decision in time is
// not healthy, and counting it healthy would close the breaker only for
// the next decisions to miss their deadline and open it again, over and
// over (docs/adr/005). As for a decision, time the service itself could
// not run is not the store's (docs/adr/008): a probe that the service
// was too starved to complete within Config.ProbeTimeout, while the store
// had less than its budget, proves nothing and moves no machine; nor
// does a node's missed deadline while the service stalled for half a
// deadline during the round, or while the node answered a decision.
func (l *Limiter) ProbeOnce(ctx context.Context) (domain.SystemState, error) {
	l.probeMu.Lock()
	defer l.probeMu.Unlock()
	answered := l.answeredByNode()
	res, stalled, starved := l.probeRound(ctx)
	if starved {
		return l.SystemState(), nil
	}
	return l.applyProbes(ctx, l.withoutMisses(res, stalled, answered))
}

// probeRound runs one probe round under the probe's store deadline:
// Config.ProbeTimeout, and no more than Config.StoreTimeout of the
// store's time (storetime.go). stalled reports that the service itself
// stalled for half that budget meanwhile; starved that the round was
// still running at ProbeTimeout while the store had less than its
// budget (the service, not the store, was late): such a round proves
// nothing.
func (l *Limiter) probeRound(ctx context.Context) (res probeResults, stalled, starved bool) {
	budget := min(l.cfg.ProbeTimeout, l.cfg.StoreTimeout)
	start := time.Now()
	pctx := newStoreTime(ctx, l.lag, start, budget, start.Add(max(l.cfg.ProbeTimeout, budget)), false)
	res = l.probe(pctx)
	stalled = pctx.lagged() >= budget/2
	starved = pctx.stop() == endShed
	return res, stalled, starved
}

// answeredByNode is each known node's count of successful store calls.
func (l *Limiter) answeredByNode() map[string]uint64 {
	nodes := *l.nodes.Load()
	out := make(map[string]uint64, len(nodes))
	for name, n := range nodes {
		out[name] = n.answered.Load()
	}
	return out
}

// withoutMisses drops from a probe round the nodes that failed by a
// missed deadline when the miss proves nothing of the store: the round
// ran while the service itself stalled for half a deadline (as for a
// confirming probe, docs/adr/008), or the node answered a decision's
// store call meanwhile (it serves; the probe waited behind the service's
// own work). Answers and refusals stay.
func (l *Limiter) withoutMisses(res probeResults, stalled bool, before map[string]uint64) probeResults {
	kept := res.probes[:0:0]
	nodes := *l.nodes.Load()
	for _, p := range res.probes {
		if p.Err != nil && (errors.Is(p.Err, context.DeadlineExceeded) || errors.Is(p.Err, domain.ErrStoreTimeout)) {
			n, known := nodes[p.Node]
			if stalled || (known && n.answered.Load() != before[p.Node]) {
				res.all = false
				continue
			}
		}
		kept = append(kept, p)
	}
	res.probes = kept
	return res
}

// probe runs the Prober: per node when it can (ports.NodeProber).
func (l *Limiter) probe(ctx context.Context) probeResults {
	if l.nodeProber == nil {
		return probeResults{probes: []ports.NodeProbe{{Err: l.prober.Probe(ctx)}}, all: true}
	}
	probes, err := l.nodeProber.ProbeNodes(ctx)
	known := *l.nodes.Load()
	if err != nil {
		// No node answered: every node known is down, and so are the
		// decisions on no known node.
		probes = probes[:0]
		for name := range known {
			probes = append(probes, ports.NodeProbe{Node: name, Err: err})
		}
		if len(known) == 0 {
			probes = append(probes, ports.NodeProbe{Err: err})
		}
		return probeResults{probes: probes}
	}
	if _, ok := known[""]; ok {
		// The store was down before any node was known: "" follows the
		// whole store until it has cleared (applyProbes then drops it).
		probes = append(probes, ports.NodeProbe{Err: errors.Join(nodeErrs(probes)...)})
	}
	return probeResults{probes: probes, all: true}
}

func nodeErrs(probes []ports.NodeProbe) []error {
	var errs []error
	for _, p := range probes {
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	}
	return errs
}

// confirmingKey marks the context of a confirming probe.
type confirmingKey struct{}

// ConfirmingProbe reports whether ctx is that of a confirming probe: a
// probe the breaker runs out of schedule when missed deadlines pile up,
// as a witness that the store is down, rather than one of the health
// loop's; its outcome feeds no health machine (docs/adr/008). A Prober
// that logs its probes may tell the two apart with it.
func ConfirmingProbe(ctx context.Context) bool {
	v, _ := ctx.Value(confirmingKey{}).(bool)
	return v
}

func (l *Limiter) keepLoopErr(err error) {
	l.loopMu.Lock()
	defer l.loopMu.Unlock()
	if len(l.loopErrs) < maxLoopErrors {
		l.loopErrs = append(l.loopErrs, err)
	} else {
		l.loopLost++
	}
}

// Close stops the health loop, cancelling a probe in flight, and waits for
// it: no goroutine of the Limiter outlives Close. It returns the Recorder
// errors the loop met (the first few, joined), since the loop has no
// caller to hand them to. The stores are left open: they belong to the
// caller; a later Close returns only what is new (nothing). Close is
// idempotent; Evaluate keeps working after it, without health probes.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.stopLoop()
	})
	l.wg.Wait()
	if l.allots != nil {
		// What the allotments did not spend goes back (docs/adr/019).
		l.allots.close()
	}
	l.lag.close()
	l.loopMu.Lock()
	defer l.loopMu.Unlock()
	errs := l.loopErrs
	if l.loopLost > 0 {
		errs = append(errs, fmt.Errorf("health loop: %d more recorder errors", l.loopLost))
	}
	// Each error is handed over once.
	l.loopErrs, l.loopLost = nil, 0
	return errors.Join(errs...)
}

// storeProber is the default Prober: a Peek of a reserved key, which
// consumes nothing and proves a full round trip.
type storeProber struct {
	store ports.Store
	clock ports.Clock
}

// probeKey cannot collide with a decision's key: tags there are hex
// pseudonyms.
const probeKey = domain.KeyPrefix + ":{__health__}:probe"

func (p storeProber) Probe(ctx context.Context) error {
	_, err := p.store.Peek(ctx, p.clock.Now(), []domain.Limit{{
		Key:    probeKey,
		Window: domain.Window{Name: "probe", Limit: 1, Period: time.Second},
		Cost:   1,
	}})
	return err
}

// checkMemory runs the memory check at boot when a budget is configured.
// Every outcome is a warning: a managed Redis may hide its configuration,
// and the operator decides what a warning means.
func (l *Limiter) checkMemory(check MemoryCheck) []string {
	if l.cfg.RedisMemoryBudgetMB <= 0 {
		return nil
	}
	if check == nil {
		return []string{fmt.Sprintf("store maxmemory cannot be read (no memory check wired): the %d MB budget is unchecked", l.cfg.RedisMemoryBudgetMB)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ProbeTimeout)
	defer cancel()
	warnings, err := check(ctx, l.cfg.RedisMemoryBudgetMB<<20)
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("store maxmemory cannot be checked: %v", err))
	}
	return warnings
}

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
// for a check that cannot run at all. With the Redis adapter:
//
//	func(ctx context.Context, b int64) ([]string, error) {
//		r, err := store.CheckMaxMemory(ctx, b)
//		return r.Warnings, err
//	}
type MemoryCheck func(ctx context.Context, budgetBytes int64) (warnings []string, err error)

// healthLoop probes the store on every tick of the clock until Close.
func (l *Limiter) healthLoop() {
	defer l.wg.Done()
	defer l.ticker.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.ticker.C():
			if _, err := l.ProbeOnce(l.loopCtx); err != nil {
				l.keepLoopErr(err)
			}
			if l.afterTick != nil {
				l.afterTick()
			}
		}
	}
}

// ProbeOnce runs one health probe now, feeds its outcome to the health
// machine and records the transition, if any. It returns the state after
// the probe; the error is non-nil only when the Recorder failed (a failed
// probe is an event, not an error). The health loop calls it on every
// interval; tests and boot code may call it too.
//
// A probe has Config.ProbeTimeout, and no more than Config.StoreTimeout:
// a store too slow to answer a decision in time is not healthy, and
// counting it healthy would close the breaker only for the next decisions
// to miss their deadline and open it again, over and over
// (docs/adr/005).
func (l *Limiter) ProbeOnce(ctx context.Context) (domain.SystemState, error) {
	pctx, cancel := context.WithTimeout(ctx, min(l.cfg.ProbeTimeout, l.cfg.StoreTimeout))
	err := l.prober.Probe(pctx)
	cancel()
	ev := domain.ProbeOK
	if err != nil {
		ev = domain.ProbeFailed
	}
	return l.apply(ctx, ev)
}

// apply feeds one event to the machine and records the transition.
func (l *Limiter) apply(ctx context.Context, ev domain.HealthEvent) (domain.SystemState, error) {
	l.mu.Lock()
	next, change, changed, err := l.machine.Apply(ev)
	if err != nil {
		l.mu.Unlock()
		return l.SystemState(), err
	}
	l.machine = next
	l.state.Store(uint32(next.State()))
	if changed {
		// A fresh state starts a fresh count of in-band failures.
		l.failures.Store(0)
	}
	l.mu.Unlock()
	if !changed {
		return next.State(), nil
	}
	return next.State(), l.rec.RecordTransition(ctx, change, l.clock.Now())
}

// inBandFailure counts one failed store call; the BreakerFailures-th in a
// row, while HEALTHY, counts as a failed probe: the breaker opens, and
// recovery follows the probes through RECOVERING like any other outage.
func (l *Limiter) inBandFailure(ctx context.Context) error {
	if l.failures.Add(1) < int64(l.cfg.BreakerFailures) {
		return nil
	}
	l.mu.Lock()
	trip := l.machine.State() == domain.Healthy && l.failures.Load() >= int64(l.cfg.BreakerFailures)
	l.mu.Unlock()
	if !trip {
		return nil
	}
	_, err := l.apply(ctx, domain.ProbeFailed)
	return err
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

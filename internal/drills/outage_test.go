package drills

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Phases of an outage drill's traffic.
const (
	phaseSteady int32 = iota
	phaseOutage
	phaseRecovering
	phaseHealed
)

// TestOutageKill is the outage drill: steady traffic on every route
// family while redis-server is killed with SIGKILL, then started again
// (empty).
func TestOutageKill(t *testing.T) {
	r := newRig(t, rigOptions{})
	tr := startTraffic(t, r.lim, 8, standardFlows())
	healed := make(chan struct{})
	r.journal.setOnTransition(func(x transition) {
		if x.change.To == domain.Healthy && tr.phase.Load() == phaseRecovering {
			tr.enter(phaseHealed)
			close(healed)
		}
	})
	steady(t, r, time.Second)

	afterProbe(t, r.probes)
	before := len(r.journal.allTransitions())
	probesAtKill := r.probes.count()
	admittedBefore := tr.sum(admitted, "ledger", phaseSteady)
	tr.enter(phaseOutage)
	killed := time.Now()
	if err := r.srv.Kill(); err != nil {
		t.Fatal(err)
	}

	// Within one probe interval: DEGRADED, the breaker open.
	down, downIdx := r.journal.waitTransition(t, before, domain.Degraded)
	if down.probes > probesAtKill+2 {
		t.Errorf("DEGRADED only at probe %d; the kill came after probe %d, so the first probe started after it is %d at the latest", down.probes, probesAtKill, probesAtKill+2)
	}
	if !r.lim.BreakerOpen() {
		t.Error("DEGRADED, yet the breaker is closed")
	}
	figure(t, "outage.kill_to_degraded", "%s (probe interval %s; %s)", ms(down.at.Sub(killed)), probeInterval, trigger(r.probes, down))
	time.Sleep(8 * probeInterval) // the outage lasts a few probes

	tr.enter(phaseRecovering)
	restarted := time.Now()
	if err := r.srv.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-healed:
	case <-time.After(settle):
		t.Fatalf("not HEALTHY %s after the restart; transitions: %v", settle, r.journal.allTransitions())
	}
	upIdx := checkRecovery(t, r.journal, downIdx, domain.DefaultClearingProbes)
	all := r.journal.allTransitions()
	recovering, up := all[upIdx-1], all[upIdx]
	figure(t, "outage.restart_to_recovering", "%s", ms(recovering.at.Sub(restarted)))
	figure(t, "outage.restart_to_healthy", "%s (%d good probes)", ms(up.at.Sub(restarted)), domain.DefaultClearingProbes)
	figure(t, "outage.degraded_for", "%s (DEGRADED at the kill + %s, HEALTHY again %s after the restart)",
		ms(up.at.Sub(down.at)), ms(down.at.Sub(killed)), ms(up.at.Sub(restarted)))
	time.Sleep(4 * probeInterval) // healed traffic
	tr.stop()
	if again := len(r.journal.allTransitions()) - upIdx - 1; again > 0 {
		figure(t, "outage.after_recovery", "%d more transitions under the returning traffic: %v", again, r.journal.allTransitions()[upIdx+1:])
	}
	tr.checkClean(t)

	outage, rec, heal := tr.tally(phaseOutage), tr.tally(phaseRecovering), tr.tally(phaseHealed)
	checkDegradedPhase(t, "outage", outage, tr.workers)
	checkDegradedPhase(t, "recovering", rec, tr.workers)
	checkBypassCap(t, tr)
	if n := callsWhileOpen(r.journal, down.at, up.at); n > tr.workers {
		t.Errorf("%d store calls began while the breaker was open (at most one per worker may straddle its opening)", n)
	}
	for _, f := range []domain.RouteFamily{domain.FamilyRead, domain.FamilyAuth, domain.FamilyCostly} {
		if heal.count(func(k outcomeKey) bool { return k.family == f && primaryAnswer(k) }) == 0 {
			t.Errorf("healed: no %s decision came from the primary store:%s", f, heal.summary())
		}
	}
	// Redis restarted empty: the ledger holds what was admitted since.
	counted := ledgerCount(t, r.lim)
	since, maybe := tr.sum(admitted, "ledger", phaseHealed), tr.sum(uncertain, "ledger", phaseHealed)
	if counted < since || counted > since+maybe {
		t.Errorf("the ledger holds %d units; %d were admitted since the restart (%d more may have been counted)", counted, since, maybe)
	}
	figure(t, "outage.counts_lost", "%d admitted before the kill, forgotten by the empty restart; %d counted since, for %d admitted", admittedBefore, counted, since)
	reportPhases(t, "outage", tr, map[string]int32{"steady": phaseSteady, "outage": phaseOutage, "recovering": phaseRecovering, "healed": phaseHealed})
	checkExact(t, r.lim, "Exact.After-Outage@Example.COM")
}

// steady lets the traffic run for d, then waits for a HEALTHY Limiter:
// on a loaded machine a store call may miss its deadline and trip the
// breaker before the drill has broken anything.
func steady(t *testing.T, r *rig, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	waitFor(t, settle, "HEALTHY before the drill", func() bool { return r.lim.SystemState() == domain.Healthy })
	if n := len(r.journal.allTransitions()); n > 0 {
		figure(t, "steady.spurious_transitions", "%d before the fault (a store call missed its deadline under load)", n)
	}
}

// trigger says what opened the breaker: a probe when the last probe
// before the transition failed, else in-band failures.
func trigger(l *probeLog, tr transition) string {
	if all := l.all(); tr.probes > 0 && all[tr.probes-1].failed() {
		if all[tr.probes-1].confirm {
			return fmt.Sprintf("opened by %d missed deadlines in a row and the confirming probe %d they triggered", app.DefaultBreakerFailures, tr.probes)
		}
		return fmt.Sprintf("opened by probe %d", tr.probes)
	}
	return fmt.Sprintf("opened by %d in-band store failures in a row, before a probe", app.DefaultBreakerFailures)
}

// callsWhileOpen counts the store calls that began between from and to.
func callsWhileOpen(j *journal, from, to time.Time) int {
	n := 0
	for _, c := range j.storeCalls() {
		if c.Op == ports.OpEvaluate && c.Start.After(from) && c.Start.Before(to) {
			n++
		}
	}
	return n
}

// reportPhases logs each phase's outcomes and latencies.
func reportPhases(t *testing.T, drill string, tr *traffic, phases map[string]int32) {
	t.Helper()
	for name, p := range phases {
		tl := tr.tally(p)
		p50, p99, worst := tl.latencies()
		figure(t, drill+"."+name, "%d decisions, latency p50 %s p99 %s worst %s;%s", tl.decisions, ms(p50), ms(p99), ms(worst), tl.summary())
	}
}

// checkExact sends quotaLimit+1 reports for a fresh user, one after the
// other: exactly quotaLimit pass, each counted by the primary store, and a
// peek then finds nothing left. It first waits for a closed breaker. A run
// disturbed by a store call that missed its deadline (the drills share two
// loaded cores with other tests; a timed-out call may or may not have been
// counted) is repeated with another user, up to three times: a store that
// miscounts fails every run. It returns the user whose quota is spent.
func checkExact(t *testing.T, lim *app.Limiter, base string) (user string) {
	t.Helper()
	var why string
	for attempt := range 3 {
		waitFor(t, settle, "HEALTHY for the exactness check", func() bool { return !lim.BreakerOpen() })
		user = fmt.Sprintf("%s-%d", base, attempt)
		var disturbed bool
		why, disturbed = exactRun(lim, user)
		if why == "" {
			return user
		}
		if !disturbed {
			break
		}
		t.Logf("exactness run %d disturbed by a missed deadline: %s", attempt+1, why)
	}
	t.Fatal(why)
	return ""
}

// exactRun is one run of checkExact: it returns what went wrong, and
// whether a missed deadline was involved.
func exactRun(lim *app.Limiter, user string) (why string, disturbed bool) {
	req := app.Request{Route: routeQuota, ClientIP: rawIP(0), User: user}
	ctx := context.Background()
	for i := range quotaLimit + 1 {
		d, err := lim.Evaluate(ctx, req)
		if err != nil {
			return err.Error(), false
		}
		want, remaining := domain.Allowed, int64(quotaLimit-1-i)
		if i == quotaLimit {
			want, remaining = domain.Throttled, 0
		}
		if d.State != want || d.Source != domain.SourcePrimary || d.Remaining != remaining {
			return fmt.Sprintf("report %d of %d: %s from %s, remaining %d (cause %s); want %s from the primary store, remaining %d",
				i+1, quotaLimit+1, d.State, d.Source, d.Remaining, d.Cause, want, remaining), d.Cause == domain.CauseStoreTimeout || d.Cause == domain.CauseBreakerOpen
		}
	}
	d, err := lim.Peek(ctx, req)
	if err != nil || d.Remaining != 0 {
		return fmt.Sprintf("Peek after %d reports: remaining %d, %v; want 0", quotaLimit, d.Remaining, err), errors.Is(err, domain.ErrStoreTimeout)
	}
	return "", false
}

// ledgerCount returns how many units Redis holds for the ledger user,
// peeked through lim once its breaker is closed.
func ledgerCount(t *testing.T, lim *app.Limiter) int {
	t.Helper()
	req := app.Request{Route: routeLedger, ClientIP: rawIP(0), User: ledgerUser}
	var d domain.Decision
	waitFor(t, settle, "a peek at the ledger", func() bool {
		var err error
		d, err = lim.Peek(context.Background(), req)
		return err == nil
	})
	return ledgerLimit - int(d.Remaining)
}

// afterProbe waits until the health loop completes its next probe, so
// that the fault that follows falls at the start of a probe interval.
func afterProbe(t *testing.T, l *probeLog) {
	t.Helper()
	n := l.count()
	waitFor(t, settle, "the next probe", func() bool { return l.count() > n })
}

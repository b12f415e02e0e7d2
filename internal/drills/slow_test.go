package drills

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/faultproxy"
)

// The fault drills put the fault proxy between the store and Redis and
// break the link three ways: replies slower than every deadline, a black
// hole that accepts and never answers, and replies cut in the middle.
func TestSlowRedis(t *testing.T) {
	faultDrill(t, "slow", faultproxy.Fault{ReplyDelay: slowDelay})
}

func TestBlackHole(t *testing.T) {
	faultDrill(t, "blackhole", faultproxy.Fault{Mode: faultproxy.BlackHole})
}

func TestCutReplies(t *testing.T) {
	faultDrill(t, "cut", faultproxy.Fault{Mode: faultproxy.CutReplies})
}

// slowDelay is above both the store deadline and the probe timeout: the
// decisions and the probes time out.
const slowDelay = probeTimeout + 100*time.Millisecond

// faultDrill runs one fault under steady traffic: the breaker must open on
// in-band failures, before any probe; while the fault lasts every decision
// follows the degraded matrix and none waits past the deadline; once the
// fault heals, recovery follows the probes; and Redis holds exactly what
// was admitted, plus at most the calls that failed after reaching it.
func faultDrill(t *testing.T, name string, fault faultproxy.Fault) {
	r := newRig(t, rigOptions{proxy: true})
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
	probesAtFault := r.probes.count()
	injected := time.Now()
	r.proxy.Inject(fault) // then the phase, as in TestSlowerThanDeadline
	tr.enter(phaseOutage)

	down, downIdx := r.journal.waitTransition(t, before, domain.Degraded)
	// In-band failures open it before the next scheduled probe: refusals
	// at once, missed deadlines through the confirming probe they trigger
	// (docs/adr/008), after any that proved nothing (openedInBand).
	if probes := r.probes.all(); !openedInBand(probes, probesAtFault, down) {
		t.Errorf("the breaker opened at probe %d, not on the in-band failures (fault after probe %d; probes %v)", down.probes, probesAtFault, probes[probesAtFault:down.probes])
	}
	figure(t, name+".fault_to_degraded", "%s (%s)", ms(down.at.Sub(injected)), trigger(r.probes, down))
	time.Sleep(6 * probeInterval) // the fault lasts a few probes

	tr.enter(phaseRecovering)
	fixed := time.Now()
	r.proxy.Heal()
	select {
	case <-healed:
	case <-time.After(settle):
		t.Fatalf("not HEALTHY %s after the fault healed; transitions: %v", settle, r.journal.allTransitions())
	}
	upIdx := checkRecovery(t, r.journal, downIdx, domain.DefaultClearingProbes)
	up := r.journal.allTransitions()[upIdx]
	figure(t, name+".heal_to_healthy", "%s", ms(up.at.Sub(fixed)))
	time.Sleep(4 * probeInterval)
	tr.stop()
	tr.checkClean(t)

	outage, rec := tr.tally(phaseOutage), tr.tally(phaseRecovering)
	checkDegradedPhase(t, "fault", outage, tr.workers)
	checkDegradedPhase(t, "recovering", rec, tr.workers)
	checkBypassCap(t, tr)
	if n := callsWhileOpen(r.journal, down.at, up.at); n > tr.workers {
		t.Errorf("%d store calls began while the breaker was open", n)
	}
	reportPhases(t, name, tr, map[string]int32{"steady": phaseSteady, "fault": phaseOutage, "recovering": phaseRecovering, "healed": phaseHealed})

	// The server never lost anything: Redis holds every admitted unit, and
	// beyond them only units of calls that failed after reaching it.
	all := []int32{phaseSteady, phaseOutage, phaseRecovering, phaseHealed}
	counted := ledgerCount(t, r.lim)
	adm, maybe := tr.sum(admitted, "ledger", all...), tr.sum(uncertain, "ledger", all...)
	if counted < adm || counted > adm+maybe {
		t.Errorf("the ledger holds %d units for %d admitted requests and %d failed calls", counted, adm, maybe)
	}
	figure(t, name+".ledger", "%d units counted for %d admitted requests: %d counted without being admitted (of %d calls that failed or timed out)", counted, adm, counted-adm, maybe)
	checkExact(t, r.lim, "Exact.After-"+name+"@Example.COM")
}

// TestSlowerThanDeadline makes Redis slower than the store deadline but
// fast enough to answer within the probe timeout: every decision misses
// its deadline. The breaker opens on in-band failures, and the probes keep
// it open, since a probe gets no more than the store deadline: the breaker
// does not cycle open and shut for as long as the fault lasts, every
// decision meanwhile is the degraded matrix's, and once the fault heals
// the system recovers as after an outage.
func TestSlowerThanDeadline(t *testing.T) {
	// Above the deadline; a probe's two round trips (PING, INFO memory)
	// stay within the probe timeout.
	const delay = storeTimeout + storeTimeout/5
	r := newRig(t, rigOptions{proxy: true})
	tr := startTraffic(t, r.lim, 8, standardFlows())
	steady(t, r, time.Second)
	afterProbe(t, r.probes)
	before := len(r.journal.allTransitions())
	// The fault first, then the phase: a decision the phase counts began
	// after the fault, but for those already in flight (one a worker). In
	// the other order a loaded machine let a worker finish two decisions
	// between the two.
	injected := time.Now()
	r.proxy.Inject(faultproxy.Fault{ReplyDelay: delay})
	tr.enter(phaseOutage)
	const hold = 16 * probeInterval
	time.Sleep(hold)
	tr.enter(phaseRecovering)
	r.proxy.Heal()
	healed := time.Now()
	waitFor(t, settle, "HEALTHY after the fault", func() bool { return r.lim.SystemState() == domain.Healthy })
	tr.stop()
	tr.checkClean(t)

	inBand := replayAll(t, r.journal, domain.DefaultClearingProbes)
	during := r.journal.allTransitions()[before:]
	var opened, closed int
	var openedAt time.Time
	for _, x := range during {
		if !x.at.Before(healed) {
			break
		}
		switch x.change.To {
		case domain.Degraded:
			if x.change.From == domain.Healthy {
				opened++
				if openedAt.IsZero() {
					openedAt = x.at
				}
			}
		case domain.Healthy:
			closed++
		}
	}
	if opened != 1 || closed != 0 {
		t.Errorf("the breaker should open once and stay open while Redis is slower than the deadline; transitions: %v", during)
	}
	slow := 0
	for _, p := range r.probes.all() {
		if p.end.After(injected.Add(probeInterval)) && p.end.Before(healed) {
			if p.err == nil {
				t.Errorf("a probe passed although Redis answers later than the store deadline")
				break
			}
			slow++
		}
	}
	if slow == 0 {
		t.Error("no probe ran during the fault")
	}
	if !openedAt.IsZero() {
		figure(t, "slower.open", "opened %s after the delay began, and stayed open for the %s of the fault (%d slow probes, %d in-band trips over the whole run)",
			ms(openedAt.Sub(injected)), hold, slow, inBand)
	}
	checkDegradedPhase(t, "slower than the deadline", tr.tally(phaseOutage), tr.workers)
	reportPhases(t, "slower", tr, map[string]int32{"fault": phaseOutage})
	checkExact(t, r.lim, "Exact.After-Slower@Example.COM")
}

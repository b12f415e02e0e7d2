package drills

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestClusterFailover kills, under steady traffic, the master of a Redis
// Cluster (three masters, one replica each) that holds the ledger's keys.
// Its replica takes over; decisions on its slots fail meanwhile (degraded
// answers) and then continue on the promoted replica, counted by the
// primary store again. Replication is asynchronous: a write the master
// acknowledged but had not yet sent to its replica is lost with it, so
// the ledger may hold fewer units than were admitted; it never holds more
// than were admitted plus the calls that failed after reaching Redis. The
// drill measures both, and how long decisions were degraded.
func TestClusterFailover(t *testing.T) {
	c := redistest.ClusterWithReplicas(t)
	r := newRig(t, rigOptions{cluster: c})
	tr := startTraffic(t, r.lim, 8, standardFlows())
	steady(t, r, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()

	ledgerKey := findKey(t, c, ":ledger:")
	afterProbe(t, r.probes)
	before := len(r.journal.allTransitions())
	tr.enter(phaseOutage)
	killedAt := time.Now()
	killed, err := c.KillMasterOf(ctx, ledgerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	waitFor(t, settle, "HEALTHY after the failover", func() bool { return r.lim.SystemState() == domain.Healthy })
	healthy := time.Now()
	tr.enter(phaseHealed)
	time.Sleep(4 * probeInterval)

	// The killed master comes back as a replica of the one that replaced it.
	tr.enter(phaseRecovering)
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "HEALTHY with the old master back", func() bool { return r.lim.SystemState() == domain.Healthy })
	time.Sleep(4 * probeInterval)
	tr.stop()
	tr.checkClean(t)

	replayAll(t, r.journal, domain.DefaultClearingProbes)
	during := r.journal.allTransitions()[before:]
	var degradedFor time.Duration
	var from time.Time
	for _, x := range during {
		switch {
		case x.change.From == domain.Healthy:
			from = x.at
		case x.change.To == domain.Healthy && !from.IsZero():
			degradedFor += x.at.Sub(from)
			from = time.Time{}
		}
	}
	outage := tr.tally(phaseOutage)
	if n := outage.count(func(k outcomeKey) bool { return !primaryAnswer(k) && !degradedAnswer(k) }); n > 0 {
		t.Errorf("%d decisions neither the store's nor the degraded matrix's during the failover:%s", n, outage.summary())
	}
	if tr.tally(phaseHealed).admitted["ledger"] == 0 {
		t.Error("no ledger request admitted by the primary store after the failover")
	}
	all := []int32{phaseSteady, phaseOutage, phaseHealed, phaseRecovering}
	counted := ledgerCount(t, r.lim)
	adm, maybe := tr.sum(admitted, "ledger", all...), tr.sum(uncertain, "ledger", all...)
	if counted > adm+maybe {
		t.Errorf("the ledger holds %d units: more than the %d admitted plus the %d calls that failed after reaching Redis", counted, adm, maybe)
	}
	lost := max(adm-counted, 0)
	// Decisions continue on the promoted replica: the ledger's first
	// admission after its first failure (or the breaker's opening).
	gap := killedAt
	if len(during) > 0 {
		gap = during[0].at
	}
	var stopped, back time.Time
	for _, e := range append(outage.ledger, tr.tally(phaseHealed).ledger...) {
		switch {
		case e.failed && stopped.IsZero():
			stopped = e.start
		case e.admitted && e.start.After(gap) && (stopped.IsZero() || e.start.After(stopped)) && back.IsZero():
			back = e.start
		}
	}
	if back.IsZero() {
		t.Fatal("the ledger was never counted again after the failover")
	}
	figure(t, "failover.timeline", "kill → ledger counted again on the promoted replica %s; → cluster healthy %s; → sluice HEALTHY %s",
		ms(back.Sub(killedAt)), ms(promoted.Sub(killedAt)), ms(healthy.Sub(killedAt)))
	figure(t, "failover.degraded", "breaker open %s in all over %d transitions: %v", ms(degradedFor), len(during), during)
	figure(t, "failover.ledger", "%d units counted for %d admitted requests and %d failed calls: %d lost with the killed master (acknowledged, not yet replicated), %d counted without being admitted",
		counted, adm, maybe, lost, max(counted-adm, 0))
	reportPhases(t, "failover", tr, map[string]int32{"failover": phaseOutage, "promoted": phaseHealed, "old master back": phaseRecovering})
	figureErrors(t, "failover", r)
	checkExact(t, r.lim, "Exact.After-Failover@Example.COM")
}

// findKey returns a key holding part that one of the cluster's masters
// stores.
func findKey(t *testing.T, c *redistest.DedicatedCluster, part string) string {
	t.Helper()
	masters, err := c.Masters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		for _, k := range sluiceKeys(t, m.Server) {
			if strings.Contains(k, part) {
				return k
			}
		}
	}
	t.Fatalf("no key holding %q on any master", part)
	return ""
}

// figureErrors logs the distinct errors of the store calls and probes.
func figureErrors(t *testing.T, drill string, r *rig) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range r.journal.storeCalls() {
		if c.Err != nil {
			seen["store call: "+c.Err.Error()]++
		}
	}
	for _, p := range r.probes.all() {
		if p.err != nil {
			seen["probe: "+p.err.Error()]++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		figure(t, drill+".errors", "%d × %s", seen[k], k)
	}
}

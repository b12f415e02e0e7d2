package drills

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// reshardDrill moves a hot tenant's slot from its master to another under
// 16 workers (half the requests on the hot tenant), one key per MIGRATE
// with a pause between batches, as a reshard of a big slot takes time:
// the traffic meets the slot MIGRATING/IMPORTING throughout.
func reshardDrill(t *testing.T, r *opsRig, masters []redistest.ClusterNode) {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	hot := r.tenantsOn(t, masters[0], "hot", 1)[0]
	var cold []string
	for i, m := range masters {
		cold = append(cold, r.tenantsOn(t, m, "cold-"+strconv.Itoa(i), 3)...)
	}
	all := append([]string{hot}, cold...)
	openedBefore, _ := r.rec.openings()
	ld := startOps(r.lim, 16, hot, cold)
	time.Sleep(300 * time.Millisecond) // the hot slot fills with keys
	before := errorStats(t, r.c)
	start := time.Now()
	moved, err := r.c.MigrateSlot(ctx, r.slotOf(hot), masters[1].Server, 1, func() { time.Sleep(40 * time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	waitFor(t, settle, "every tenant past its limit", func() bool {
		return time.Since(start) > took+300*time.Millisecond && ld.sentAtLeast(all, opsLimit+20)
	})
	tallies := ld.stop()
	after := errorStats(t, r.c)

	opened, nodes := r.rec.openings()
	if opened != openedBefore {
		t.Errorf("the reshard opened a breaker %d times; node transitions %v", opened-openedBefore, nodes)
	}
	if moved == 0 {
		t.Error("the hot slot held no key: the drill met no migration")
	}
	checkOpsExact(t, r, tallies, all)
	tryAgain := statDelta(before, after, "TRYAGAIN")
	figure(t, "reshard.hot_slot", "slot %d (%d keys) moved in %s under 16 workers: %d TRYAGAIN, %d ASK, %d MOVED replies retried; %d breaker openings; %d decisions, all from the store, every tenant at exactly %d; errors %v",
		r.slotOf(hot), moved, ms(took), tryAgain, statDelta(before, after, "ASK"), statDelta(before, after, "MOVED"),
		opened-openedBefore, sumSent(tallies), opsLimit, r.rec.errors())
}

// halfMigrationDrill leaves a slot half migrated: its owner says it moved
// to another master, which says it did not. Every call on it bounces
// MOVED between the two until the bound.
func halfMigrationDrill(t *testing.T, r *opsRig, masters []redistest.ClusterNode) {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, b := masters[0], masters[1]
	var bounce string
	for _, tn := range r.tenantsOn(t, a, "bounce", 20) {
		n, err := a.Server.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(r.slotOf(tn)))
		if err == nil && n == int64(0) {
			bounce = tn
			break
		}
	}
	if bounce == "" {
		t.Fatal("no empty slot on the first master")
	}
	slot := strconv.Itoa(r.slotOf(bounce))
	bID, err := r.c.NodeID(ctx, b.Server)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Server.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", bID); err != nil {
		t.Fatal(err)
	}
	live := r.tenantsOn(t, masters[2], "steady", 3)
	openedBefore, _ := r.rec.openings()
	errsBefore := r.rec.errors()["redirections"]
	before := errorStats(t, r.c)
	ld := startOps(r.lim, 8, bounce, live)
	start := time.Now()
	waitFor(t, settle, "the live tenants past their limit", func() bool {
		return time.Since(start) > 8*probeInterval && ld.sentAtLeast(live, opsLimit+20)
	})
	tallies := ld.stop()
	after := errorStats(t, r.c)
	opened, nodes := r.rec.openings()
	if opened != openedBefore {
		t.Errorf("a half-finished migration opened a breaker %d times; node transitions %v", opened-openedBefore, nodes)
	}
	checkOpsExact(t, r, tallies, live)
	bt := tallies[bounce]
	redirected := r.rec.errors()["redirections"] - errsBefore
	if bt.degraded != bt.sent || redirected != bt.sent {
		t.Errorf("tenant on the bouncing slot: %d of %d decisions degraded, %d with redis.ErrRedirections: %v", bt.degraded, bt.sent, redirected, bt.causes)
	}
	movedPerCall := float64(statDelta(before, after, "MOVED")) / float64(max(bt.sent, 1))
	if movedPerCall > 2*9 {
		t.Errorf("%.1f MOVED replies per call on the bouncing slot: the bound does not hold", movedPerCall)
	}
	figure(t, "reshard.half_finished", "a slot bouncing MOVED: %d decisions on it, each degraded with redis.ErrRedirections after %.1f MOVED replies on average (bound %d, one reply per node per redirection); %d breaker openings; the other tenants exact (%d decisions)",
		bt.sent, movedPerCall, 8, opened-openedBefore, sumSentOf(tallies, live))

	// Repaired (the slot given back to its owner), the tenant is the
	// store's again.
	aID, err := r.c.NodeID(ctx, a.Server)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Server.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", aID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "the repaired slot served", func() bool {
		d, err := r.lim.Evaluate(context.Background(), app.Request{Route: routeOps, ClientIP: rawIP(0), User: rawUser(0), Tenant: bounce})
		return err == nil && d.Source == domain.SourcePrimary
	})
}

package drills

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// fleet is the replicas of one service on one Redis.
const fleet = 3

// TestReplicasOnFallback is ADR-002's release evidence: three instances of
// a service share one Redis, which then goes down. With the local
// degraded action each instance counts alone, so a client spreading its
// requests over the fleet passes limit × 3 per window; with deny nothing
// passes at all while Redis is down, so nothing beyond what the shared
// store admitted. Either way a client the instances refused before the
// outage stays refused until that refusal's retry-after (the refusal
// cache is consulted before the degraded matrix).
func TestReplicasOnFallback(t *testing.T) {
	t.Parallel()
	for _, action := range []domain.DegradedAction{domain.ActionLocal, domain.ActionDeny} {
		t.Run(action.String(), func(t *testing.T) {
			t.Parallel()
			rigs := replicas(t, func(c *app.Config) { c.Degraded.Costly = action })
			// Healthy: the fleet shares one count.
			spent := "Replica.Spent@Example.COM"
			if n := spread(t, rigs, spent, 3*quotaLimit); n != quotaLimit {
				t.Fatalf("healthy fleet: %d of %d requests passed for one user, want exactly the limit %d", n, 3*quotaLimit, quotaLimit)
			}
			down(t, rigs)
			fresh := "Replica.Fresh@Example.COM"
			passedFresh := spread(t, rigs, fresh, 4*quotaLimit)
			passedSpent := spread(t, rigs, spent, 4*quotaLimit)
			want := 0
			if action == domain.ActionLocal {
				want = fleet * quotaLimit
			}
			if passedFresh != want {
				t.Fatalf("Redis down, %s: %d requests of a fresh user passed, want %d", action, passedFresh, want)
			}
			// Every instance refused the spent user before the outage, and
			// repeats that refusal from its refusal cache until its
			// retry-after, whatever the degraded action.
			if passedSpent != 0 {
				t.Fatalf("Redis down, %s: %d requests passed for a user every instance had refused", action, passedSpent)
			}
			figure(t, "replicas."+action.String(), "limit %d per user per window, %d replicas, Redis down: %d passed for a fresh user and %d more for one who had spent the quota (effective limit %d = limit × %d)",
				quotaLimit, fleet, passedFresh, passedSpent, passedFresh, passedFresh/quotaLimit)
		})
	}
	t.Run("facade", func(t *testing.T) {
		t.Parallel()
		// The ADR-002 façades degrade to local by default.
		rigs := replicas(t, nil)
		down(t, rigs)
		const tenantLimit, userLimit = 50, 10
		passed := 0
		for i := range 4 * fleet * userLimit {
			ok, _, _, err := rigs[i%fleet].lim.AllowDual("Tenant.Facade", tenantLimit, "Facade.User@Example.COM", userLimit)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				passed++
			}
		}
		if passed != fleet*userLimit {
			t.Fatalf("AllowDual on %d replicas with Redis down: %d passed, want %d (user limit × replicas)", fleet, passed, fleet*userLimit)
		}
		figure(t, "replicas.facade", "AllowDual, user limit %d, %d replicas, Redis down: %d passed", userLimit, fleet, passed)
	})
}

// replicas starts a fleet of instances on one Redis.
func replicas(t *testing.T, mutate func(*app.Config)) []*rig {
	t.Helper()
	first := newRig(t, rigOptions{mutate: mutate, patient: true})
	rigs := []*rig{first}
	for i := 2; i <= fleet; i++ {
		rigs = append(rigs, newRig(t, rigOptions{srv: first.srv, mutate: mutate, instance: fmt.Sprintf("drill-%d", i), patient: true}))
	}
	return rigs
}

// down kills the fleet's Redis and waits until every instance's breaker
// is open.
func down(t *testing.T, rigs []*rig) {
	t.Helper()
	if err := rigs[0].srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rigs {
		waitFor(t, settle, "every breaker open", r.lim.BreakerOpen)
	}
}

// spread sends n reports for user, round robin over the fleet, and returns
// how many passed.
func spread(t *testing.T, rigs []*rig, user string, n int) int {
	t.Helper()
	passed := 0
	for i := range n {
		d := decide(t, rigs[i%len(rigs)].lim, app.Request{Route: routeQuota, ClientIP: rawIP(i), User: user})
		if d.State.Passes() {
			passed++
		}
	}
	return passed
}

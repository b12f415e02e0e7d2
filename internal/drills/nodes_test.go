package drills

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// The cluster operations drills' profile: a tenant window whose count the
// drills check exactly, and a user window beside it, so that a decision
// carries several keys of one slot (a multi-key script: the one a slot in
// migration refuses with TRYAGAIN).
const (
	routeOps   = "POST /api/v1/ops"
	opsLimit   = 120  // per tenant per hour
	opsUser    = 1000 // per user per hour: never reached
	opsUsers   = 16   // users per tenant: keys in the tenant's slot
	opsTenants = 9
)

// opsCluster is the drills' dedicated cluster: three masters with one
// replica each, which serve the slots they still own when another master
// is down (cluster-require-full-coverage no: what docs/runbook.md
// recommends for per-node health to help).
func opsCluster(t *testing.T) *redistest.DedicatedCluster {
	return redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1,
		Node: redistest.Config{Args: []string{"--cluster-require-full-coverage", "no"}}})
}

// opsRig is a Limiter on the cluster wired as the app package documents
// it (app.Deps{Store, Fallback, Recorder}, no Prober: the store's own
// per-node prober comes by default, ports.HealthProber) and a recorder
// that keeps transitions and node transitions. The master-lost drill is
// then issue 27's "a dead master of three with the documented wiring
// degrades only its slots".
type opsRig struct {
	c     *redistest.DedicatedCluster
	store *redis.Store
	lim   *app.Limiter
	rec   *opsRecorder
	pseud *domain.Pseudonymiser
}

func newOpsRig(t *testing.T, c *redistest.DedicatedCluster, name string) *opsRig {
	t.Helper()
	store, err := redis.New(redis.Config{Addrs: c.Addrs(), Mode: redis.ModeCluster})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg := drillConfig()
	cfg.InstanceID = name
	cfg.StoreTimeout = patientTimeout
	cfg.RefusalCacheSize = -1 // every decision reaches the script, refused ones too
	cfg.Profiles = append(cfg.Profiles, app.ProfileConfig{Name: "ops", Family: domain.FamilyCostly, Routes: []string{routeOps},
		Windows: app.WindowsConfig{
			Tenant: []app.WindowConfig{{Name: "sustained", Limit: opsLimit, Period: time.Hour}},
			User:   []app.WindowConfig{{Name: "sustained", Limit: opsUser, Period: time.Hour}},
		}})
	rec := &opsRecorder{}
	lim := newLimiterDeps(t, cfg, app.Deps{Store: store, Fallback: newFallback(t), Recorder: rec})
	secret, _ := cfg.SecretBytes()
	pseud, err := domain.NewPseudonymiser(secret)
	if err != nil {
		t.Fatal(err)
	}
	return &opsRig{c: c, store: store, lim: lim, rec: rec, pseud: pseud}
}

// slotOf returns the slot of a tenant's keys (its pseudonym is the tag).
func (r *opsRig) slotOf(tenant string) int {
	return redistest.KeySlot("{" + r.pseud.Pseudonymise(domain.DimensionTenant, tenant) + "}")
}

// tenantsOn returns n tenant names (prefix-0, prefix-1...) whose slots
// the master m serves, and which no other tenant of the drill uses.
func (r *opsRig) tenantsOn(t *testing.T, m redistest.ClusterNode, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 100000 {
			t.Fatalf("no tenant on %s", m.Server.Addr())
		}
		name := fmt.Sprintf("%s-%d", prefix, i)
		if m.Serves(r.slotOf(name)) {
			out = append(out, name)
		}
	}
	return out
}

// opsRecorder records transitions (the instance's and each node's) and
// the errors of degraded decisions.
type opsRecorder struct {
	mu    sync.Mutex
	trans []domain.StateChange
	nodes []string
	errs  map[string]int
}

func (r *opsRecorder) RecordDecision(_ context.Context, rec ports.DecisionRecord) error {
	if rec.Err != nil {
		r.mu.Lock()
		if r.errs == nil {
			r.errs = map[string]int{}
		}
		r.errs[errClass(rec.Err)]++
		r.mu.Unlock()
	}
	return nil
}

// errClass shortens an error to what tells failures apart.
func errClass(err error) string {
	switch {
	case errors.Is(err, redis.ErrRedirections):
		return "redirections"
	case errors.Is(err, ports.ErrNotRun):
		return "not run (TRYAGAIN until the deadline)"
	case errors.Is(err, domain.ErrStoreTimeout):
		return "timeout"
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return msg
}

func (r *opsRecorder) RecordTransition(_ context.Context, c domain.StateChange, _ time.Time) error {
	r.mu.Lock()
	r.trans = append(r.trans, c)
	r.mu.Unlock()
	return nil
}

func (r *opsRecorder) RecordNodeTransition(_ context.Context, node string, c domain.StateChange, _ time.Time) error {
	r.mu.Lock()
	r.nodes = append(r.nodes, fmt.Sprintf("%s %s→%s", node, c.From, c.To))
	r.mu.Unlock()
	return nil
}

// RecordStoreCall counts the store calls that failed, by class, beside
// the decisions' errors: a breaker opened by a failed call then names it.
func (r *opsRecorder) RecordStoreCall(_ context.Context, c ports.StoreCall) {
	if c.Err == nil {
		return
	}
	r.mu.Lock()
	if r.errs == nil {
		r.errs = map[string]int{}
	}
	r.errs["store call "+c.Op.String()+": "+errClass(c.Err)]++
	r.mu.Unlock()
}
func (r *opsRecorder) RecordReset(context.Context, ports.ResetRecord) error { return nil }

// openings returns how many times a breaker (the instance's or a node's)
// opened so far, and every node transition.
func (r *opsRecorder) openings() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.trans {
		if c.To == domain.Degraded {
			n++
		}
	}
	return n, slices.Clone(r.nodes)
}

func (r *opsRecorder) errors() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.errs)
}

// opsLoad sends requests for tenants from workers until stopped, and
// tallies each tenant's decisions.
type opsLoad struct {
	mu      sync.Mutex
	tally   map[string]*opsTally
	stopped atomic.Bool
	wg      sync.WaitGroup
}

// opsTally is what one tenant's decisions were.
type opsTally struct {
	sent, allowed, throttled, degraded int
	perUser                            [opsUsers]int
	causes                             map[domain.Cause]int
}

// startOps starts workers sending ops requests, hot taking half of them.
func startOps(lim *app.Limiter, workers int, hot string, tenants []string) *opsLoad {
	ld := &opsLoad{tally: map[string]*opsTally{}}
	for w := range workers {
		ld.wg.Go(func() {
			for i := 0; !ld.stopped.Load(); i++ {
				tenant := hot
				if hot == "" || i%2 == 1 {
					tenant = tenants[(w+i)%len(tenants)]
				}
				u := (w + i) % opsUsers
				req := app.Request{Route: routeOps, ClientIP: rawIP(u), User: rawUser(u), Tenant: tenant}
				d, _ := lim.Evaluate(context.Background(), req)
				ld.add(tenant, u, d)
			}
		})
	}
	return ld
}

func (ld *opsLoad) add(tenant string, u int, d domain.Decision) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	tl := ld.tally[tenant]
	if tl == nil {
		tl = &opsTally{causes: map[domain.Cause]int{}}
		ld.tally[tenant] = tl
	}
	tl.sent++
	tl.causes[d.Cause]++
	switch {
	case d.Degraded || d.Source != domain.SourcePrimary:
		tl.degraded++
	case d.State == domain.Allowed:
		tl.allowed++
		tl.perUser[u]++
	case d.State == domain.Throttled:
		tl.throttled++
	}
}

// stop stops the workers and returns the tallies.
func (ld *opsLoad) stop() map[string]opsTally {
	ld.stopped.Store(true)
	ld.wg.Wait()
	out := map[string]opsTally{}
	for k, v := range ld.tally {
		out[k] = *v
	}
	return out
}

// sentAtLeast reports whether every tenant got n requests.
func (ld *opsLoad) sentAtLeast(tenants []string, n int) bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, tn := range tenants {
		if tl := ld.tally[tn]; tl == nil || tl.sent < n {
			return false
		}
	}
	return true
}

// checkOpsExact checks that every decision of the tenants was the
// store's and that each stopped at exactly its limit; then that Redis
// holds exactly the admitted units of every user window.
func checkOpsExact(t *testing.T, r *opsRig, tallies map[string]opsTally, tenants []string) {
	t.Helper()
	for _, tn := range tenants {
		tl := tallies[tn]
		if tl.degraded > 0 {
			t.Errorf("tenant %s: %d of %d decisions not the store's: %v", tn, tl.degraded, tl.sent, tl.causes)
		}
		if tl.allowed != opsLimit {
			t.Errorf("tenant %s: %d admitted of %d sent, want exactly %d", tn, tl.allowed, tl.sent, opsLimit)
		}
		for u, n := range tl.perUser {
			d, err := r.lim.Peek(context.Background(), app.Request{Route: routeOps, ClientIP: rawIP(u), User: rawUser(u), Tenant: tn})
			if err != nil {
				t.Fatalf("peek: %v", err)
			}
			if held := opsUser - int(d.UserRemaining); held != n {
				t.Errorf("tenant %s user %d: Redis holds %d units for %d admitted", tn, u, held, n)
			}
		}
	}
}

// errorStats returns, summed over the masters, the count of each error
// reply Redis sent (INFO errorstats: TRYAGAIN, ASK, MOVED...).
func errorStats(t *testing.T, c *redistest.DedicatedCluster) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := n.Do(ctx, "INFO", "errorstats")
		cancel()
		if err != nil {
			continue
		}
		s, _ := v.(string)
		for line := range strings.Lines(s) {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":count=")
			if !ok {
				continue
			}
			k, _ := strconv.Atoi(rest)
			out[strings.TrimPrefix(name, "errorstat_")] += k
		}
	}
	return out
}

func statDelta(before, after map[string]int, name string) int { return after[name] - before[name] }

// TestClusterOperations runs the operations a Redis Cluster goes through
// while traffic flows (issue 22 items 1, 2, 5; issue 16 item 4), on one
// dedicated cluster of three masters with one replica each, in order:
//
//   - reshard: a hot tenant's slot moves to another master as
//     `redis-cli --cluster reshard` moves it, under 16 workers. The
//     TRYAGAIN replies of the slot in migration are retried within the
//     deadline: no breaker opens, every decision is the store's, every
//     tenant stops at exactly its limit and Redis holds exactly the
//     admitted units;
//   - half-finished migration: a slot whose owner says it moved and whose
//     new owner says it did not bounces MOVED forever; each call stops
//     after the bound (redis.Config.MaxRedirections) with
//     redis.ErrRedirections, that tenant's decisions degrade, no breaker
//     opens, and every other tenant is exact;
//   - replica lost: a replica is killed under traffic: nothing degrades;
//   - master lost: its master, now without a replica, is killed under
//     traffic, then restarted: its node's breaker opens and only its
//     tenants degrade, the other masters' tenants stay exact and primary;
//     after the restart its tenants are the store's again.
func TestClusterOperations(t *testing.T) {
	c := opsCluster(t)
	r := newOpsRig(t, c, "ops-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*settle)
	defer cancel()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reshard", func(t *testing.T) { reshardDrill(t, r, masters) })
	t.Run("half-finished migration", func(t *testing.T) { halfMigrationDrill(t, r, masters) })
	lost := masters[2]
	t.Run("replica lost", func(t *testing.T) { replicaLostDrill(t, r, lost) })
	t.Run("master lost", func(t *testing.T) { masterLostDrill(t, r, lost) })
}

// replicaLostDrill kills the replica of master m under traffic: it serves
// no decision, and degrades nothing.
func replicaLostDrill(t *testing.T, r *opsRig, m redistest.ClusterNode) {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	replicas, err := r.c.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var replica *redistest.Server
	for _, n := range replicas {
		if n.MasterID == m.ID {
			replica = n.Server
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s", m.Server.Addr())
	}
	tenants := slices.Concat(r.tenantsOn(t, m, "replica", 3), r.tenantsOn(t, otherMaster(t, r, m), "replica-other", 3))
	openedBefore, _ := r.rec.openings()
	ld := startOps(r.lim, 16, "", tenants)
	if err := replica.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Traffic and probes for a few probe intervals, until every tenant
	// is past its limit.
	waitFor(t, settle, "every tenant past its limit", func() bool {
		return time.Since(killed) > 8*probeInterval && ld.sentAtLeast(tenants, opsLimit+20)
	})
	tallies := ld.stop()
	opened, nodes := r.rec.openings()
	if opened != openedBefore || r.lim.SystemState() != domain.Healthy {
		t.Errorf("a dead replica opened a breaker: %d openings, node transitions %v, state %s", opened-openedBefore, nodes, r.lim.SystemState())
	}
	checkOpsExact(t, r, tallies, tenants)
	figure(t, "nodes.replica_lost", "replica %s killed under 16 workers: %d breaker openings, %d decisions all from the store, node states %v",
		replica.Addr(), opened-openedBefore, sumSent(tallies), r.lim.NodeStates())
}

// masterLostDrill kills master m (its replica is already dead: no
// failover) under traffic, then restarts it and its replica.
func masterLostDrill(t *testing.T, r *opsRig, m redistest.ClusterNode) {
	other := otherMaster(t, r, m)
	onDead := r.tenantsOn(t, m, "dead", 2)
	onLive := r.tenantsOn(t, other, "live", 3)
	ld := startOps(r.lim, 16, "", slices.Concat(onDead, onLive))
	time.Sleep(2 * probeInterval)
	if err := m.Server.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitFor(t, settle, "the dead master's node DEGRADED", func() bool {
		return r.lim.NodeStates()[m.Server.Addr()] == domain.Degraded
	})
	degradedAt := time.Now()
	states := r.lim.NodeStates()
	for node, st := range states {
		if node != m.Server.Addr() && st != domain.Healthy {
			t.Errorf("node %s is %s while only %s is down", node, st, m.Server.Addr())
		}
	}
	waitFor(t, settle, "the live tenants past their limit", func() bool {
		return time.Since(killed) > 8*probeInterval && ld.sentAtLeast(onLive, opsLimit+20)
	})
	down := ld.stop()
	checkOpsExact(t, r, down, onLive)
	for _, tn := range onDead {
		if down[tn].degraded == 0 {
			t.Errorf("tenant %s on the dead master: no degraded decision: %+v", tn, down[tn])
		}
	}
	figure(t, "nodes.master_lost", "master %s killed (no replica) under 16 workers: its node DEGRADED after %s; node states %v; tenants on it: %v; tenants elsewhere: exact and primary (%d decisions)",
		m.Server.Addr(), ms(degradedAt.Sub(killed)), states, causesOf(down, onDead), sumSentOf(down, onLive))

	// Back: the master keeps its slots (nodes.conf), empty.
	ld = startOps(r.lim, 16, "", slices.Concat(onDead, onLive))
	restarted := time.Now()
	if err := m.Server.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "HEALTHY after the restart", func() bool { return r.lim.SystemState() == domain.Healthy })
	healthy := time.Now()
	time.Sleep(2 * probeInterval)
	up := ld.stop()
	for _, tn := range onDead {
		if up[tn].allowed == 0 {
			t.Errorf("tenant %s: nothing admitted by the store after the restart: %v", tn, up[tn].causes)
		}
	}
	_, nodes := r.rec.openings()
	figure(t, "nodes.master_back", "restart → HEALTHY %s (probe interval %s); node transitions over the drill: %v", ms(healthy.Sub(restarted)), probeInterval, nodes)
	for _, n := range r.c.Nodes() {
		if !n.Running() {
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// otherMaster returns a master other than m.
func otherMaster(t *testing.T, r *opsRig, m redistest.ClusterNode) redistest.ClusterNode {
	t.Helper()
	masters, err := r.c.Masters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range masters {
		if o.ID != m.ID && len(o.Slots) > 0 {
			return o
		}
	}
	t.Fatal("no other master")
	return redistest.ClusterNode{}
}

func sumSent(tallies map[string]opsTally) int {
	n := 0
	for _, tl := range tallies {
		n += tl.sent
	}
	return n
}

func sumSentOf(tallies map[string]opsTally, tenants []string) int {
	n := 0
	for _, tn := range tenants {
		n += tallies[tn].sent
	}
	return n
}

func causesOf(tallies map[string]opsTally, tenants []string) map[domain.Cause]int {
	out := map[domain.Cause]int{}
	for _, tn := range tenants {
		for c, n := range tallies[tn].causes {
			out[c] += n
		}
	}
	return out
}

package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Slots and timings of the clusters the harness builds.
const (
	clusterSlots = 16384
	// clusterTimeout bounds a wait for a cluster whose caller gave no
	// deadline.
	clusterTimeout = 30 * time.Second
	// DefaultNodeTimeout is a dedicated cluster's cluster-node-timeout:
	// short, so that a replica takes over from a killed master within a
	// few seconds, yet long enough that a busy machine does not fail a
	// healthy master over.
	DefaultNodeTimeout = 1500 * time.Millisecond
	// sharedNodeTimeout is the shared cluster's, which nobody kills.
	sharedNodeTimeout = 5 * time.Second
)

// ClusterConfig is the shape of a dedicated cluster (NewCluster). The
// zero value is three masters without replicas.
type ClusterConfig struct {
	// Masters is the number of masters, which split the slots evenly;
	// 0 means 3, the fewest with which Redis fails a master over.
	Masters int
	// Replicas is the number of replicas of each master.
	Replicas int
	// NodeTimeout is cluster-node-timeout; 0 means DefaultNodeTimeout.
	NodeTimeout time.Duration
	// Node configures every node (password, ACL users, memory limit,
	// persistence, extra arguments). TLS is not supported in a cluster.
	Node Config
}

// DedicatedCluster is a Redis Cluster that belongs to one test, which may
// kill and restart its nodes: a replica then takes over from a killed
// master, and the master, restarted, rejoins as a replica. Its methods
// are safe for simultaneous use.
type DedicatedCluster struct {
	nodes    []*Server
	masters  int
	replicas int
}

// ClusterWithReplicas starts a dedicated cluster of three masters each
// with one replica and DefaultNodeTimeout, healthy and in sync, and stops
// it on t.Cleanup. It is the reliability drills' cluster:
//
//	c := redistest.ClusterWithReplicas(t)
//	killed, err := c.KillMasterOf(ctx, "rl:{tenant}:x") // a replica takes over
//	err = c.WaitHealthy(ctx)                           // every slot served again
//	err = killed.Start()                               // back, as a replica
//	err = c.WaitHealthy(ctx)
func ClusterWithReplicas(t testing.TB) *DedicatedCluster {
	t.Helper()
	return NewCluster(t, ClusterConfig{Masters: 3, Replicas: 1})
}

// NewCluster starts a dedicated cluster shaped by cfg and returns once
// every node agrees on the slot map and every replica is in sync with its
// master; it stops every node on t.Cleanup. A bad cfg fails the test.
func NewCluster(t testing.TB, cfg ClusterConfig) *DedicatedCluster {
	t.Helper()
	bin := serverBinary(t)
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = DefaultNodeTimeout
	}
	nodes, err := startCluster(bin, t.TempDir(), cfg, true)
	if err != nil {
		t.Fatalf("redistest: dedicated cluster: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if err := n.close(); err != nil {
				t.Errorf("redistest: stopping cluster node %s: %v", n.Addr(), err)
			}
		}
	})
	return &DedicatedCluster{nodes: nodes, masters: cfg.Masters, replicas: cfg.Replicas}
}

// Nodes returns every node, masters first, in the order they were
// created; roles change with failovers, Topology tells the current ones.
func (c *DedicatedCluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs returns the host:port of every node, a client's seed list.
func (c *DedicatedCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// ClusterNode is one node as a cluster member sees it (CLUSTER NODES).
type ClusterNode struct {
	// Server is the harness' handle on the node.
	Server *Server
	// ID is the node's cluster id.
	ID string
	// Master is true for a master, false for a replica.
	Master bool
	// MasterID is a replica's master's ID, "" for a master.
	MasterID string
	// Failed is true when the viewing node flags it as failing ("fail"
	// or "fail?").
	Failed bool
	// Slots are the slot ranges a master serves.
	Slots []SlotRange
}

// SlotRange is an inclusive range of hash slots.
type SlotRange struct{ First, Last int }

// Serves reports whether the node serves slot.
func (n ClusterNode) Serves(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r.First && slot <= r.Last {
			return true
		}
	}
	return false
}

// Topology returns every node as the first running node sees it, in
// creation order. Views differ while a failover spreads; call WaitHealthy
// first for a settled answer.
func (c *DedicatedCluster) Topology(ctx context.Context) ([]ClusterNode, error) {
	var lastErr error = errors.New("no node is running")
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		view, err := clusterView(ctx, n, c.nodes)
		if err == nil {
			return view, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Masters returns the masters of Topology.
func (c *DedicatedCluster) Masters(ctx context.Context) ([]ClusterNode, error) {
	return c.filter(ctx, true)
}

// Replicas returns the replicas of Topology.
func (c *DedicatedCluster) Replicas(ctx context.Context) ([]ClusterNode, error) {
	return c.filter(ctx, false)
}

func (c *DedicatedCluster) filter(ctx context.Context, master bool) ([]ClusterNode, error) {
	view, err := c.Topology(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(view, func(n ClusterNode) bool { return n.Master != master }), nil
}

// MasterOf returns the master serving key's slot (see KeySlot).
func (c *DedicatedCluster) MasterOf(ctx context.Context, key string) (ClusterNode, error) {
	m, err := c.MasterOfSlot(ctx, KeySlot(key))
	if err != nil {
		return m, fmt.Errorf("%w (key %q)", err, key)
	}
	return m, nil
}

// MasterOfSlot returns the master serving slot, as Topology sees it.
func (c *DedicatedCluster) MasterOfSlot(ctx context.Context, slot int) (ClusterNode, error) {
	masters, err := c.Masters(ctx)
	if err != nil {
		return ClusterNode{}, err
	}
	for _, m := range masters {
		if m.Serves(slot) && !m.Failed {
			return m, nil
		}
	}
	return ClusterNode{}, fmt.Errorf("redistest: no live master serves slot %d", slot)
}

// KillMasterOf kills (SIGKILL) the master serving key's slot and returns
// it, for a later Start. Its replica takes over after about NodeTimeout
// plus one or two seconds; WaitHealthy waits for that.
func (c *DedicatedCluster) KillMasterOf(ctx context.Context, key string) (*Server, error) {
	m, err := c.MasterOf(ctx, key)
	if err != nil {
		return nil, err
	}
	return m.Server, m.Server.Kill()
}

// WaitHealthy waits until the running nodes form a healthy cluster: each
// says cluster_state:ok with all 16384 slots served, each sees every
// running node connected and none failing, no slot is served by a node
// that is down, all agree on the slot map, and every running replica's
// link to its master is up. Stopped nodes are left out, so it returns
// once a replica has replaced a killed master, and again once the master,
// restarted, has rejoined as a replica. Without a deadline in ctx it
// gives up after 30 s; its error then says what was still wrong.
func (c *DedicatedCluster) WaitHealthy(ctx context.Context) error {
	return waitCluster(ctx, c.nodes, nil)
}

// clusterShape is what a new cluster must look like before it is handed
// out.
type clusterShape struct{ masters, replicas int }

// startCluster starts the nodes in subdirectories of base, gives each
// master a distinct config epoch and its share of the slots, joins them
// with CLUSTER MEET, attaches the replicas, and waits for a healthy
// cluster of the right shape.
func startCluster(bin, base string, cfg ClusterConfig, dedicated bool) ([]*Server, error) {
	if cfg.Masters < 1 || cfg.Replicas < 0 || cfg.NodeTimeout <= 0 {
		return nil, fmt.Errorf("ClusterConfig: want Masters ≥ 1, Replicas ≥ 0 and a positive NodeTimeout, got %+v", cfg)
	}
	if cfg.Node.TLS {
		return nil, errors.New("ClusterConfig.Node.TLS: TLS is supported on standalone servers only")
	}
	total := cfg.Masters * (1 + cfg.Replicas)
	nodes := make([]*Server, 0, total)
	fail := func(err error) ([]*Server, error) {
		for _, n := range nodes {
			_ = n.close()
		}
		return nil, err
	}
	for i := range total {
		dir, err := os.MkdirTemp(base, fmt.Sprintf("node-%d-", i))
		if err != nil {
			return fail(err)
		}
		n, err := newServer(bin, dir, cfg.Node, &clusterNode{nodeTimeout: cfg.NodeTimeout, failoverTuning: dedicated})
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, n)
	}
	timeout := clusterTimeout + time.Duration(total)*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := assignSlots(ctx, nodes[:cfg.Masters]); err != nil {
		return fail(err)
	}
	for _, n := range nodes[1:] {
		if _, err := nodes[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port), strconv.Itoa(n.cluster.busPort)); err != nil {
			return fail(fmt.Errorf("CLUSTER MEET %s: %w", n.Addr(), err))
		}
	}
	for i, r := range nodes[cfg.Masters:] {
		if err := replicate(ctx, r, nodes[i/cfg.Replicas]); err != nil {
			return fail(err)
		}
	}
	if err := waitCluster(ctx, nodes, &clusterShape{cfg.Masters, cfg.Masters * cfg.Replicas}); err != nil {
		return fail(err)
	}
	return nodes, nil
}

// assignSlots splits the slots evenly between the masters. Distinct
// config epochs avoid the epoch-collision dance on first contact, as
// redis-cli --cluster create does.
func assignSlots(ctx context.Context, masters []*Server) error {
	per := clusterSlots / len(masters)
	for i, n := range masters {
		lo, hi := i*per, (i+1)*per-1
		if i == len(masters)-1 {
			hi = clusterSlots - 1
		}
		if _, err := n.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("node %s: CLUSTER SET-CONFIG-EPOCH: %w", n.Addr(), err)
		}
		if _, err := n.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("node %s: CLUSTER ADDSLOTSRANGE: %w", n.Addr(), err)
		}
	}
	return nil
}

// replicate makes r a replica of m, retrying while r does not know m yet
// (the MEET handshake is still under way).
func replicate(ctx context.Context, r, m *Server) error {
	v, err := m.Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		return fmt.Errorf("node %s: CLUSTER MYID: %w", m.Addr(), err)
	}
	id, _ := v.(string)
	for {
		_, err := r.Do(ctx, "CLUSTER", "REPLICATE", id)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: CLUSTER REPLICATE %s: %w", r.Addr(), m.Addr(), err)
		case <-time.After(4 * pollInterval):
		}
	}
}

// waitCluster polls clusterHealthy until it holds or ctx ends (30 s
// without a deadline).
func waitCluster(ctx context.Context, nodes []*Server, shape *clusterShape) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, clusterTimeout)
		defer cancel()
	}
	for {
		why := clusterHealthy(ctx, nodes, shape)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not healthy: %s (%w)", why, ctx.Err())
		case <-time.After(4 * pollInterval):
		}
	}
}

// clusterHealthy returns what keeps the running nodes from being a
// healthy cluster (and, with shape, one of that shape), or "" when
// nothing does.
func clusterHealthy(ctx context.Context, nodes []*Server, shape *clusterShape) string {
	running := map[*Server]bool{}
	for _, n := range nodes {
		if n.Running() {
			running[n] = true
		}
	}
	if len(running) == 0 {
		return "no node is running"
	}
	var firstMap string
	for _, n := range nodes {
		if !running[n] {
			continue
		}
		if why := nodeHealthy(ctx, n, nodes, running, shape); why != "" {
			return n.Addr() + ": " + why
		}
		v, err := n.Do(ctx, "CLUSTER", "SLOTS")
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER SLOTS: %v", n.Addr(), err)
		}
		m := slotMap(v)
		if firstMap == "" {
			firstMap = m
		} else if m != firstMap {
			return fmt.Sprintf("%s sees slots %s, another node %s", n.Addr(), m, firstMap)
		}
	}
	return ""
}

// nodeHealthy checks one running node's own view of the cluster.
func nodeHealthy(ctx context.Context, n *Server, nodes []*Server, running map[*Server]bool, shape *clusterShape) string {
	v, err := n.Do(ctx, "CLUSTER", "INFO")
	if err != nil {
		return "CLUSTER INFO: " + err.Error()
	}
	info, _ := v.(string)
	for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384"} {
		if !strings.Contains(info, want+"\r\n") {
			return "no " + want + " yet"
		}
	}
	view, err := clusterView(ctx, n, nodes)
	if err != nil {
		return err.Error()
	}
	seen := map[*Server]bool{}
	var masters, replicas int
	for _, m := range view {
		switch {
		case m.Server == nil:
			return "knows a node that is not the cluster's: " + m.ID
		case running[m.Server] && m.Failed:
			return "flags running node " + m.Server.Addr() + " as failing"
		case !running[m.Server] && len(m.Slots) > 0:
			return "slots still served by stopped node " + m.Server.Addr()
		case m.Master && len(m.Slots) > 0:
			masters++
		case !m.Master:
			replicas++
		}
		seen[m.Server] = true
		if m.Server == n && !m.Master {
			if why := replicaInSync(ctx, n); why != "" {
				return why
			}
		}
	}
	for r := range running {
		if !seen[r] {
			return "does not know running node " + r.Addr()
		}
	}
	if shape != nil && (masters != shape.masters || replicas != shape.replicas || len(view) != len(nodes)) {
		return fmt.Sprintf("sees %d masters with slots and %d replicas among %d nodes; want %d and %d among %d",
			masters, replicas, len(view), shape.masters, shape.replicas, len(nodes))
	}
	return ""
}

// replicaInSync checks that a replica's link to its master is up (the
// initial sync is done).
func replicaInSync(ctx context.Context, n *Server) string {
	v, err := n.Do(ctx, "INFO", "replication")
	if err != nil {
		return "INFO replication: " + err.Error()
	}
	info, _ := v.(string)
	if !strings.Contains(info, "master_link_status:up\r\n") {
		return "replica's link to its master is not up yet"
	}
	return ""
}

// clusterView parses n's CLUSTER NODES, mapping each node to its Server
// by port, in nodes' order; nodes still in the MEET handshake are left
// out. A node with link-state disconnected counts as failing.
func clusterView(ctx context.Context, n *Server, nodes []*Server) ([]ClusterNode, error) {
	v, err := n.Do(ctx, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr(), err)
	}
	text, _ := v.(string)
	byPort := map[int]*Server{}
	for _, s := range nodes {
		byPort[s.port] = s
	}
	var view []ClusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := strings.Split(f[2], ",")
		if slices.Contains(flags, "handshake") || slices.Contains(flags, "noaddr") {
			continue
		}
		cn := ClusterNode{
			ID:     f[0],
			Master: slices.Contains(flags, "master"),
			Failed: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?") ||
				(f[7] != "connected" && !slices.Contains(flags, "myself")),
		}
		if f[3] != "-" {
			cn.MasterID = f[3]
		}
		if port, err := nodePort(f[1]); err == nil {
			cn.Server = byPort[port]
		}
		for _, s := range f[8:] {
			if r, ok := parseSlots(s); ok {
				cn.Slots = append(cn.Slots, r)
			}
		}
		view = append(view, cn)
	}
	order := func(s *Server) int { return slices.Index(nodes, s) }
	slices.SortStableFunc(view, func(a, b ClusterNode) int { return order(a.Server) - order(b.Server) })
	return view, nil
}

// nodePort reads the client port of "ip:port@cport[,hostname]".
func nodePort(addr string) (int, error) {
	addr, _, _ = strings.Cut(addr, "@")
	i := strings.LastIndexByte(addr, ':')
	return strconv.Atoi(addr[i+1:])
}

// parseSlots reads "lo-hi" or "slot"; migration entries ("[...]") are not
// served slots.
func parseSlots(s string) (SlotRange, bool) {
	if strings.HasPrefix(s, "[") {
		return SlotRange{}, false
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil {
		return SlotRange{}, false
	}
	return SlotRange{a, b}, true
}

// slotMap renders a CLUSTER SLOTS reply as "lo-hi@port,..." sorted by lo.
func slotMap(v any) string {
	ranges, _ := v.([]any)
	parts := make([]string, 0, len(ranges))
	for _, r := range ranges {
		e, _ := r.([]any)
		if len(e) < 3 {
			continue
		}
		master, _ := e[2].([]any)
		if len(master) < 2 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%v-%v@%v", e[0], e[1], master[1]))
	}
	slices.SortFunc(parts, func(a, b string) int {
		return leadingInt(a) - leadingInt(b)
	})
	return strings.Join(parts, ",")
}

func leadingInt(s string) int {
	n, _ := strconv.Atoi(s[:strings.IndexByte(s, '-')])
	return n
}

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// the key, or of its hash tag (the text between the first "{" and the
// next "}", when not empty), modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}

package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// DefaultProbeTimeout bounds one probe of every node (and the memory
// check) when the caller's context has no deadline; a context with one is
// the only deadline, as for every store call. It is longer than a
// decision's budget: INFO is heavier than the script, and a probe that
// gives up too early would flap the health machine.
const DefaultProbeTimeout = time.Second

// Prober checks the health of a Store's Redis, node by node: the nodes
// that serve decisions, i.e. a standalone server, or each master of a
// cluster that owns slots (a replica serves no decision, and a node
// removed from the cluster owns none: neither is probed). It also says
// which node serves a key (NodeOf), from the slot map its last probe
// read, so that app.Limiter keeps one breaker per master
// (docs/adr/008-failure-classes-and-breaker.md). It is safe for
// simultaneous use.
type Prober struct {
	s    *Store
	topo atomic.Pointer[topology]
}

var _ ports.NodeProber = (*Prober)(nil)

// Prober returns the health check of s, sharing its connections. On a
// cluster it reads the slot map at once (within DefaultProbeTimeout), so
// that NodeOf can name the master of a key before the first probe. A
// store not connected yet has no node to name until a probe connects it:
// every probe of a store not connected first waits, within its deadline,
// for an attempt to connect (see New).
func (s *Store) Prober() *Prober {
	p := &Prober{s: s}
	if !s.live.Load() {
		return p
	}
	if s.client.Mode() != rueidis.ClientModeCluster {
		for addr := range s.client.Nodes() {
			p.topo.Store(&topology{single: addr})
		}
		return p
	}
	if !s.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultProbeTimeout)
		defer cancel()
		if t, err := p.readSlots(ctx); err == nil {
			p.topo.Store(t)
			s.learnSlots(t)
		}
	}
	return p
}

// NodeMemory is what INFO memory says of one node.
type NodeMemory struct {
	Addr string
	// UsedBytes is used_memory.
	UsedBytes int64
	// MaxBytes is maxmemory; 0 means no limit.
	MaxBytes int64
	// Policy is maxmemory_policy, e.g. "noeviction".
	Policy string
}

// Probe returns nil when every node that serves decisions answers (see
// ProbeNodes), and otherwise an error wrapping domain.ErrStoreUnavailable
// or domain.ErrStoreTimeout (or the caller's ctx.Err()).
func (p *Prober) Probe(ctx context.Context) error {
	probes, err := p.ProbeNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range probes {
		if n.Err != nil {
			return n.Err
		}
	}
	return nil
}

// Memory probes every node (PING, then INFO memory) and returns their
// memory figures, ordered by address. The error is the first node's
// failure, as Probe reports it.
func (p *Prober) Memory(ctx context.Context) ([]NodeMemory, error) {
	s := p.s
	if s.closed.Load() {
		return nil, domain.ErrStoreClosed
	}
	cctx, cancel, whose := probeDeadline(ctx)
	defer cancel()
	if err := s.connectWithin(cctx); err != nil {
		return nil, err
	}
	nodes := s.client.Nodes()
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no Redis node known", domain.ErrStoreUnavailable)
	}
	out := make([]NodeMemory, 0, len(nodes))
	var mu sync.Mutex
	var g errgroup.Group
	for addr, c := range nodes {
		g.Go(func() error {
			m, err := probeNode(cctx, addr, c)
			if err != nil {
				return fmt.Errorf("probing %s: %w", addr, s.mapErr(ctx, cctx, err, whose))
			}
			mu.Lock()
			out = append(out, m)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b NodeMemory) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

// probeDeadline is Store.deadline with DefaultProbeTimeout.
func probeDeadline(ctx context.Context) (context.Context, context.CancelFunc, string) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}, "the caller's deadline"
	}
	cctx, cancel := context.WithTimeout(ctx, DefaultProbeTimeout)
	return cctx, cancel, "the probe's own timeout of " + DefaultProbeTimeout.String()
}

func probeNode(ctx context.Context, addr string, c rueidis.Client) (NodeMemory, error) {
	m := NodeMemory{Addr: addr}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		return m, err
	}
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return m, err
	}
	fields := parseInfo(info)
	used, ok := fields["used_memory"]
	if !ok {
		return m, fmt.Errorf("INFO memory has no used_memory field")
	}
	if m.UsedBytes, err = strconv.ParseInt(used, 10, 64); err != nil {
		return m, fmt.Errorf("INFO memory: used_memory: %w", err)
	}
	// maxmemory and its policy are in INFO memory since Redis 4; a server
	// that hides them still counts as healthy.
	m.MaxBytes, _ = strconv.ParseInt(fields["maxmemory"], 10, 64)
	m.Policy = fields["maxmemory_policy"]
	return m, nil
}

// parseInfo reads the "field:value" lines of an INFO reply.
func parseInfo(info string) map[string]string {
	fields := make(map[string]string, 32)
	for line := range strings.Lines(info) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// MemoryReport is the boot check of Redis' memory configuration against the
// service's budget. It reports; it never fails the boot: a managed Redis
// may hide CONFIG, and the operator decides what a warning means.
type MemoryReport struct {
	// BudgetBytes is the budget checked against.
	BudgetBytes int64
	// Nodes holds each node's configuration, ordered by address.
	Nodes []NodeMaxMemory
	// Warnings says, in plain words for the application log, what is below
	// the budget, unreadable, or evicting.
	Warnings []string
}

// OK reports whether the check found nothing to warn about.
func (r MemoryReport) OK() bool { return len(r.Warnings) == 0 }

// NodeMaxMemory is one node's memory configuration.
type NodeMaxMemory struct {
	Addr string
	// MaxMemoryBytes is maxmemory; 0 means no limit.
	MaxMemoryBytes int64
	// Policy is maxmemory-policy, e.g. "noeviction".
	Policy string
	// Err is why the configuration could not be read; the other fields are
	// then zero.
	Err error
}

// CheckMaxMemory reads CONFIG GET maxmemory and maxmemory-policy on every
// node and warns when a limit is below budgetBytes, when it cannot be read,
// or when the policy evicts keys (rate-limit counters would then vanish
// under memory pressure and admit more than their limits).
//
// The error is non-nil only for a call that cannot be made at all: a
// negative budget or a closed store. An unreachable node is a warning.
func (s *Store) CheckMaxMemory(ctx context.Context, budgetBytes int64) (MemoryReport, error) {
	rep := MemoryReport{BudgetBytes: budgetBytes}
	if budgetBytes < 0 {
		return rep, &domain.ConfigError{Field: "redis.memory_budget", Reason: "must not be negative"}
	}
	if s.closed.Load() {
		return rep, domain.ErrStoreClosed
	}
	cctx, cancel, _ := probeDeadline(ctx)
	defer cancel()
	if err := s.connectWithin(cctx); err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("redis: maxmemory unread: %v", err))
		return rep, nil
	}
	nodes := s.client.Nodes()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for addr, c := range nodes {
		wg.Go(func() {
			n := NodeMaxMemory{Addr: addr}
			kv, err := c.Do(cctx, c.B().ConfigGet().Parameter("maxmemory", "maxmemory-policy").Build()).AsStrMap()
			if err == nil {
				n.MaxMemoryBytes, err = strconv.ParseInt(kv["maxmemory"], 10, 64)
				n.Policy = kv["maxmemory-policy"]
			}
			if err != nil {
				n = NodeMaxMemory{Addr: addr, Err: err}
			}
			mu.Lock()
			rep.Nodes = append(rep.Nodes, n)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(rep.Nodes, func(a, b NodeMaxMemory) int { return strings.Compare(a.Addr, b.Addr) })
	if len(rep.Nodes) == 0 {
		rep.Warnings = append(rep.Warnings, "redis: no node known; maxmemory unread")
	}
	for _, n := range rep.Nodes {
		switch {
		case n.Err != nil:
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("redis %s: maxmemory unreadable (CONFIG GET): %v", n.Addr, n.Err))
			continue
		case n.MaxMemoryBytes > 0 && n.MaxMemoryBytes < budgetBytes:
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("redis %s: maxmemory %d bytes is below the budget of %d bytes", n.Addr, n.MaxMemoryBytes, budgetBytes))
		}
		if n.Policy != "" && n.Policy != "noeviction" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("redis %s: maxmemory-policy %s may evict rate-limit keys under memory pressure, forgetting their counts", n.Addr, n.Policy))
		}
	}
	return rep, nil
}

// topology is the slot map as a probe read it.
type topology struct {
	// single names the one node of a standalone server; "" on a cluster.
	single string
	// ranges are the slot ranges of a cluster, by first slot.
	ranges []slotOwner
	// probeKeys holds, per master, a key in a slot it serves: a keyed
	// probe of it fails when the master cannot serve its slots
	// (CLUSTERDOWN), where PING would not.
	probeKeys map[string]string
}

// slotOwner is one range of slots and the master that serves it.
type slotOwner struct {
	first, last uint16
	node        string
}

// NodeOf names the node that serves key: the standalone server, or the
// master that owned key's slot when a probe last read the slot map; ""
// before any did. It does no I/O.
func (p *Prober) NodeOf(key string) string {
	t := p.topo.Load()
	switch {
	case t == nil:
		return ""
	case t.single != "":
		return t.single
	}
	slot := Slot(key)
	i, found := slices.BinarySearchFunc(t.ranges, slot, func(r slotOwner, s uint16) int { return cmp.Compare(r.first, s) })
	if !found {
		i--
	}
	if i >= 0 && slot <= t.ranges[i].last {
		return t.ranges[i].node
	}
	return ""
}

// ProbeNodes probes every node that serves decisions and returns each
// outcome, ordered by node. A standalone server gets PING and INFO
// memory; on a cluster, the slot map is read from whichever node answers
// first (CLUSTER SLOTS), then each master that owns slots gets a keyed
// read of a key in its slots (EXISTS, which a master that cannot serve
// them refuses) and INFO memory. err is non-nil only when no node gives
// the slot map: the store as a whole is then down. A master the client
// has not connected to yet is left out (no verdict), as is every replica.
func (p *Prober) ProbeNodes(ctx context.Context) ([]ports.NodeProbe, error) {
	s := p.s
	if s.closed.Load() {
		return nil, domain.ErrStoreClosed
	}
	cctx, cancel, whose := probeDeadline(ctx)
	defer cancel()
	if err := s.connectWithin(cctx); err != nil {
		return nil, err
	}
	nodes := s.client.Nodes()
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no Redis node known", domain.ErrStoreUnavailable)
	}
	if s.client.Mode() != rueidis.ClientModeCluster {
		// The probe waits behind the decisions sent before it on the
		// node's connection: its store time counts from the node's latest
		// answer, as theirs does (progress.go).
		ports.Dispatched(cctx, s.answersOf(""))
		var out []ports.NodeProbe
		for addr, c := range nodes {
			_, err := probeNode(cctx, addr, c)
			if err != nil {
				err = fmt.Errorf("probing %s: %w", addr, s.mapErr(ctx, cctx, err, whose))
			}
			out = append(out, ports.NodeProbe{Node: addr, Err: err})
			p.topo.Store(&topology{single: addr})
		}
		return out, nil
	}
	t, err := p.readSlots(cctx)
	if err != nil {
		return nil, fmt.Errorf("reading the slot map: %w", s.mapErr(ctx, cctx, err, whose))
	}
	p.topo.Store(t)
	s.learnSlots(t)
	out := make([]ports.NodeProbe, 0, len(t.probeKeys))
	// The probes wait behind the decisions sent before them on each
	// master's connection: the round's store time counts from the time
	// every master had answered (progress.go).
	waited := make(allAnswers, 0, len(t.probeKeys))
	for addr := range t.probeKeys {
		waited = append(waited, s.answersOf(addr))
	}
	ports.Dispatched(cctx, waited)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, key := range t.probeKeys {
		c, ok := nodes[addr]
		if !ok {
			continue
		}
		wg.Go(func() {
			err := probeMaster(cctx, addr, key, c)
			if err != nil {
				err = fmt.Errorf("probing %s: %w", addr, s.mapErr(ctx, cctx, err, whose))
			}
			mu.Lock()
			out = append(out, ports.NodeProbe{Node: addr, Err: err})
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b ports.NodeProbe) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// probeMaster reads a key of the master's slots, then INFO memory.
func probeMaster(ctx context.Context, addr, key string, c rueidis.Client) error {
	err := c.Do(ctx, c.B().Exists().Key(key).Build()).Error()
	if re, ok := rueidis.IsRedisErr(err); ok && isRedirection(re) {
		// The slot moved since the map was read: the node answered.
		err = nil
	}
	if err != nil {
		return err
	}
	_, err = probeNode(ctx, addr, c)
	return err
}

// readSlots asks every node for the slot map at once and keeps the first
// answer: a node that hangs (SIGSTOP, a black hole) delays nothing.
func (p *Prober) readSlots(ctx context.Context) (*topology, error) {
	nodes := p.s.client.Nodes()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		t   *topology
		err error
	}
	answers := make(chan answer, len(nodes))
	for _, c := range nodes {
		go func() {
			v, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
			if err != nil {
				answers <- answer{err: err}
				return
			}
			t, err := parseSlots(v)
			answers <- answer{t, err}
		}()
	}
	var errs []error
	for range nodes {
		a := <-answers
		if a.err == nil {
			return a.t, nil
		}
		errs = append(errs, a.err)
	}
	return nil, errors.Join(errs...)
}

// parseSlots reads a CLUSTER SLOTS reply: [first, last, [ip, port, id],
// replicas...] per range.
func parseSlots(v []rueidis.RedisMessage) (*topology, error) {
	t := &topology{probeKeys: map[string]string{}}
	for _, e := range v {
		r, err := e.ToArray()
		if err != nil || len(r) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range")
		}
		first, err1 := r[0].AsInt64()
		last, err2 := r[1].AsInt64()
		m, err3 := r[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(m) < 2 || first < 0 || last >= 16384 || first > last {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range")
		}
		host, _ := m[0].ToString()
		port, err := m[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed port: %w", err)
		}
		node := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		t.ranges = append(t.ranges, slotOwner{uint16(first), uint16(last), node})
	}
	slices.SortFunc(t.ranges, func(a, b slotOwner) int { return cmp.Compare(a.first, b.first) })
	for _, r := range t.ranges {
		if _, ok := t.probeKeys[r.node]; !ok {
			t.probeKeys[r.node] = keyInSlots(r.first, r.last)
		}
	}
	return t, nil
}

// keyInSlots returns a key, reserved to probes, whose slot is in
// [first, last]: a hash tag found by counting (a range of one slot takes
// about 16384 tries of a CRC16, a few milliseconds, once per slot map).
func keyInSlots(first, last uint16) string {
	for i := 0; ; i++ {
		key := domain.KeyPrefix + ":{__health__" + strconv.Itoa(i) + "}:probe"
		if s := Slot(key); s >= first && s <= last {
			return key
		}
	}
}

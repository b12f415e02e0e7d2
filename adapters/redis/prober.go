package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Prober checks the health of a Store's Redis: PING and INFO memory on
// every node the client knows (one for a standalone server, each node of a
// cluster, since a single unreachable master makes its slots unavailable).
// It is safe for simultaneous use.
type Prober struct {
	s *Store
}

var _ ports.Prober = (*Prober)(nil)

// Prober returns the health check of s, sharing its connections.
func (s *Store) Prober() *Prober { return &Prober{s: s} }

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

// Probe returns nil when every node answers PING and INFO memory, and
// otherwise an error wrapping domain.ErrStoreUnavailable or
// domain.ErrStoreTimeout (or the caller's ctx.Err()).
func (p *Prober) Probe(ctx context.Context) error {
	_, err := p.Memory(ctx)
	return err
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

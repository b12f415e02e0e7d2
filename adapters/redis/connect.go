package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"runtime"
	"strings"
	"sync"

	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/domain"
)

// ErrScriptMismatch is wrapped by the error of LoadScript (and New) when a
// node names the loaded script by another SHA1 than the one the store
// sends with EVALSHA: a server that does not hash scripts as Redis does,
// on which every decision would pay for a NOSCRIPT round trip.
var ErrScriptMismatch = errors.New("sluice redis: the server names the script by another SHA1")

// connect builds the rueidis client cfg describes, counting the
// connections it dials.
func connect(cfg Config, tune []func(*rueidis.ClientOption)) (rueidis.Client, *dialCounter, error) {
	copt, err := cfg.clientOption()
	if err != nil {
		return nil, nil, err
	}
	for _, f := range tune {
		f(&copt)
	}
	dials := newDialCounter(&copt)
	client, err := rueidis.NewClient(copt)
	if err != nil && authRefused(err) {
		// Not an outage to boot through: the credentials are wrong.
		if client != nil {
			client.Close()
		}
		return nil, nil, &domain.ConfigError{Field: "redis.url", Reason: "the server refused the credentials",
			Err: fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, err)}
	}
	if err != nil && !(cfg.Mode == ModeStandalone && client != nil) {
		if client != nil {
			client.Close()
		}
		return nil, nil, fmt.Errorf("%w: connecting to %v: %w", domain.ErrStoreUnavailable, copt.InitAddress, err)
	}
	if cfg.Mode == ModeCluster && client.Mode() != rueidis.ClientModeCluster {
		client.Close()
		return nil, nil, &domain.ConfigError{Field: "redis.mode", Reason: "cluster required, but the server is " + string(client.Mode())}
	}
	dials.cluster = client.Mode() == rueidis.ClientModeCluster
	return client, dials, nil
}

// authRefused reports whether err is the server refusing the client's
// credentials or their rights (WRONGPASS, NOAUTH, NOPERM). Such replies
// name no password.
func authRefused(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM")
}

// dialCounter wraps the client's dialer and counts, per node address, the
// connections it opened, so that New can tell when every pipelined
// connection of every node is up.
type dialCounter struct {
	next      func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error)
	multiplex int  // ClientOption.PipelineMultiplex
	cluster   bool // set once the client's mode is known

	mu sync.Mutex
	n  map[string]int
}

// newDialCounter installs a counting dialer in opt, around the one opt
// already names.
func newDialCounter(opt *rueidis.ClientOption) *dialCounter {
	d := &dialCounter{next: opt.DialCtxFn, multiplex: opt.PipelineMultiplex, n: map[string]int{}}
	if d.next == nil && opt.DialFn != nil {
		dialFn := opt.DialFn
		d.next = func(_ context.Context, dst string, nd *net.Dialer, tc *tls.Config) (net.Conn, error) {
			return dialFn(dst, nd, tc)
		}
	}
	opt.DialCtxFn = d.dial
	return d
}

func (d *dialCounter) dial(ctx context.Context, dst string, nd *net.Dialer, tc *tls.Config) (c net.Conn, err error) {
	switch {
	case d.next != nil:
		c, err = d.next(ctx, dst, nd, tc)
	case tc != nil:
		c, err = (&tls.Dialer{NetDialer: nd, Config: tc}).DialContext(ctx, "tcp", dst)
	default:
		c, err = nd.DialContext(ctx, "tcp", dst)
	}
	if err == nil {
		d.mu.Lock()
		d.n[dst]++
		d.mu.Unlock()
	}
	return c, err
}

// dialled returns how many connections to addr were opened so far.
func (d *dialCounter) dialled(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[addr]
}

// wiresPerNode is how many pipelined connections rueidis keeps to each
// node: 2^PipelineMultiplex, where 0 means, for a single server, log2 of
// GOMAXPROCS capped at 2 (rueidis' default) and, for a cluster, one.
func (d *dialCounter) wiresPerNode() int {
	m := d.multiplex
	if m == 0 && !d.cluster {
		m = min(bits.Len(uint(runtime.GOMAXPROCS(0)))-1, 2)
	}
	if m < 0 {
		return 1
	}
	return 1 << m
}

// warmRounds bounds the rounds of warm-up commands sent to one node.
// rueidis gives each keyed command one of a node's connections at random
// and dials it on first use; a round sends 8 commands per connection, so
// one round misses a given connection with probability about e⁻⁸.
const warmRounds = 8

// warm dials every pipelined connection of every node and loads the
// script on each, within ctx. dials is nil for a client the caller built
// (WithClient): one round is then sent per node, with nothing to count.
// The error wraps domain.ErrStoreUnavailable or domain.ErrStoreTimeout
// for a node that could not answer, ErrScriptMismatch for a script named
// otherwise.
func (s *Store) warm(ctx context.Context, dials *dialCounter) error {
	nodes := s.client.Nodes()
	if len(nodes) == 0 {
		return fmt.Errorf("%w: no Redis node known", domain.ErrStoreUnavailable)
	}
	var g errgroup.Group
	for addr, node := range nodes {
		g.Go(func() error { return s.warmNode(ctx, addr, node, dials) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return s.LoadScript(ctx)
}

// warmNode sends keyed PINGs to one node until every one of its pipelined
// connections is dialled (PING with an argument is harmless and, carrying
// a key, is spread over the connections like the script's EVALSHA).
func (s *Store) warmNode(ctx context.Context, addr string, node rueidis.Client, dials *dialCounter) error {
	wires, rounds := 4, 1
	if dials != nil {
		wires, rounds = dials.wiresPerNode(), warmRounds
	}
	for range rounds {
		if dials != nil && dials.dialled(addr) >= wires {
			return nil
		}
		var g errgroup.Group
		for range 8 * wires {
			g.Go(func() error {
				return node.Do(ctx, node.B().Arbitrary("PING").Keys("sluice-warm-up").Build()).Error()
			})
		}
		if err := g.Wait(); err != nil {
			return fmt.Errorf("warming up %s: %w", addr, s.mapErr(ctx, ctx, err, "New's DialTimeout"))
		}
	}
	// Every PING answered: a connection still missing is one rueidis did
	// not open (a PipelineMultiplex rule other than ours), not an outage.
	return nil
}

// isOutage reports whether err, from warm, is only about nodes that could
// not answer.
func isOutage(err error) bool {
	return !errors.Is(err, ErrScriptMismatch) &&
		(errors.Is(err, domain.ErrStoreUnavailable) || errors.Is(err, domain.ErrStoreTimeout))
}

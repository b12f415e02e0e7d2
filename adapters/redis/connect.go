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
	"time"

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
// connections it dials; a dial gives up when stop is done (Close).
func connect(cfg Config, tune []func(*rueidis.ClientOption), stop context.Context) (rueidis.Client, *dialCounter, error) {
	copt, err := cfg.clientOption()
	if err != nil {
		return nil, nil, err
	}
	for _, f := range tune {
		f(&copt)
	}
	dials := newDialCounter(&copt)
	dials.stop = stop
	client, err := rueidis.NewClient(copt)
	if err != nil && authRefused(err) {
		// Not an outage to boot through: the credentials are wrong.
		if client != nil {
			client.Close()
		}
		return nil, nil, &domain.ConfigError{Field: "redis.url", Reason: "the server refused the credentials",
			Err: fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, err)}
	}
	if err != nil {
		// rueidis returns a client that would dial again by itself
		// (ModeStandalone): the store dials again itself instead, so that
		// no call waits for a dial (see below).
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
	multiplex int             // ClientOption.PipelineMultiplex
	cluster   bool            // set once the client's mode is known
	stop      context.Context // done when the store closes; nil: never

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
	if d.stop != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(d.stop, cancel)()
	}
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

// warm dials every pipelined connection of every node of client and
// loads the script on each, within ctx. dials is nil for a client the
// caller built (WithClient): one round is then sent per node, with
// nothing to count. The error wraps domain.ErrStoreUnavailable or
// domain.ErrStoreTimeout for a node that could not answer,
// ErrScriptMismatch for a script named otherwise.
func (s *Store) warm(ctx context.Context, client rueidis.Client, dials *dialCounter) error {
	nodes := client.Nodes()
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
	return s.loadScript(ctx, client)
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

// isOutage reports whether err, from connect or warm, is only about
// nodes that could not answer: not a refusal of the credentials, a mode
// the server does not have, or a script named otherwise.
func isOutage(err error) bool {
	return !errors.Is(err, ErrScriptMismatch) && !errors.Is(err, domain.ErrInvalidConfig) &&
		(errors.Is(err, domain.ErrStoreUnavailable) || errors.Is(err, domain.ErrStoreTimeout))
}

// Connecting later. New connects at once when a node answers. When none
// does (an outage, or a service started before its Redis), New returns
// the store all the same, unconnected: every call fails at once with an
// error wrapping domain.ErrStoreUnavailable, never waiting for a dial,
// and the store connects in the background, one attempt at a time: at
// every probe (the Prober's methods, which the Limiter's health loop
// calls at its recovery interval) and, at most every redialAfter, at a
// call. An attempt is New's work redone: dial, find the mode (ModeAuto
// asks the node, so a cluster that comes up is found as one), dial every
// pipelined connection, load the script. Its outcome is published once:
// client, cluster and batchers are written, then live is set, under
// redialer.mu; every reader loads live first (admit, Reset, the
// Prober...), so a connected store's hot path pays one atomic load and
// takes no lock.

// redialAfter spaces the attempts that calls start (probes start theirs
// at once): an attempt against a refused port costs a few system calls,
// against a black hole one goroutine for Config.DialTimeout.
const redialAfter = 250 * time.Millisecond

// redialer is the state of connecting a store that is not connected yet.
type redialer struct {
	cfg  Config
	tune []func(*rueidis.ClientOption)
	// stop is done at Close: an attempt in flight gives up its dials.
	stop   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	attempt chan struct{} // closed when the attempt in flight ends; nil without one
	err     error         // why the last attempt failed; nil before the first ends
	callErr error         // what a call answers meanwhile
	ended   time.Time     // when the last attempt ended
}

func newRedialer(cfg Config, tune []func(*rueidis.ClientOption)) *redialer {
	r := &redialer{cfg: cfg, tune: tune}
	r.stop, r.cancel = context.WithCancel(context.Background())
	r.callErr = fmt.Errorf("%w: not connected to Redis yet", domain.ErrStoreUnavailable)
	return r
}

// startAttempt returns the channel closed when the store's attempt to
// connect ends, starting one unless one is in flight, or unless calls
// asks it and the last ended less than redialAfter ago (done is then
// nil). err is what a call answers now: nil once connected.
func (s *Store) startAttempt(calls bool) (done <-chan struct{}, err error) {
	r := s.redial
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case s.closed.Load():
		return nil, domain.ErrStoreClosed
	case s.live.Load():
		return nil, nil
	case r.attempt == nil && !(calls && time.Since(r.ended) < redialAfter):
		r.attempt = make(chan struct{})
		go s.runAttempt(r.attempt)
	}
	return r.attempt, r.callErr
}

// runAttempt connects within Config.DialTimeout and publishes the client,
// or keeps why it could not.
func (s *Store) runAttempt(done chan struct{}) {
	r := s.redial
	ctx, cancel := context.WithTimeout(r.stop, r.cfg.dialTimeout())
	defer cancel()
	client, dials, err := connect(r.cfg, r.tune, r.stop)
	if err == nil {
		if err = s.warm(ctx, client, dials); err != nil {
			client.Close()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil && s.closed.Load():
		client.Close()
		err = domain.ErrStoreClosed
	case err == nil:
		s.client = client
		s.cluster = client.Mode() == rueidis.ClientModeCluster
		s.makeBatchers()
		s.live.Store(true)
	default:
		r.callErr = fmt.Errorf("%w: not connected to Redis yet (last attempt: %v)", domain.ErrStoreUnavailable, err)
	}
	r.err, r.ended, r.attempt = err, time.Now(), nil
	close(done)
}

// notLive is what a call answers while the store is not connected; it
// starts an attempt in the background when none ran for redialAfter.
func (s *Store) notLive() error {
	if _, err := s.startAttempt(true); err != nil {
		return err
	}
	// Connected since the caller looked: this call fails as one made a
	// moment earlier would.
	return fmt.Errorf("%w: not connected to Redis when the call began", domain.ErrStoreUnavailable)
}

// connectWithin waits, within ctx, for the store to be connected,
// starting an attempt unless one is in flight. An attempt outlives ctx:
// a probe with a short deadline leaves it to finish, and the next probe
// finds the store connected. It returns nil once connected.
func (s *Store) connectWithin(ctx context.Context) error {
	if s.live.Load() {
		return nil
	}
	done, err := s.startAttempt(false)
	if done == nil {
		return err // closed, or connected meanwhile
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: not connected to Redis yet: connecting goes on", domain.ErrStoreUnavailable)
	}
	return s.Ready()
}

// Ready returns nil once the store is connected to Redis; before, the
// error of its last attempt to connect (wrapping
// domain.ErrStoreUnavailable or domain.ErrStoreTimeout for nodes that
// did not answer, *domain.ConfigError for credentials the server refused
// or a mode it does not have, ErrScriptMismatch), or, while the first
// attempt after New runs, domain.ErrStoreUnavailable; after Close,
// domain.ErrStoreClosed. It does no I/O. New returns an unconnected store
// only when no node answered: see New.
func (s *Store) Ready() error {
	switch {
	case s.closed.Load():
		return domain.ErrStoreClosed
	case s.live.Load():
		return nil
	}
	s.redial.mu.Lock()
	defer s.redial.mu.Unlock()
	if s.live.Load() {
		return nil
	}
	if r := s.redial; r.err != nil {
		return r.err
	}
	return s.redial.callErr
}

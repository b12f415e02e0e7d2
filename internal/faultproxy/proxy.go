// Package faultproxy is a TCP proxy for tests that puts faults between a
// client and a server (Redis, in sluice's drills) while they talk: a
// delay on each request or reply, a black hole that accepts and reads but
// never answers, replies cut in the middle, dropped connections. The
// faults change at any time, with Inject and Heal, and apply at once to
// every connection, open or new.
//
//	srv := redistest.NewServer(t)
//	p := faultproxy.New(t, srv.Addr())            // clients dial p.Addr()
//	p.Inject(faultproxy.Fault{ReplyDelay: 80 * time.Millisecond}) // slower than the 50 ms deadline
//	p.Inject(faultproxy.Fault{Mode: faultproxy.BlackHole})        // Redis hangs
//	p.Inject(faultproxy.Fault{Mode: faultproxy.CutReplies})       // replies cut in half
//	p.Heal()                                      // pass-through again
//
// The proxy never loses, duplicates or reorders bytes on a connection it
// keeps open: a delay holds them, a black hole holds them until it is
// healed (like a network partition, which TCP rides out), and only
// CutReplies and DropConns discard data, by closing the connection. A
// Redis Cluster client learns the nodes' own addresses from the cluster
// and bypasses a proxy, so the proxy serves standalone servers.
//
// Close closes the listener and every connection the proxy opened, and
// returns once all its goroutines have ended.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// Mode is what the proxy does with the bytes it reads, beyond delays.
type Mode int

const (
	// PassThrough forwards everything, after the Fault's delays.
	PassThrough Mode = iota
	// BlackHole accepts connections and reads from clients but forwards
	// nothing either way: requests and replies are held (new connections
	// do not even reach the server) until the mode changes, and then
	// flow in order.
	BlackHole
	// CutReplies forwards, on each connection, the first half of the next
	// chunk of reply bytes (what one read from the server returned), then
	// closes the connection: the client sees a reply cut in the middle
	// and a closed connection.
	CutReplies
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case PassThrough:
		return "PassThrough"
	case BlackHole:
		return "BlackHole"
	case CutReplies:
		return "CutReplies"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Fault is how the proxy treats traffic. The zero value passes it
// through untouched.
type Fault struct {
	// RequestDelay holds each chunk of request bytes this long after the
	// proxy read it, before forwarding it to the server.
	RequestDelay time.Duration
	// ReplyDelay holds each chunk of reply bytes this long after the
	// proxy read it, before forwarding it to the client. Delays add
	// latency, not a throughput cap: pipelined requests are each delayed
	// once, not one after the other.
	ReplyDelay time.Duration
	// Mode is PassThrough, BlackHole or CutReplies.
	Mode Mode
}

// Proxy is a running fault-injecting proxy. Its methods are safe for
// simultaneous use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // every goroutine of the proxy

	mu      sync.Mutex
	fault   Fault
	changed chan struct{} // closed and replaced by every Inject
	links   map[*link]struct{}
	closed  bool
}

// Listen starts a proxy on a free loopback port that forwards to target
// (host:port). Close stops it.
func Listen(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// New starts a proxy to target for one test (see Listen) and closes it on
// t.Cleanup; it fails the test if the proxy cannot start.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the host:port clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Inject replaces the current fault. It applies at once to the bytes the
// proxy holds as well as to those still to come: lowering a delay
// releases what has waited long enough, leaving BlackHole releases
// everything held.
func (p *Proxy) Inject(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
}

// Heal returns to pass-through: Inject(Fault{}).
func (p *Proxy) Heal() { p.Inject(Fault{}) }

// Current returns the fault in force.
func (p *Proxy) Current() Fault {
	f, _ := p.state()
	return f
}

func (p *Proxy) state() (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed
}

// Conns returns the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// DropConns closes every open connection, both sides, as a network blip
// or a restarting server would; new connections are accepted as before.
func (p *Proxy) DropConns() {
	for _, l := range p.snapshot() {
		l.teardown()
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end. Closing a closed proxy returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropConns()
	p.wg.Wait()
	return err
}

func (p *Proxy) snapshot() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	return ls
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors, say: try again shortly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.open(c)
	}
}

// open registers a link for client c and starts its request side; the
// reply side starts once the server is dialled.
func (p *Proxy) open(c net.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{p: p, client: c, ctx: ctx, cancel: cancel, requests: make(chan chunk, queueLen)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		cancel()
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(2)
	go l.read(c, l.requests)
	go l.forwardRequests()
}

package faultproxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// Buffering per direction of a link: up to queueLen chunks of at most
// chunkSize bytes are held; beyond that the proxy stops reading and TCP
// pushes back on the sender, as a slow network would.
const (
	queueLen  = 16
	chunkSize = 32 << 10
)

// chunk is what one read returned, and when.
type chunk struct {
	b  []byte
	at time.Time
}

// link is one client connection and, once dialled, its server
// connection. Four goroutines serve it: a reader and a forwarder per
// direction.
type link struct {
	p        *Proxy
	client   net.Conn
	ctx      context.Context // cancelled by teardown
	cancel   context.CancelFunc
	requests chan chunk

	mu       sync.Mutex
	upstream net.Conn // nil until dialled
	down     bool
}

// read moves what conn delivers into q, until conn fails or the link is
// torn down; closing q tells the forwarder the stream has ended.
func (l *link) read(conn net.Conn, q chan<- chunk) {
	defer l.p.wg.Done()
	defer close(q)
	buf := make([]byte, chunkSize)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			c := chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
			select {
			case q <- c:
			case <-l.ctx.Done():
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forwardRequests sends the client's bytes to the server, dialling it
// on the first bytes released (a black hole never dials). When the
// client has finished sending, it half-closes the server connection so
// that the server still answers what it was sent.
func (l *link) forwardRequests() {
	defer l.p.wg.Done()
	var up net.Conn
	for c := range l.requests {
		if _, ok := l.await(c, func(f Fault) time.Duration { return f.RequestDelay }); !ok {
			return
		}
		if up == nil {
			if up = l.dial(); up == nil {
				l.teardown()
				return
			}
		}
		if _, err := up.Write(c.b); err != nil {
			l.teardown()
			return
		}
	}
	if tcp, ok := up.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
		return
	}
	l.teardown()
}

// dial connects to the target and starts the reply side; it returns nil
// if that fails or the link is down.
func (l *link) dial() net.Conn {
	var d net.Dialer
	up, err := d.DialContext(l.ctx, "tcp", l.p.target)
	if err != nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		_ = up.Close()
		return nil
	}
	l.upstream = up
	replies := make(chan chunk, queueLen)
	l.p.wg.Add(2)
	go l.read(up, replies)
	go l.forwardReplies(replies)
	return up
}

// forwardReplies sends the server's bytes to the client; the link ends
// with the server's stream.
func (l *link) forwardReplies(replies <-chan chunk) {
	defer l.p.wg.Done()
	defer l.teardown()
	for c := range replies {
		f, ok := l.await(c, func(f Fault) time.Duration { return f.ReplyDelay })
		if !ok {
			return
		}
		if f.Mode == CutReplies {
			_, _ = l.client.Write(c.b[:len(c.b)/2])
			return
		}
		if _, err := l.client.Write(c.b); err != nil {
			return
		}
	}
}

// await blocks until c may go out under the fault in force: its delay,
// counted from when it was read, has passed and no black hole holds it.
// A change of fault is seen at once. It returns the fault that released
// c, or false when the link was torn down first.
func (l *link) await(c chunk, delay func(Fault) time.Duration) (Fault, bool) {
	for {
		f, changed := l.p.state()
		var timer *time.Timer
		var fire <-chan time.Time
		if f.Mode != BlackHole {
			wait := time.Until(c.at.Add(delay(f)))
			if wait <= 0 {
				return f, true
			}
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-fire:
		case <-changed:
		case <-l.ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return f, false
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// teardown closes both connections and forgets the link; it is
// idempotent. Readers fail on their closed connection and forwarders see
// the cancelled context, so every goroutine of the link ends.
func (l *link) teardown() {
	l.mu.Lock()
	if l.down {
		l.mu.Unlock()
		return
	}
	l.down = true
	up := l.upstream
	l.mu.Unlock()
	l.cancel()
	_ = l.client.Close()
	if up != nil {
		_ = up.Close()
	}
	l.p.mu.Lock()
	delete(l.p.links, l)
	l.p.mu.Unlock()
}

package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The harness spawns servers from one goroutine locked to its thread for
// the life of the binary (the parent-death signal needs it), and reaps
// each server process from a goroutine of its own.
var ignoreHarness = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.startProcess.func1.1"),
	goleak.IgnoreAnyFunction("github.com/sluicehq/sluice/internal/redistest.(*Server).spawn.func1"),
}

func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if code == 0 {
		if err := goleak.Find(ignoreHarness...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// noLeak checks, at the end of the test, that every goroutine it started
// has ended, but those opts ignore.
func noLeak(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	opts = append(opts, goleak.IgnoreCurrent())
	opts = append(opts, ignoreHarness...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// setup returns a dedicated server, so that the tests may look at its
// clients, and a proxy to it.
func setup(t *testing.T, ignore ...goleak.Option) (*redistest.Server, *faultproxy.Proxy) {
	t.Helper()
	srv := redistest.NewServer(t)
	noLeak(t, ignore...)
	p, err := faultproxy.Listen(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return srv, p
}

const ping = "*1\r\n$4\r\nPING\r\n"

// conn is a raw client connection through the proxy.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &conn{c, bufio.NewReader(c)}
}

func (c *conn) send(t *testing.T, cmd string) {
	t.Helper()
	_, err := io.WriteString(c, cmd)
	require.NoError(t, err)
}

// line reads one reply line, waiting at most d.
func (c *conn) line(d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	return c.r.ReadString('\n')
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closed reports whether err says the peer closed the connection: EOF,
// or a reset when it closed with bytes of ours still unread.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func newClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableRetry: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestPassThrough(t *testing.T) {
	srv, p := setup(t)
	ctx := t.Context()
	assert.Equal(t, srv.Addr(), p.Target())
	assert.Equal(t, faultproxy.Fault{}, p.Current())
	c := newClient(t, p.Addr())
	big := strings.Repeat("x", 1<<20) // larger than a chunk: many reads each way
	require.NoError(t, c.Do(ctx, c.B().Set().Key("k").Value(big).Build()).Error())
	got, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, big, got)
	assert.GreaterOrEqual(t, p.Conns(), 1)
}

func TestReplyDelay(t *testing.T) {
	_, p := setup(t)
	c := dial(t, p.Addr())
	c.send(t, ping)
	line, err := c.line(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)

	const delay = 300 * time.Millisecond
	p.Inject(faultproxy.Fault{ReplyDelay: delay})
	start := time.Now()
	c.send(t, ping)
	// The reply is held for 300 ms: a 100 ms deadline always passes first.
	_, err = c.line(100 * time.Millisecond)
	require.True(t, isTimeout(err), "reply within 100 ms despite a 300 ms delay: %v", err)
	line, err = c.line(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)
	assert.GreaterOrEqual(t, time.Since(start), delay, "the reply came before its delay")
}

func TestLoweringDelayReleasesHeldReplies(t *testing.T) {
	_, p := setup(t)
	p.Inject(faultproxy.Fault{ReplyDelay: time.Hour})
	c := dial(t, p.Addr())
	c.send(t, ping)
	_, err := c.line(100 * time.Millisecond)
	require.True(t, isTimeout(err), "%v", err)
	p.Inject(faultproxy.Fault{ReplyDelay: 0})
	line, err := c.line(10 * time.Second)
	require.NoError(t, err, "a reply held for an hour is released when the delay drops")
	assert.Equal(t, "+PONG\r\n", line)
}

func TestRequestDelay(t *testing.T) {
	srv, p := setup(t)
	ctx := t.Context()
	p.Inject(faultproxy.Fault{RequestDelay: time.Hour})
	c := dial(t, p.Addr())
	c.send(t, "*3\r\n$3\r\nSET\r\n$2\r\nrq\r\n$1\r\n1\r\n")
	_, err := c.line(100 * time.Millisecond)
	require.True(t, isTimeout(err), "%v", err)
	v, err := srv.Do(ctx, "GET", "rq")
	require.NoError(t, err)
	require.Nil(t, v, "the request reached the server despite its delay")
	p.Heal()
	line, err := c.line(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+OK\r\n", line)
	v, err = srv.Do(ctx, "GET", "rq")
	require.NoError(t, err)
	assert.Equal(t, "1", v)
}

// A delay counts from when the proxy read the bytes, so pipelined
// replies are each delayed once, not one after the other: latency, not a
// throughput cap.
func TestDelayCountsFromRead(t *testing.T) {
	_, p := setup(t)
	const n, delay = 20, 300 * time.Millisecond
	p.Inject(faultproxy.Fault{ReplyDelay: time.Hour})
	c := dial(t, p.Addr())
	for range n {
		c.send(t, ping)
		time.Sleep(2 * time.Millisecond) // separate reads on the proxy's side
	}
	time.Sleep(delay) // every reply is now older than the delay
	p.Inject(faultproxy.Fault{ReplyDelay: delay})
	// Every reply is due: none waits. Delays applied one after the other
	// would take n × 300 ms = 6 s, past the deadline.
	_ = c.SetReadDeadline(time.Now().Add(n * delay / 2))
	for i := range n {
		line, err := c.r.ReadString('\n')
		require.NoError(t, err, "reply %d", i)
		require.Equal(t, "+PONG\r\n", line)
	}
}

func TestBlackHole(t *testing.T) {
	srv, p := setup(t)
	ctx := t.Context()
	p.Inject(faultproxy.Fault{Mode: faultproxy.BlackHole})
	c := dial(t, p.Addr())
	c.send(t, "*3\r\n$3\r\nSET\r\n$2\r\nbh\r\n$1\r\n1\r\n")
	_, err := c.line(200 * time.Millisecond)
	require.True(t, isTimeout(err), "a black hole answered: %v", err)
	v, err := srv.Do(ctx, "GET", "bh")
	require.NoError(t, err)
	require.Nil(t, v, "the black hole forwarded the request")
	// Nothing reached the server: no client but the harness' own.
	clients, err := srv.Do(ctx, "CLIENT", "LIST")
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(clients.(string), "\n"), "clients: %s", clients)
	assert.Equal(t, 1, p.Conns())

	p.Heal()
	line, err := c.line(10 * time.Second)
	require.NoError(t, err, "held bytes flow once the black hole heals")
	assert.Equal(t, "+OK\r\n", line)
}

func TestBlackHoleHoldsReplies(t *testing.T) {
	_, p := setup(t)
	c := dial(t, p.Addr())
	c.send(t, ping)
	line, err := c.line(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)
	// The server answers while the hole is open (DEBUG SLEEP delays the
	// reply past the Inject); the reply is held, not lost.
	c.send(t, "*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$3\r\n0.2\r\n")
	p.Inject(faultproxy.Fault{Mode: faultproxy.BlackHole})
	_, err = c.line(600 * time.Millisecond)
	require.True(t, isTimeout(err), "%v", err)
	p.Heal()
	line, err = c.line(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+OK\r\n", line)
}

func TestCutReplies(t *testing.T) {
	// rueidis retries a failed connection after a pause, in a goroutine
	// of its own that ends by itself.
	srv, p := setup(t, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
	ctx := t.Context()
	val := strings.Repeat("v", 1000)
	_, err := srv.Do(ctx, "SET", "cut", val)
	require.NoError(t, err)
	full := fmt.Sprintf("$%d\r\n%s\r\n", len(val), val)

	p.Inject(faultproxy.Fault{Mode: faultproxy.CutReplies})
	c := dial(t, p.Addr())
	c.send(t, "*2\r\n$3\r\nGET\r\n$3\r\ncut\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c.r)
	require.NoError(t, err, "the connection closes after the cut (EOF)")
	assert.NotEmpty(t, got, "a part of the reply arrives")
	assert.Less(t, len(got), len(full), "the whole reply arrived")
	assert.True(t, strings.HasPrefix(full, string(got)), "what arrives is the reply's beginning")

	// A real client sees an error, never a wrong value.
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true, DisableRetry: true})
	if err == nil {
		_, err = cl.Do(ctx, cl.B().Get().Key("cut").Build()).ToString()
		cl.Close()
	}
	require.Error(t, err)

	p.Heal()
	c2 := newClient(t, p.Addr())
	v, err := c2.Do(ctx, c2.B().Get().Key("cut").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, val, v)
}

func TestDropConns(t *testing.T) {
	_, p := setup(t)
	c := dial(t, p.Addr())
	c.send(t, ping)
	_, err := c.line(5 * time.Second)
	require.NoError(t, err)
	waitFor(t, func() bool { return p.Conns() == 1 })
	p.DropConns()
	_, err = c.line(5 * time.Second)
	require.True(t, closed(err), "%v", err)
	assert.Equal(t, 0, p.Conns())
	c2 := dial(t, p.Addr())
	c2.send(t, ping)
	line, err := c2.line(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)
}

func TestCloseClosesEverything(t *testing.T) {
	srv := redistest.NewServer(t)
	noLeak(t)
	p, err := faultproxy.Listen(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	// Connections in every state: idle after a reply, with a reply held,
	// with a request held, never dialled through.
	var conns []*conn
	for _, f := range []faultproxy.Fault{
		{},
		{ReplyDelay: time.Hour},
		{ReplyDelay: time.Hour, RequestDelay: time.Hour},
		{ReplyDelay: time.Hour, RequestDelay: time.Hour, Mode: faultproxy.BlackHole},
	} {
		p.Inject(f)
		c := dial(t, p.Addr())
		c.send(t, ping)
		conns = append(conns, c)
		if f == (faultproxy.Fault{}) {
			_, err = c.line(5 * time.Second)
			require.NoError(t, err)
		}
	}
	// A dial returns before the proxy's Accept does.
	waitFor(t, func() bool { return p.Conns() == 4 })

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "second Close")
	assert.Equal(t, 0, p.Conns())
	for i, c := range conns {
		_, err := c.line(5 * time.Second)
		assert.True(t, closed(err), "connection %d: %v; want it closed", i, err)
	}
	_, err = net.Dial("tcp", p.Addr())
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial after Close: %v", err)
}

func TestServerDown(t *testing.T) {
	srv, p := setup(t)
	require.NoError(t, srv.Kill())
	c := dial(t, p.Addr())
	c.send(t, ping)
	_, err := c.line(5 * time.Second)
	require.True(t, closed(err), "a client of a dead server sees its connection closed, not %v", err)

	require.NoError(t, srv.Start())
	c = dial(t, p.Addr())
	c.send(t, ping)
	line, err := c.line(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line)
}

// A client that has sent its last request and half-closed still gets
// the reply, as over a direct connection.
func TestHalfClose(t *testing.T) {
	_, p := setup(t)
	p.Inject(faultproxy.Fault{RequestDelay: 50 * time.Millisecond})
	c := dial(t, p.Addr())
	c.send(t, ping)
	require.NoError(t, c.Conn.(*net.TCPConn).CloseWrite())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c.r)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", string(got))
}

// Faults switched under load lose, duplicate and reorder nothing on the
// connections they leave open.
func TestFaultSwitchingUnderLoad(t *testing.T) {
	srv, p := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c := newClient(t, p.Addr())
	const workers, perWorker = 8, 100
	stop := make(chan struct{})
	var flip sync.WaitGroup
	flip.Go(func() {
		faults := []faultproxy.Fault{
			{ReplyDelay: time.Millisecond},
			{Mode: faultproxy.BlackHole},
			{RequestDelay: 2 * time.Millisecond, ReplyDelay: time.Millisecond},
			{},
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				p.Heal()
				return
			case <-time.After(3 * time.Millisecond):
				p.Inject(faults[i%len(faults)])
			}
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				if err := c.Do(ctx, c.B().Incr().Key("n").Build()).Error(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flip.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, err := srv.Do(ctx, "GET", "n")
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(workers*perWorker), v)
}

func TestListenBadTarget(t *testing.T) {
	_, err := faultproxy.Listen("no-port")
	require.Error(t, err)
}

func TestModeString(t *testing.T) {
	assert.Equal(t, "PassThrough", faultproxy.PassThrough.String())
	assert.Equal(t, "BlackHole", faultproxy.BlackHole.String())
	assert.Equal(t, "CutReplies", faultproxy.CutReplies.String())
	assert.Equal(t, "Mode(9)", faultproxy.Mode(9).String())
}

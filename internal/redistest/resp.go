package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// RedisError is an error reply from the server, e.g. "ERR unknown command".
type RedisError string

func (e RedisError) Error() string { return string(e) }

// Do sends one command to the server at addr over a fresh connection and
// returns its reply: a string for simple and bulk strings, an int64, a []any
// for arrays (whose error elements are RedisError values), or nil for a
// null reply. An error reply comes back as a RedisError error.
//
// It speaks RESP2 in clear with no authentication and is meant for
// administering the servers this package starts (cluster setup, CONFIG
// SET, DEBUG SLEEP, SCAN...), not for the code under test, which uses its
// own client. A fresh connection per call keeps it free of shared state.
// For a server with a password or TLS, use Server.Do, which knows both.
func Do(ctx context.Context, addr string, args ...string) (any, error) {
	return access{}.do(ctx, addr, args...)
}

// access is how the harness reaches a server: TLS or not, and the default
// user's password if it has one.
type access struct {
	tls      *tls.Config
	password string
}

func (a access) do(ctx context.Context, addr string, args ...string) (any, error) {
	conn, err := a.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// Unblock a read when ctx is cancelled.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	w := bufio.NewWriter(conn)
	if a.password != "" {
		writeCommand(w, "AUTH", a.password)
	}
	writeCommand(w, args...)
	if err := w.Flush(); err != nil {
		return nil, ctxErr(ctx, err)
	}
	r := bufio.NewReader(conn)
	if a.password != "" {
		v, err := readReply(r)
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if re, ok := v.(RedisError); ok {
			return nil, fmt.Errorf("redistest: AUTH: %w", re)
		}
	}
	v, err := readReply(r)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	if re, ok := v.(RedisError); ok {
		return nil, re
	}
	return v, nil
}

func (a access) dial(ctx context.Context, addr string) (net.Conn, error) {
	if a.tls != nil {
		d := tls.Dialer{Config: a.tls}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// ctxErr prefers the context's error to the I/O error it caused. The
// connection's deadline is the context's, and may fire a moment before
// the context's own timer.
func ctxErr(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return err
}

func writeCommand(w *bufio.Writer, args ...string) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
	}
}

// errMalformed is a reply the parser does not understand.
var errMalformed = errors.New("redistest: malformed reply")

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line %q", errMalformed, line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return RedisError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("%w: bulk length %q", errMalformed, body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("%w: array length %q", errMalformed, body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown reply type %q", errMalformed, line[0])
}

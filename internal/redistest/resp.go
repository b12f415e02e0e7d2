package redistest

import (
	"bufio"
	"context"
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
// It speaks RESP2 with no authentication and is meant for administering the
// servers this package starts (cluster setup, CONFIG SET, DEBUG SLEEP,
// SCAN...), not for the code under test, which uses its own client. A
// fresh connection per call keeps it free of shared state.
func Do(ctx context.Context, addr string, args ...string) (any, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// Close the connection when ctx is cancelled so that a blocked read
	// returns.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(conn))
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if re, ok := v.(RedisError); ok {
		return nil, re
	}
	return v, err
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redistest: malformed reply line %q", line)
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
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
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
	return nil, fmt.Errorf("redistest: unknown reply type %q", line[0])
}

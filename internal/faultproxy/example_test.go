package faultproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluicehq/sluice/internal/faultproxy"
)

// A drill makes the server slow, then heals it. An echo server stands in
// for Redis here; tests use faultproxy.New(t, srv.Addr()) on a redistest
// server.
func Example() {
	echo, _ := net.Listen("tcp", "127.0.0.1:0")
	defer echo.Close()
	go func() {
		c, err := echo.Accept()
		if err == nil {
			_, _ = io.Copy(c, c)
			c.Close()
		}
	}()

	p, err := faultproxy.Listen(echo.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	conn, _ := net.Dial("tcp", p.Addr())
	defer conn.Close()
	r := bufio.NewReader(conn)
	roundTrip := func() (string, time.Duration) {
		start := time.Now()
		fmt.Fprintln(conn, "ping")
		line, _ := r.ReadString('\n')
		return line, time.Since(start)
	}

	p.Inject(faultproxy.Fault{ReplyDelay: 100 * time.Millisecond})
	line, took := roundTrip()
	fmt.Printf("slow: %q, delayed: %v\n", line, took >= 100*time.Millisecond)

	p.Heal()
	line, _ = roundTrip()
	fmt.Printf("healed: %q, fault: %+v\n", line, p.Current())
	// Output:
	// slow: "ping\n", delayed: true
	// healed: "ping\n", fault: {RequestDelay:0s ReplyDelay:0s Mode:PassThrough}
}

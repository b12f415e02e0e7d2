package redistest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ports come from outside the kernel's ephemeral range, so that no
// outgoing connection of any process can take a server's port while the
// server is down between a Kill and a Start; and each one is reserved for
// the life of its Server by a lock file that every test binary on the
// machine honours (see lockPort), so that parallel test binaries never
// start two servers on one port, nor one on the port of another's stopped
// server.
const (
	lowestPort  = 10000
	highestPort = 65535
	// portAttempts bounds the search for a port that is neither reserved
	// nor in use.
	portAttempts = 200
)

// errPortLocked says that another Server, in this test binary or another,
// holds the port.
var errPortLocked = errors.New("port reserved by another redistest server")

// reservedPort is a port held for one Server; release frees it.
type reservedPort struct {
	port int
	lock io.Closer // nil where the platform has no file locks
}

func (r reservedPort) release() {
	if r.lock != nil {
		_ = r.lock.Close()
	}
}

// reservePort returns a loopback port that is free, outside the ephemeral
// range, and reserved for the caller until release.
func reservePort() (reservedPort, error) {
	ranges := portRanges()
	var lastErr error
	for range portAttempts {
		port := pick(ranges)
		lock, err := lockPort(port)
		if err != nil {
			lastErr = err
			continue
		}
		// The lock keeps other harnesses off the port; a probe checks that
		// no other program listens on it.
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			lastErr = err
			if lock != nil {
				_ = lock.Close()
			}
			continue
		}
		_ = l.Close()
		return reservedPort{port: port, lock: lock}, nil
	}
	return reservedPort{}, fmt.Errorf("no free loopback port after %d attempts (last: %v)", portAttempts, lastErr)
}

// portRange is an inclusive range of ports.
type portRange struct{ lo, hi int }

// portRanges returns the ports outside the ephemeral range, or every
// unprivileged port when that leaves too few.
func portRanges() []portRange {
	lo, hi := ephemeralRange()
	var rs []portRange
	if lo-1 >= lowestPort {
		rs = append(rs, portRange{lowestPort, lo - 1})
	}
	if hi+1 <= highestPort {
		rs = append(rs, portRange{hi + 1, highestPort})
	}
	n := 0
	for _, r := range rs {
		n += r.hi - r.lo + 1
	}
	if n < 1000 {
		return []portRange{{1024, highestPort}}
	}
	return rs
}

func pick(rs []portRange) int {
	n := 0
	for _, r := range rs {
		n += r.hi - r.lo + 1
	}
	i := rand.IntN(n)
	for _, r := range rs {
		if size := r.hi - r.lo + 1; i >= size {
			i -= size
			continue
		}
		return r.lo + i
	}
	panic("unreachable")
}

// ephemeralRange returns the kernel's range for outgoing connections'
// local ports (Linux's net.ipv4.ip_local_port_range, whose default is
// also the fallback elsewhere).
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// lockDir is where the port lock files live, shared by every user of the
// machine (the directory is world-writable and sticky, like /tmp).
func lockDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "redistest-ports")
	if err := os.Mkdir(dir, 0o777); err == nil {
		_ = os.Chmod(dir, 0o777|os.ModeSticky)
	} else if !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return dir, nil
}

package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envLockPort makes the test binary, run again as a child, try to reserve
// the given port and report the outcome through its exit code: what a
// parallel test binary would see.
const envLockPort = "REDISTEST_LOCK_PORT_CHILD"

// Exit codes of the child.
const (
	childLocked   = 10 // the port was reserved elsewhere
	childAcquired = 11 // the child could reserve it
	childFailed   = 12
)

// lockPortChild runs the child's part and exits when envLockPort is set;
// in a normal test run it does nothing.
func lockPortChild() {
	v := os.Getenv(envLockPort)
	if v == "" {
		return
	}
	port, err := strconv.Atoi(v)
	if err != nil {
		os.Exit(childFailed)
	}
	l, err := lockPort(port)
	switch {
	case errors.Is(err, errPortLocked):
		os.Exit(childLocked)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(childFailed)
	}
	_ = l.Close()
	os.Exit(childAcquired)
}

// otherBinary reports what another test binary sees when it tries to
// reserve port.
func otherBinary(t *testing.T, port int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envLockPort+"="+strconv.Itoa(port))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "child: %s", out)
	return ee.ExitCode()
}

func TestReservePortOutsideEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	for range 20 {
		p, err := reservePort()
		require.NoError(t, err)
		assert.True(t, p.port < lo || p.port > hi, "port %d in the ephemeral range %d-%d", p.port, lo, hi)
		assert.GreaterOrEqual(t, p.port, lowestPort)
		p.release()
	}
}

func TestPortRanges(t *testing.T) {
	for _, r := range portRanges() {
		assert.LessOrEqual(t, r.lo, r.hi)
		for range 100 {
			p := pick([]portRange{r})
			assert.True(t, p >= r.lo && p <= r.hi)
		}
	}
}

func TestReservedPortHeldAcrossBinaries(t *testing.T) {
	p, err := reservePort()
	require.NoError(t, err)
	_, err = lockPort(p.port)
	require.ErrorIs(t, err, errPortLocked, "the same binary")
	assert.Equal(t, childLocked, otherBinary(t, p.port), "another binary")
	p.release()
	assert.Equal(t, childAcquired, otherBinary(t, p.port), "another binary, after release")
}

func TestServerKeepsItsPortWhileDown(t *testing.T) {
	s := NewServer(t)
	require.NoError(t, s.Kill())
	// Another binary cannot take the port while the drill has the server
	// down, so Start comes back on it.
	assert.Equal(t, childLocked, otherBinary(t, s.Port()))
	require.NoError(t, s.Start())
}

package cmdtest

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProcessIDs reads this process's own ids.
func TestProcessIDs(t *testing.T) {
	uid, gid, err := ProcessIDs(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, []int{os.Geteuid(), os.Getegid()}, []int{uid, gid})
}

// TestCheckRunsAs: this test process is refused when it runs as root (a
// root test run, CI's), and accepted otherwise.
func TestCheckRunsAs(t *testing.T) {
	err := CheckRunsAs(os.Getpid(), 65532, 65532)
	if os.Geteuid() == 0 {
		assert.ErrorContains(t, err, "runs as root")
	} else {
		assert.NoError(t, err)
	}
}

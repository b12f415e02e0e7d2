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

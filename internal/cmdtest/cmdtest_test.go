package cmdtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadImageBuild reads the repository's Makefile, and refuses what it
// cannot read as a list of words.
func TestReadImageBuild(t *testing.T) {
	root, err := ModuleRoot()
	require.NoError(t, err)
	ib, err := ReadImageBuild(root)
	require.NoError(t, err)
	assert.Contains(t, ib.Env, "CGO_ENABLED=0", "a static binary")
	assert.Contains(t, ib.Flags, "-ldflags=-s", "a stripped binary")

	for name, makefile := range map[string]string{
		"missing":   "IMAGE_ENV := CGO_ENABLED=0\n",
		"reference": "IMAGE_ENV := CGO_ENABLED=0\nIMAGE_GOFLAGS := $(FLAGS)\n",
		"quoted":    "IMAGE_ENV := CGO_ENABLED=0\nIMAGE_GOFLAGS := -ldflags='-s -w'\n",
		"not env":   "IMAGE_ENV := static\nIMAGE_GOFLAGS := -ldflags=-s\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o600))
			_, err := ReadImageBuild(dir)
			assert.Error(t, err)
		})
	}
}

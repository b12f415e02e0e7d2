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

// TestCheckImageBinaryRefuses: this test's own binary, built by go test
// (not stripped; under the race detector, dynamically linked), is not an
// image's binary.
func TestCheckImageBinaryRefuses(t *testing.T) {
	assert.ErrorIs(t, CheckImageBinary(os.Args[0]), ErrNotImageBinary)
}

func TestReadContainerfile(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		p := filepath.Join(dir, "Containerfile")
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	cf, err := ReadContainerfile(write(`# a comment
FROM scratch
COPY app /app
USER 65532:65533
EXPOSE 8080 9090/tcp
ENTRYPOINT ["/app", "-addr", ":8080"]
CMD ["-dev"]
`))
	require.NoError(t, err)
	uid, gid, err := cf.UIDGID()
	require.NoError(t, err)
	assert.Equal(t, Containerfile{
		From: "scratch", User: "65532:65533", Expose: []int{8080, 9090},
		Entrypoint: []string{"/app", "-addr", ":8080"}, Cmd: []string{"-dev"},
		Copies: map[string]string{"/app": "app"},
	}, cf)
	assert.Equal(t, []int{65532, 65533}, []int{uid, gid})

	for name, text := range map[string]string{
		"shell form":   "ENTRYPOINT /app -dev\n",
		"RUN":          "RUN true\n",
		"bad port":     "EXPOSE http\n",
		"copy three":   "COPY a b /c\n",
		"user by name": "USER nonroot\n",
	} {
		t.Run(name, func(t *testing.T) {
			cf, err := ReadContainerfile(write(text))
			if err == nil {
				_, _, err = cf.UIDGID()
			}
			assert.Error(t, err)
		})
	}
}

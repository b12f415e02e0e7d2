package cmdtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

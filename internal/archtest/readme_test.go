package archtest

import (
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wiringFrame declares, around the README's "Wiring a Limiter" block, what
// the block takes from the reader's program, and the packages it names.
const wiringFrame = `package wiring

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

func wiring(ctx context.Context, ip netip.Addr, user, tenant string, req app.Request,
	appLogger, auditLogger *slog.Logger, api *httpmw.ServeMux, limit func(http.Handler) http.Handler, addr string) error {
`

// goBlock returns the first ```go block after heading in markdown.
func goBlock(t *testing.T, markdown, heading string) string {
	t.Helper()
	_, after, ok := strings.Cut(markdown, "\n"+heading+"\n")
	require.True(t, ok, "no heading %q", heading)
	_, after, ok = strings.Cut(after, "```go\n")
	require.True(t, ok, "no go block after %q", heading)
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok, "the go block after %q does not end", heading)
	return block
}

// TestReadmeWiringTypeChecks: the README's wiring block is Go that
// compiles against the module's packages as they are; the same block with
// a field the API does not have, or the metrics on a mux it does not
// declare, does not.
func TestReadmeWiringTypeChecks(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	block := goBlock(t, string(readme), "## Wiring a Limiter")
	exports := exportData(t)
	require.Empty(t, typeErrors(exports, block), "the README's wiring block, in its frame:\n%s%s}", wiringFrame, block)

	for _, broken := range []string{
		strings.Replace(block, "redis.Config{URL:", "redis.Config{Address:", 1),
		block + "mux.Handle(\"GET /metrics\", rec.Handler())\n",
	} {
		require.NotEqual(t, block, broken)
		assert.NotEmpty(t, typeErrors(exports, broken), "a broken block type-checks:\n%s", broken)
	}
}

// typeErrors type-checks block in wiringFrame. A block shows values it
// does not use (d, q, n), so "declared and not used" is forgiven, and so
// is an import of the frame that the block does not use; nothing else.
func typeErrors(exports map[string]string, block string) []string {
	src := wiringFrame + block + "}\n"
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "README.md", src, 0)
	if err != nil {
		return []string{err.Error()}
	}
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			f, ok := exports[path]
			if !ok {
				return nil, os.ErrNotExist
			}
			return os.Open(f)
		}),
	}
	var errs []string
	conf.Error = func(err error) {
		msg := err.Error()
		if strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used") {
			return
		}
		errs = append(errs, msg)
	}
	_, _ = conf.Check("wiring", fset, []*ast.File{file}, nil)
	return errs
}

// exportData compiles (or finds in the build cache) the packages
// wiringFrame imports and their dependencies, and returns the file of each
// one's export data.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "frame.go", wiringFrame, parser.ImportsOnly)
	require.NoError(t, err)
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}
	for _, imp := range file.Imports {
		args = append(args, strings.Trim(imp.Path.Value, `"`))
	}
	cmd := exec.Command("go", args...)
	// The environment of the Makefile's builds outside the race detector
	// (NOCGO): the export data is then the very build vet and the
	// race-free pass made, not a third compilation of every dependency.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, export, ok := strings.Cut(strings.TrimSpace(line), "="); ok && export != "" {
			exports[path] = export
		}
	}
	return exports
}

// Package cmdtest builds the module's commands for the tests that run them
// as processes, exactly as `make image` builds the binaries a container
// image holds (deploy/README.md): the Makefile's IMAGE_ENV and
// IMAGE_GOFLAGS are read from the Makefile itself, so the tests and the
// image cannot drift apart. Under `make cover` (CoverDirEnv set) the
// binaries are also built with Go's integration coverage and write their
// profiles to that directory, which `make cover` merges with the unit
// tests' profiles.
package cmdtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// CoverDirEnv names the directory where binaries built under `make cover`
// write their coverage profiles; unset, binaries are built without
// coverage (make test).
const CoverDirEnv = "SLUICE_COVERDIR"

// ImageBuild is how the binaries an image holds are built: Env is added to
// the go command's environment and Flags to `go build`'s arguments.
type ImageBuild struct {
	Env   []string
	Flags []string
}

// ModuleRoot returns the directory of the module's go.mod, found from the
// working directory upwards (a test runs in its package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cmdtest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// makeVar matches a simple Makefile assignment: NAME := value (or =, ?=).
var makeVar = regexp.MustCompile(`^([A-Z_]+)\s*[:?]?=\s*(.*)$`)

// ReadImageBuild reads IMAGE_ENV and IMAGE_GOFLAGS from the Makefile at
// root. Each is a space-separated list of words (no flag may contain a
// space, which is why the Makefile passes -ldflags=-s, the symbol table
// and, since Go 1.22, DWARF omitted, rather than -ldflags='-s -w').
func ReadImageBuild(root string) (ImageBuild, error) {
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		return ImageBuild{}, err
	}
	defer f.Close()
	vars := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := makeVar.FindStringSubmatch(sc.Text()); m != nil {
			vars[m[1]] = strings.Fields(m[2])
		}
	}
	if err := sc.Err(); err != nil {
		return ImageBuild{}, err
	}
	b := ImageBuild{Env: vars["IMAGE_ENV"], Flags: vars["IMAGE_GOFLAGS"]}
	if b.Env == nil || b.Flags == nil {
		return ImageBuild{}, errors.New("cmdtest: the Makefile sets no IMAGE_ENV or no IMAGE_GOFLAGS")
	}
	for _, kv := range slices.Concat(b.Env, b.Flags) {
		if strings.ContainsAny(kv, `$'"`) {
			return ImageBuild{}, fmt.Errorf("cmdtest: %q in the Makefile's image build: only literal words are read", kv)
		}
	}
	for _, kv := range b.Env {
		if !strings.Contains(kv, "=") {
			return ImageBuild{}, fmt.Errorf("cmdtest: IMAGE_ENV entry %q is not NAME=value", kv)
		}
	}
	return b, nil
}

// Build builds the main package of the working directory into out as
// `make image` builds it; under `make cover` it adds integration coverage
// of every package of the module (-covermode=atomic, as the unit tests
// under the race detector use). The error carries the go command's
// output.
func Build(out string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	ib, err := ReadImageBuild(root)
	if err != nil {
		return err
	}
	args := append([]string{"build"}, ib.Flags...)
	if os.Getenv(CoverDirEnv) != "" {
		mod, err := modulePath(root)
		if err != nil {
			return err
		}
		args = append(args, "-cover", "-covermode=atomic", "-coverpkg="+mod+"/...")
	}
	cmd := exec.Command("go", append(args, "-o", out, ".")...)
	// The go command on PATH, as a user would build it; the image's
	// environment last, so that it wins over the Makefile's CGO_ENABLED=1.
	cmd.Env = append(os.Environ(), ib.Env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

var (
	binaryOnce sync.Once
	binaryDir  string
	binaryPath string
	binaryErr  error
)

// Binary builds the main package of the working directory with Build, the
// first time it is called in a test binary, into a temporary directory
// that RemoveBinary removes; later calls return the same path (or error).
// name is the file's name.
func Binary(name string) (string, error) {
	binaryOnce.Do(func() {
		binaryDir, binaryErr = os.MkdirTemp("", name+"-bin-")
		if binaryErr != nil {
			return
		}
		binaryPath = filepath.Join(binaryDir, name)
		binaryErr = Build(binaryPath)
	})
	return binaryPath, binaryErr
}

// RemoveBinary removes what Binary built; TestMain calls it once the
// tests have run.
func RemoveBinary() {
	if binaryDir != "" {
		_ = os.RemoveAll(binaryDir)
	}
}

// Env returns env with what a binary built by Build needs to run: under
// `make cover`, GOCOVERDIR (without it a covered binary warns on stderr
// and writes nothing).
func Env(env []string) []string {
	if dir := os.Getenv(CoverDirEnv); dir != "" {
		return append(env, "GOCOVERDIR="+dir)
	}
	return env
}

// modulePath reads the module's path from go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for line := range bytes.Lines(b) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "module "); ok {
			return strings.TrimSpace(p), nil
		}
	}
	return "", errors.New("cmdtest: go.mod has no module line")
}

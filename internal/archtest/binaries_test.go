package archtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxTrackedSize bounds a tracked file: the largest today is
// docs/bench/results.json at about 140 KB. Every `go get` of the module
// downloads every tracked file (issue 37: a 40 MB demo binary was
// committed at the root).
const maxTrackedSize = 1 << 20

// allowedLarge lists tracked files allowed over maxTrackedSize, by path
// from the module root, with the reason. None today.
var allowedLarge = map[string]string{}

// binaryKind names the executable or object format that head (a file's
// first bytes) starts with, or "" for any other file.
func binaryKind(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF"
	case bytes.HasPrefix(head, []byte("!<arch>\n")):
		return "ar archive (a Go or C object library)"
	case bytes.HasPrefix(head, []byte("\x00asm")):
		return "WebAssembly"
	}
	if len(head) >= 4 {
		switch binary.BigEndian.Uint32(head) {
		case 0xfeedface, 0xfeedfacf, 0xcefaedfe, 0xcffaedfe:
			return "Mach-O"
		case 0xcafebabe:
			return "Mach-O universal (or a Java class)"
		}
	}
	// PE: "MZ", and at 0x3c the offset of the "PE\0\0" signature.
	if len(head) >= 0x40 && bytes.HasPrefix(head, []byte("MZ")) {
		off := int(binary.LittleEndian.Uint32(head[0x3c:]))
		if off >= 0 && off+4 <= len(head) && bytes.Equal(head[off:off+4], []byte("PE\x00\x00")) {
			return "PE (Windows)"
		}
	}
	return ""
}

// trackedFiles lists the files git tracks in the module, relative to the
// module root. Outside CI, without git or outside a git checkout (the
// module as `go mod download` unpacks it), the test is skipped; in CI
// (CI=true, a clean clone) both must be there.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	if _, err := exec.LookPath("git"); err != nil {
		fail("git: %v (the tracked files cannot be listed)", err)
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		fail("git ls-files: %v\n%s", err, stderr.String())
	}
	var files []string
	for f := range bytes.SplitSeq(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	if len(files) == 0 {
		t.Fatal("git ls-files listed no file")
	}
	return files
}

// TestNoTrackedBinary: no tracked file is an executable or object file, or
// larger than maxTrackedSize unless allowedLarge names it. Build outputs
// belong in .gitignore.
func TestNoTrackedBinary(t *testing.T) {
	root := "../.."
	files := trackedFiles(t, root)
	for _, name := range files {
		path := filepath.Join(root, name)
		fi, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue // a symbolic link or a submodule
		}
		if _, ok := allowedLarge[name]; !ok && fi.Size() > maxTrackedSize {
			t.Errorf("%s: %d bytes, over %d: not a source file (allow it in allowedLarge, with the reason, if it must be tracked)", name, fi.Size(), maxTrackedSize)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 512)
		n, err := io.ReadFull(f, head)
		_ = f.Close()
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if kind := binaryKind(head[:n]); kind != "" {
			t.Errorf("%s is a tracked %s binary: git rm --cached it and add it to .gitignore", name, kind)
		}
	}
}

// TestBinaryKindCatchesBinaries proves that the check above can fail: the
// headers of each format are recognised, source and data files are not.
func TestBinaryKindCatchesBinaries(t *testing.T) {
	pe := make([]byte, 0x80)
	copy(pe, "MZ")
	binary.LittleEndian.PutUint32(pe[0x3c:], 0x40)
	copy(pe[0x40:], "PE\x00\x00")
	self, err := os.Open(os.Args[0]) // this test's own binary
	require.NoError(t, err)
	head := make([]byte, 64)
	_, err = io.ReadFull(self, head)
	_ = self.Close()
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		head   []byte
		binary bool
	}{
		{"this test binary", head, true},
		{"ELF", []byte("\x7fELF\x02\x01\x01"), true},
		{"Mach-O 64", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, true},
		{"Mach-O universal", []byte{0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2}, true},
		{"PE", pe, true},
		{"ar", []byte("!<arch>\n__.PKGDEF"), true},
		{"wasm", []byte("\x00asm\x01\x00\x00\x00"), true},
		{"Go source", []byte("package archtest\n"), false},
		{"text starting MZ", []byte("MZ is not enough: no PE signature follows, and this line runs on past 0x40 bytes."), false},
		{"JSON", []byte(`{"results": []}`), false},
		{"empty", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := binaryKind(c.head) != ""; got != c.binary {
				t.Errorf("binaryKind(%q) found a binary: %v, want %v", c.head, got, c.binary)
			}
		})
	}
}

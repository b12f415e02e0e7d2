package cmdtest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Containerfile is what the image tests read of a Containerfile under
// deploy/image: the instructions a FROM scratch image of one binary uses.
type Containerfile struct {
	From       string
	User       string // uid:gid
	Expose     []int
	Entrypoint []string
	Cmd        []string
	// Copies maps each COPY's destination to its source.
	Copies map[string]string
}

// ReadContainerfile parses path: one instruction per line, ENTRYPOINT and
// CMD in their exec (JSON) form; other forms are refused rather than
// misread.
func ReadContainerfile(path string) (Containerfile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Containerfile{}, err
	}
	c := Containerfile{Copies: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(word) {
		case "FROM":
			c.From = rest
		case "USER":
			c.User = rest
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				port, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					return c, fmt.Errorf("%s:%d: EXPOSE %s: %w", path, n, p, err)
				}
				c.Expose = append(c.Expose, port)
			}
		case "ENTRYPOINT", "CMD":
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				return c, fmt.Errorf("%s:%d: %s needs the exec form [\"...\"]: %w", path, n, word, err)
			}
			if strings.EqualFold(word, "CMD") {
				c.Cmd = args
			} else {
				c.Entrypoint = args
			}
		case "COPY":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return c, fmt.Errorf("%s:%d: COPY: one source and one destination", path, n)
			}
			c.Copies[f[1]] = f[0]
		case "LABEL":
		default:
			return c, fmt.Errorf("%s:%d: %s: not an instruction this test reads", path, n, word)
		}
	}
	return c, sc.Err()
}

// UIDGID parses User.
func (c Containerfile) UIDGID() (uid, gid int, err error) {
	u, g, ok := strings.Cut(c.User, ":")
	if !ok {
		return 0, 0, fmt.Errorf("USER %q: want numeric uid:gid (a scratch image has no /etc/passwd)", c.User)
	}
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("USER %q: %w", c.User, err)
	}
	if gid, err = strconv.Atoi(g); err != nil {
		return 0, 0, fmt.Errorf("USER %q: %w", c.User, err)
	}
	return uid, gid, nil
}

// ErrNotImageBinary is wrapped by CheckImageBinary's errors.
var ErrNotImageBinary = errors.New("not a binary a FROM scratch image can hold")

// CheckImageBinary checks the binary at path as an image holds it:
// statically linked (no ELF interpreter and no shared library to load: a
// FROM scratch image has neither) and stripped (no symbol table).
func CheckImageBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w: it names an ELF interpreter (dynamically linked)", path, ErrNotImageBinary)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s: %w: it needs shared libraries %v", path, ErrNotImageBinary, libs)
	}
	if f.Section(".symtab") != nil {
		return fmt.Errorf("%s: %w: it has a symbol table (not stripped)", path, ErrNotImageBinary)
	}
	return nil
}

// ImageCommand returns the command that runs bin with args as an image
// runs its entrypoint: in /, with env and nothing else (no HOME, TMPDIR or
// PATH; GOCOVERDIR under make cover), and as uid:gid when the test runs
// as root (CI, a container), else as the test's own uid, which is not
// root either. bin's directory is made readable by uid; what else the
// process reads must be too.
func ImageCommand(bin string, uid, gid int, env []string, args ...string) (*exec.Cmd, error) {
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	cmd.Env = Env(slices.Clip(env))
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would mean the test's own environment
	}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	return cmd, nil
}

// CheckRunsAs checks that the running process pid, started by
// ImageCommand, is not root, and runs as uid:gid when the test runs as
// root.
func CheckRunsAs(pid, uid, gid int) error {
	puid, pgid, err := ProcessIDs(pid)
	if err != nil {
		return err
	}
	if puid == 0 {
		return fmt.Errorf("process %d runs as root", pid)
	}
	if os.Geteuid() == 0 && (puid != uid || pgid != gid) {
		return fmt.Errorf("process %d runs as %d:%d, not %d:%d", pid, puid, pgid, uid, gid)
	}
	return nil
}

// ProcessIDs reads a running process's effective uid and gid from
// /proc/<pid>/status.
func ProcessIDs(pid int) (uid, gid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	uid, gid = -1, -1
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		// Uid: real effective saved filesystem.
		switch f[0] {
		case "Uid:":
			uid, err = strconv.Atoi(f[2])
		case "Gid:":
			gid, err = strconv.Atoi(f[2])
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no Uid or Gid line", pid)
	}
	return uid, gid, nil
}

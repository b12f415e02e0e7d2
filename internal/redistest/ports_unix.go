//go:build unix

package redistest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// portLock is a held lock file; Close removes it, then unlocks it.
type portLock struct {
	f    *os.File
	path string
}

func (l *portLock) Close() error {
	// Removing before unlocking keeps the file's identity check in
	// lockPort sound: whoever locks the removed file sees it is gone.
	_ = os.Remove(l.path)
	return l.f.Close()
}

// lockPort takes an exclusive, non-blocking flock on the port's lock file.
// The kernel drops the lock when the process dies, however it dies, so a
// crashed test binary never leaves a port reserved (only an empty file,
// which the next holder reuses).
func lockPort(port int) (io.Closer, error) {
	dir, err := lockDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, strconv.Itoa(port)+".lock")
	// Read-only is enough for flock and lets every user share a file
	// another created.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("port %d: %w", port, errPortLocked)
		}
		return nil, err
	}
	// The holder may have removed the file between our open and our lock:
	// then we locked an orphan, and someone else may lock a new file.
	fi, err1 := f.Stat()
	pi, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(fi, pi) {
		_ = f.Close()
		return nil, fmt.Errorf("port %d: %w", port, errPortLocked)
	}
	return &portLock{f: f, path: path}, nil
}

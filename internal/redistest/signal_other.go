//go:build !unix

package redistest

import "syscall"

// Without job-control signals, Pause and Resume fail: the process
// refuses a signal it does not know.
const (
	sigPause  = syscall.Signal(19)
	sigResume = syscall.Signal(18)
)

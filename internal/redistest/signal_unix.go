//go:build unix

package redistest

import "syscall"

// Pause and Resume use job-control signals, which only unix has.
const (
	sigPause  = syscall.SIGSTOP
	sigResume = syscall.SIGCONT
)

//go:build unix

// Package cputime reads the processor time this process has used, so that
// a measurement can say how much of the machine the client itself took.
package cputime

import (
	"syscall"
	"time"
)

// Self returns the user and system time this process has used so far, 0
// when the system does not say.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build !linux

package cputime

import "time"

// Process returns 0: another process' times are read on Linux only.
func Process(int) (time.Duration, error) { return 0, nil }

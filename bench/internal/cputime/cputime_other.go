//go:build !unix

// Package cputime reads the processor time this process has used, so that
// a measurement can say how much of the machine the client itself took.
package cputime

import "time"

// Self returns 0: this system's process times are not read.
func Self() time.Duration { return 0 }

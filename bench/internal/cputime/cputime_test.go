package cputime

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestProcessReadsThisProcess spins until this process has used 50 ms
// of CPU by its own count, then reads itself through /proc.
func TestProcessReadsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("another process' times are read on Linux only")
	}
	start := Self()
	for Self()-start < 50*time.Millisecond {
	}
	got, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in 10 ms ticks.
	if self := Self(); got < 40*time.Millisecond || got > self+10*time.Millisecond {
		t.Errorf("Process(self) = %s, getrusage says %s", got, self)
	}
	if _, err := Process(-1); err == nil {
		t.Error("Process(-1) = nil error")
	}
}

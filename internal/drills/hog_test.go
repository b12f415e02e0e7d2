package drills

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// hogEnv, set to a duration, makes the test binary the drills' CPU hog
// (TestMain): another process that keeps every core busy, as the
// processes beside a service at peak do.
const hogEnv = "SLUICE_DRILL_HOG"

// hogSpinners is how many goroutines the hog spins: one per core.
var hogSpinners = runtime.NumCPU()

// hog spins hogSpinners goroutines for the duration v says, then returns
// the exit code: the process ends by itself even if the drill that
// started it does not stop it.
func hog(v string) int {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > time.Minute {
		fmt.Fprintf(os.Stderr, "%s=%q: want a duration up to 1m\n", hogEnv, v)
		return 2
	}
	runtime.GOMAXPROCS(hogSpinners)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range hogSpinners {
		wg.Go(func() {
			for n := 0; ; n++ {
				if n%4096 == 0 && !time.Now().Before(end) {
					return
				}
			}
		})
	}
	wg.Wait()
	return 0
}

// startHog starts the CPU hog for at most limit and returns the function
// that stops it (also run at cleanup) and reports the CPU time it used.
func startHog(t *testing.T, limit time.Duration) (stop func() time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hogEnv+"="+limit.String(), "GOMAXPROCS="+strconv.Itoa(hogSpinners))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the CPU hog: %v", err)
	}
	var once sync.Once
	var used time.Duration
	stop = func() time.Duration {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if st := cmd.ProcessState; st != nil {
				used = st.UserTime() + st.SystemTime()
			}
		})
		return used
	}
	t.Cleanup(func() { stop() })
	return stop
}

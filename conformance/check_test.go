package conformance

import (
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ports"
)

// The recording test that Check drives the suite with must order things
// as testing does, or Check would pass or fail stores that Run would not.

// checkRoot runs f as the function of a root test of a fresh checkRun and
// returns the run's failures, as Check does with the suite.
func checkRoot(f func(t *checkT)) Failures {
	c := &checkRun{}
	root := c.newT(nil, "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer root.finish()
		defer root.recoverPanic()
		f(root)
	}()
	<-done
	return c.failures()
}

func TestCheckTFatalEndsOnlyItsSubtest(t *testing.T) {
	var order []string
	var okA, okB bool
	failed := checkRoot(func(root *checkT) {
		okA = root.Run("a", func(t tb) {
			t.Cleanup(func() { order = append(order, "first cleanup") })
			t.Cleanup(func() { order = append(order, "second cleanup") })
			t.Fatalf("stop at %d", 1)
			order = append(order, "after Fatalf")
		})
		okB = root.Run("b", func(t tb) { order = append(order, "b ran") })
	})
	assert.False(t, okA, "Run of the subtest that called Fatalf")
	assert.True(t, okB, "Run of its sibling")
	assert.Equal(t, []string{"second cleanup", "first cleanup", "b ran"}, order)
	require.Equal(t, Failures{{Name: "a", Messages: []string{"stop at 1"}}}, failed)
}

func TestCheckTContextEndsJustBeforeCleanups(t *testing.T) {
	var during, inCleanup error
	checkRoot(func(root *checkT) {
		root.Run("a", func(t tb) {
			t.Cleanup(func() { inCleanup = t.Context().Err() })
			during = t.Context().Err()
		})
	})
	assert.NoError(t, during, "context while the subtest runs")
	assert.Error(t, inCleanup, "context when its cleanups run")
}

// TestCheckTParallelSubtestsRunAfterTheirParent checks testing's order:
// Run returns as soon as a subtest calls Parallel; parallel subtests start
// when the parent's function returns, run together, and end before the
// parent's cleanups; a parallel subtest's failure fails its parent.
func TestCheckTParallelSubtestsRunAfterTheirParent(t *testing.T) {
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	var started sync.WaitGroup
	started.Add(2)
	together := make(chan struct{})
	go func() { started.Wait(); close(together) }()
	var parentFailed, parentRun bool
	failed := checkRoot(func(root *checkT) {
		var parent tb
		parentRun = root.Run("parent", func(t tb) {
			parent = t
			t.Cleanup(func() { note("parent cleanup") })
			for _, name := range []string{"x", "y"} {
				ok := t.Run(name, func(t tb) {
					t.Parallel()
					note(name + " started")
					started.Done()
					// Each waits for the other: they run together. The
					// timeout only turns a hang into a failure.
					select {
					case <-together:
					case <-time.After(hangTimeout):
						t.Fatalf("%s: its parallel sibling never started", name)
					}
					if name == "y" {
						t.Errorf("y fails")
					}
				})
				if !ok {
					t.Errorf("Run of parallel subtest %s returned false before it ran", name)
				}
			}
			note("parent returns")
		})
		parentFailed = parent.Failed()
	})
	assert.False(t, parentRun, "Run of the parent whose parallel subtest failed")
	assert.True(t, parentFailed, "parent failed through its subtest")
	require.Len(t, order, 4)
	assert.Equal(t, "parent returns", order[0])
	assert.ElementsMatch(t, []string{"x started", "y started"}, order[1:3])
	assert.Equal(t, "parent cleanup", order[3])
	// The parent failed only through y: it is not listed itself.
	assert.Equal(t, Failures{{Name: "parent/y", Messages: []string{"y fails"}}}, failed)
}

func TestCheckTPanicsSkipsAndForbiddenCallsAreFailures(t *testing.T) {
	var cleanedUp atomic.Int32
	failed := checkRoot(func(root *checkT) {
		root.Run("panics", func(t tb) {
			t.Cleanup(func() { cleanedUp.Add(1) })
			panic("boom")
		})
		root.Run("skips", func(t tb) { t.Skip("no server") })
		root.Run("setenv", func(t tb) { t.Setenv("SLUICE_CHECK", "1") })
		root.Run("chdir", func(t tb) { t.Chdir(os.TempDir()) })
		root.Run("cleanup panics", func(t tb) {
			t.Cleanup(func() { cleanedUp.Add(1) })
			t.Cleanup(func() { panic("in cleanup") })
		})
		root.Run("fails without a message", func(t tb) { t.Fail() })
		root.Run("logs and passes", func(t tb) { t.Log("fine") })
	})
	assert.EqualValues(t, 2, cleanedUp.Load(), "cleanups run after a panic, in the test or in another cleanup")
	assert.Equal(t, []string{"chdir", "cleanup panics", "fails without a message", "panics", "setenv", "skips"}, failed.Cases())
	byName := map[string][]string{}
	for _, f := range failed {
		byName[f.Name] = f.Messages
	}
	assert.Equal(t, []string{"panic: boom"}, byName["panics"])
	assert.Equal(t, []string{"no server", "skipped: a case that does not run proves nothing"}, byName["skips"])
	assert.Equal(t, []string{`Setenv("SLUICE_CHECK"): not allowed in a parallel test`}, byName["setenv"])
	assert.Equal(t, []string{"panic: in cleanup"}, byName["cleanup panics"])
	assert.Empty(t, byName["fails without a message"])
	_, set := os.LookupEnv("SLUICE_CHECK")
	assert.False(t, set, "Setenv changed the environment")
}

func TestCheckTIsATestingTB(t *testing.T) {
	var dir string
	failed := checkRoot(func(root *checkT) {
		root.Run("case", func(t tb) {
			var tt testing.TB = t.unwrap()
			dir = tt.TempDir()
			_, err := os.Stat(dir)
			require.NoError(tt, err)
			require.Equal(tt, "case", tt.Name())
			_, _ = tt.Output().Write([]byte("one\ntwo\n"))
			tt.Attr("key", "value")
			require.Equal(tt, 1, 2, "require reports through the fake")
		})
	})
	require.Len(t, failed, 1)
	msgs := failed[0].Messages
	require.GreaterOrEqual(t, len(msgs), 4)
	assert.Equal(t, []string{"one", "two", "key: value"}, msgs[:3])
	assert.Contains(t, msgs[3], "require reports through the fake")
	_, err := os.Stat(dir)
	assert.True(t, errors.Is(err, os.ErrNotExist), "TempDir left behind: %v", err)
}

func TestFailuresCases(t *testing.T) {
	fs := Failures{
		{Name: "B/x", Messages: []string{"m1", "m2"}},
		{Name: "A"},
		{Name: "B/y"},
	}
	assert.Equal(t, []string{"A", "B"}, fs.Cases())
	assert.Equal(t, "B", fs[0].Case())
	assert.Equal(t, "B/x\n\tm1\n\tm2\nA\nB/y", fs.String())
	assert.Empty(t, Failures(nil).Cases())
}

// TestCheckFailsEveryCaseOfASkippingConstructor: a constructor that
// skips (e.g. no server to reach) is a failure of every case, never a
// pass.
func TestCheckFailsEveryCaseOfASkippingConstructor(t *testing.T) {
	failed := Check(Features{}, func(t testing.TB) ports.Store {
		t.Skip("redis-server not found")
		return nil
	})
	var want []string
	for _, c := range cases() {
		if c.notApplicable(Features{}) == "" {
			want = append(want, c.name)
		}
	}
	slices.Sort(want)
	assert.Equal(t, want, failed.Cases())
}

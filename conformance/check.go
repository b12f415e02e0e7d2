package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/ports"
)

// Check runs the suite on the stores made by newStore, as RunWith does but
// without a *testing.T, and returns the subtests that failed, sorted by
// name: none when the store passes. It lets a store's own tests prove that
// a broken store, or a configuration that must not pass, fails the cases it
// should, with no child process:
//
//	failed := conformance.Check(conformance.Features{}, newBrokenStore)
//	require.Contains(t, failed.Cases(), "AllOrNothingAcrossNineKeys", failed.String())
//
// newStore gets a testing.TB of Check's own. As in testing, Fatal, FailNow
// and Skip end the case's goroutine (runtime.Goexit), cleanups run last
// first when the case ends, and Context is cancelled just before them. A
// case that panics or is skipped is a failure: it proved nothing. Setenv
// and Chdir, which testing forbids in parallel tests, fail the case.
//
// Check returns when every case has ended; a store that hangs hangs Check,
// as it would hang go test.
func Check(f Features, newStore func(t testing.TB) ports.Store) Failures {
	c := &checkRun{}
	root := c.newT(nil, "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer root.finish()
		defer root.recoverPanic()
		run(root, f, newStore)
	}()
	<-done
	return c.failures()
}

// Failure is one subtest that failed under Check.
type Failure struct {
	// Name is the subtest's name below the suite, its case first, e.g.
	// "AllOrNothingAcrossNineKeys/RefusingKey4".
	Name string
	// Messages is what the subtest wrote, in order: its errors, its log
	// lines, the value of a panic, the reason of a skip.
	Messages []string
}

// Case returns the top-level case the failure belongs to: Name up to its
// first "/".
func (f Failure) Case() string {
	c, _, _ := strings.Cut(f.Name, "/")
	return c
}

// String returns the name and the messages, one per line.
func (f Failure) String() string {
	var b strings.Builder
	b.WriteString(f.Name)
	for _, m := range f.Messages {
		b.WriteString("\n\t")
		b.WriteString(m)
	}
	return b.String()
}

// Failures is what Check returns: every failed subtest, sorted by name.
type Failures []Failure

// Cases returns the distinct top-level cases that failed, sorted.
func (fs Failures) Cases() []string {
	var cases []string
	for _, f := range fs {
		if c := f.Case(); !slices.Contains(cases, c) {
			cases = append(cases, c)
		}
	}
	slices.Sort(cases)
	return cases
}

// String returns every failure, one after another; "" when none.
func (fs Failures) String() string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.String()
	}
	return strings.Join(parts, "\n")
}

// checkRun is one Check: every subtest it started, in order.
type checkRun struct {
	mu    sync.Mutex
	tests []*checkT
}

func (c *checkRun) newT(parent *checkT, name string) *checkT {
	ctx, cancel := context.WithCancel(context.Background())
	t := &checkT{
		name: name, parent: parent, run: c, ctx: ctx, cancel: cancel,
		yielded: make(chan struct{}), released: make(chan struct{}),
	}
	if parent != nil && parent.name != "" {
		t.name = parent.name + "/" + name
	}
	c.mu.Lock()
	c.tests = append(c.tests, t)
	c.mu.Unlock()
	return t
}

// failures returns the subtests that failed of their own doing (a parent
// marked failed only by a subtest is not listed), sorted by name.
func (c *checkRun) failures() Failures {
	c.mu.Lock()
	defer c.mu.Unlock()
	var fs Failures
	for _, t := range c.tests {
		t.mu.Lock()
		if t.own {
			fs = append(fs, Failure{Name: t.name, Messages: slices.Clone(t.output)})
		}
		t.mu.Unlock()
	}
	slices.SortStableFunc(fs, func(a, b Failure) int { return strings.Compare(a.Name, b.Name) })
	return fs
}

// checkT is the test Check hands to the suite and to the constructor: it
// records what a *testing.T would report, and runs subtests, parallel ones
// included, with testing's ordering.
type checkT struct {
	// testing.TB is never set: embedding it supplies the interface's
	// unexported method. checkT defines every other method itself.
	testing.TB

	name   string
	parent *checkT
	run    *checkRun
	ctx    context.Context
	cancel context.CancelFunc
	// yielded is closed when the parent's Run may return: the subtest has
	// called Parallel, or ended.
	yielded   chan struct{}
	yieldOnce sync.Once
	// released is closed when the test's function has returned: its
	// parallel subtests wait for it, as in testing.
	released chan struct{}
	subs     sync.WaitGroup

	mu       sync.Mutex
	failed   bool // by itself or through a subtest
	own      bool // by itself: a failure, a panic or a skip
	skipped  bool
	output   []string
	cleanups []func()
}

var _ tb = (*checkT)(nil)

// Run runs f as a subtest in its own goroutine and returns when it has
// ended or called Parallel.
func (t *checkT) Run(name string, f func(t tb)) bool {
	c := t.run.newT(t, name)
	t.subs.Add(1)
	go func() {
		defer t.subs.Done()
		defer c.yield()
		defer c.finish()
		defer c.recoverPanic()
		f(c)
	}()
	<-c.yielded
	return !c.Failed()
}

// Parallel lets the parent's Run return, and waits for the parent's
// function to end.
func (t *checkT) Parallel() {
	t.yield()
	if t.parent != nil {
		<-t.parent.released
	}
}

func (t *checkT) yield() { t.yieldOnce.Do(func() { close(t.yielded) }) }

// recoverPanic records a panic of the test's function as a failure, where
// testing would end the whole binary. It is deferred directly, so that
// recover sees the panic.
func (t *checkT) recoverPanic() {
	if p := recover(); p != nil {
		t.Errorf("panic: %v", p)
	}
}

// finish ends the test once its function has returned: parallel subtests
// run and are waited for, then the context is cancelled and the cleanups
// run, and a failure is passed up to the parent.
func (t *checkT) finish() {
	close(t.released)
	t.subs.Wait()
	t.cancel()
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		t.cleanup(f)
	}
	if t.parent != nil && t.Failed() {
		t.parent.mu.Lock()
		t.parent.failed = true
		t.parent.mu.Unlock()
	}
}

// cleanup runs f in a goroutine of its own, so that a Fatal or a panic in
// it ends f alone and the other cleanups still run.
func (t *checkT) cleanup(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.recoverPanic()
		f()
	}()
	<-done
}

func (t *checkT) unwrap() testing.TB { return t }

func (t *checkT) log(s string) {
	t.mu.Lock()
	t.output = append(t.output, strings.TrimSuffix(s, "\n"))
	t.mu.Unlock()
}

// Name returns the subtest's name below the suite.
func (t *checkT) Name() string { return t.name }

// Context is cancelled just before the cleanups run.
func (t *checkT) Context() context.Context { return t.ctx }

// Helper does nothing: Check reports no file and line.
func (t *checkT) Helper() {}

// Log records a line, shown if the subtest fails.
func (t *checkT) Log(args ...any) { t.log(fmt.Sprintln(args...)) }

// Logf records a line, shown if the subtest fails.
func (t *checkT) Logf(format string, args ...any) { t.log(fmt.Sprintf(format, args...)) }

// Fail marks the subtest failed and lets it go on.
func (t *checkT) Fail() {
	t.mu.Lock()
	t.failed, t.own = true, true
	t.mu.Unlock()
}

// Failed reports whether the subtest, or one of its subtests, failed.
func (t *checkT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// FailNow marks the subtest failed and ends its goroutine.
func (t *checkT) FailNow() {
	t.Fail()
	runtime.Goexit()
}

// Error is Log then Fail.
func (t *checkT) Error(args ...any) {
	t.Log(args...)
	t.Fail()
}

// Errorf is Logf then Fail.
func (t *checkT) Errorf(format string, args ...any) {
	t.Logf(format, args...)
	t.Fail()
}

// Fatal is Log then FailNow.
func (t *checkT) Fatal(args ...any) {
	t.Log(args...)
	t.FailNow()
}

// Fatalf is Logf then FailNow.
func (t *checkT) Fatalf(format string, args ...any) {
	t.Logf(format, args...)
	t.FailNow()
}

// SkipNow ends the subtest's goroutine; under Check a skip is a failure.
func (t *checkT) SkipNow() {
	t.mu.Lock()
	t.skipped, t.failed, t.own = true, true, true
	t.output = append(t.output, "skipped: a case that does not run proves nothing")
	t.mu.Unlock()
	runtime.Goexit()
}

// Skip is Log then SkipNow.
func (t *checkT) Skip(args ...any) {
	t.Log(args...)
	t.SkipNow()
}

// Skipf is Logf then SkipNow.
func (t *checkT) Skipf(format string, args ...any) {
	t.Logf(format, args...)
	t.SkipNow()
}

// Skipped reports whether the subtest was skipped.
func (t *checkT) Skipped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipped
}

// Cleanup registers f to run when the subtest and its subtests have
// ended, last registered first.
func (t *checkT) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

// TempDir returns a new directory, removed when the subtest ends.
func (t *checkT) TempDir() string {
	dir, err := os.MkdirTemp("", "conformance-check-")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// ArtifactDir returns a TempDir: Check keeps no artifacts.
func (t *checkT) ArtifactDir() string { return t.TempDir() }

// Attr records the attribute as a log line.
func (t *checkT) Attr(key, value string) { t.Logf("%s: %s", key, value) }

// Output returns a writer whose lines are recorded as log lines.
func (t *checkT) Output() io.Writer { return checkOutput{t} }

// Setenv fails the subtest: the suite's subtests run in parallel, and
// testing forbids Setenv there.
func (t *checkT) Setenv(key, _ string) {
	t.Fatalf("Setenv(%q): not allowed in a parallel test", key)
}

// Chdir fails the subtest, as Setenv does.
func (t *checkT) Chdir(dir string) {
	t.Fatalf("Chdir(%q): not allowed in a parallel test", dir)
}

// checkOutput is the writer of checkT.Output.
type checkOutput struct{ t *checkT }

func (w checkOutput) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		w.t.log(line)
	}
	return len(p), nil
}

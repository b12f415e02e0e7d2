// Package conformance is the test suite that makes a store a sluice store.
//
// Every ports.Store implementation runs it from its own tests, the way
// testing/fstest checks an fs.FS:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) ports.Store {
//			s, err := local.New(local.Config{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { _ = s.Close() })
//			return s
//		})
//	}
//
// Each subtest gets a fresh store from the constructor and its own key
// namespace, conf:{<random id>}:<name>: every key of one subtest shares one
// Redis Cluster hash tag, and the random id keeps parallel runs against one
// shared server apart. Time is a parameter: subtests replay scripted
// timelines of fixed instants and never sleep, so the expected remaining,
// retry-after and reset-after values are exact to the microsecond.
//
// NewReferenceStore is a small, obviously correct store that passes the
// suite; Benchmark measures any store on the request shapes sluice sends.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Run checks that the stores made by newStore behave as ports.Store says.
//
// newStore is called once per subtest and must return a fresh, open store;
// it registers its own cleanup (t.Cleanup) and may call t.Fatal. The
// subtests run one after another, so newStore need not be safe for
// simultaneous use; the store it returns must be.
//
// The suite writes only keys of the form conf:{<random id>}:<name> and
// resets them when a subtest ends, so it may share a server with other
// data. It needs a store that uses the now it is given: a store configured
// to read its own clock (e.g. Redis TIME) cannot pass it.
func Run(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Helper()
	run(testingT{t}, func(t tb) ports.Store { return newStore(t.(testingT).T) })
}

// tb is the part of *testing.T the suite uses. The suite is written against
// it, rather than *testing.T, so that the suite's own tests can drive it
// with a recording fake and prove that broken stores fail named subtests.
type tb interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	// Fatalf reports a failure and ends the current subtest's goroutine.
	Fatalf(format string, args ...any)
	Cleanup(f func())
	// Context is cancelled just before the subtest's cleanups run.
	Context() context.Context
	// Run runs f as a subtest named name, waits for it and reports whether
	// it passed.
	Run(name string, f func(t tb)) bool
}

// testingT adapts *testing.T to tb.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(t tb)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testingT{t}) })
}

// testCase is one named property of the contract.
type testCase struct {
	name string
	run  func(e *env)
}

// run is Run on any tb.
func run(t tb, newStore func(t tb) ports.Store) {
	t.Helper()
	for _, c := range cases() {
		t.Run(c.name, func(t tb) {
			c.run(newEnv(t, newStore(t)))
		})
	}
}

// env is what one subtest works with: its store, its key namespace, its
// epoch t0 and a context.
type env struct {
	t     tb
	store ports.Store
	ctx   context.Context
	ns    string
	// prefix sets a nested subtest's keys apart within the namespace.
	prefix string
	t0     time.Time
	used   map[string]bool
}

func newEnv(t tb, store ports.Store) *env {
	e := &env{
		t:     t,
		store: store,
		ctx:   t.Context(),
		ns:    newNamespace(t),
		// Whole seconds near the wall clock: instants a store sees are
		// plausible, and every offset the suite adds stays whole
		// microseconds, the unit every store counts in.
		t0:   time.Now().Truncate(time.Second),
		used: map[string]bool{},
	}
	// Cleanups run last-in first-out, so this runs before the Close the
	// constructor registered: a shared server keeps no key of the suite,
	// not even those of a window long enough to outlive its TTL budget.
	t.Cleanup(func() {
		for k := range e.used {
			_ = e.store.Reset(context.Background(), k)
		}
	})
	return e
}

// newNamespace returns a random id, unique across runs and processes.
func newNamespace(t interface{ Fatalf(string, ...any) }) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("reading a random namespace: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// key returns the store key of name in the subtest's namespace. Every key
// shares the hash tag {ns}, so one request never spans two cluster slots.
func (e *env) key(name string) string {
	k := "conf:{" + e.ns + "}:" + e.prefix + name
	e.used[k] = true
	return k
}

// sub returns the env of a nested subtest: same store, namespace and t0,
// keys set apart by prefix.
func (e *env) sub(t tb, prefix string) *env {
	s := *e
	s.t = t
	s.prefix = e.prefix + prefix
	return &s
}

// at returns the instant d after t0.
func (e *env) at(d time.Duration) time.Time { return e.t0.Add(d) }

// evaluate calls Evaluate and ends the subtest on an error.
func (e *env) evaluate(label string, now time.Time, limits ...domain.Limit) domain.Result {
	e.t.Helper()
	r, err := e.store.Evaluate(e.ctx, now, limits)
	if err != nil {
		e.t.Fatalf("%s: Evaluate: unexpected error: %v", label, err)
	}
	checkN(e.t, label, r, len(limits))
	return r
}

// peek calls Peek and ends the subtest on an error.
func (e *env) peek(label string, now time.Time, limits ...domain.Limit) domain.Result {
	e.t.Helper()
	r, err := e.store.Peek(e.ctx, now, limits)
	if err != nil {
		e.t.Fatalf("%s: Peek: unexpected error: %v", label, err)
	}
	checkN(e.t, label, r, len(limits))
	return r
}

// reset calls Reset and ends the subtest on an error.
func (e *env) reset(label, key string) {
	e.t.Helper()
	if err := e.store.Reset(e.ctx, key); err != nil {
		e.t.Fatalf("%s: Reset(%q): unexpected error: %v", label, key, err)
	}
}

// consume evaluates n requests of cost 1 on one limit at now and ends the
// subtest unless every one is allowed: the setup of most timelines.
func (e *env) consume(label string, now time.Time, l domain.Limit, n int) {
	e.t.Helper()
	for i := range n {
		if r := e.evaluate(label, now, l); !r.Allowed {
			e.t.Fatalf("%s: setup request %d of %d was refused (remaining %d)", label, i+1, n, r.Remaining)
		}
	}
}

func checkN(t tb, label string, r domain.Result, n int) {
	t.Helper()
	if got := len(r.Statuses()); got != n {
		t.Fatalf("%s: %d statuses in the result, want %d (one per limit)", label, got, n)
	}
}

// status is the expected status of one limit.
type status struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

// checkStatus compares one limit's status with its expectation.
func checkStatus(t tb, label string, got domain.LimitStatus, want status) {
	t.Helper()
	if got.Allowed != want.allowed {
		t.Errorf("%s: Allowed = %t, want %t", label, got.Allowed, want.allowed)
	}
	if got.Remaining != want.remaining {
		t.Errorf("%s: Remaining = %d, want %d", label, got.Remaining, want.remaining)
	}
	if got.RetryAfter != want.retryAfter {
		t.Errorf("%s: RetryAfter = %v, want %v", label, got.RetryAfter, want.retryAfter)
	}
	if got.ResetAfter != want.resetAfter {
		t.Errorf("%s: ResetAfter = %v, want %v", label, got.ResetAfter, want.resetAfter)
	}
}

// outcome is the expected aggregate of a result.
type outcome struct {
	allowed    bool
	limiting   int
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

// checkResult compares a result's aggregate with its expectation.
func checkResult(t tb, label string, got domain.Result, want outcome) {
	t.Helper()
	if got.Allowed != want.allowed {
		t.Errorf("%s: Result.Allowed = %t, want %t", label, got.Allowed, want.allowed)
	}
	if got.Limiting != want.limiting {
		t.Errorf("%s: Result.Limiting = %d, want %d", label, got.Limiting, want.limiting)
	}
	if got.Remaining != want.remaining {
		t.Errorf("%s: Result.Remaining = %d, want %d", label, got.Remaining, want.remaining)
	}
	if got.RetryAfter != want.retryAfter {
		t.Errorf("%s: Result.RetryAfter = %v, want %v", label, got.RetryAfter, want.retryAfter)
	}
	if got.ResetAfter != want.resetAfter {
		t.Errorf("%s: Result.ResetAfter = %v, want %v", label, got.ResetAfter, want.resetAfter)
	}
}

// step is one request of a single-limit timeline.
type step struct {
	at   time.Duration // offset from t0
	cost int64
	peek bool // Peek instead of Evaluate
	want status
}

// replay runs a single-limit timeline on key, checking each step's status
// and that the aggregate mirrors it (one limit: it is its own Limiting).
func (e *env) replay(key string, w domain.Window, steps []step) {
	e.t.Helper()
	for i, s := range steps {
		l := domain.Limit{Key: key, Window: w, Cost: s.cost}
		op, call := "evaluate", e.evaluate
		if s.peek {
			op, call = "peek", e.peek
		}
		label := stepLabel(i, op, s)
		r := call(label, e.at(s.at), l)
		checkStatus(e.t, label, r.Status(0), s.want)
		retry := s.want.retryAfter
		if s.want.allowed {
			retry = 0
		}
		checkResult(e.t, label+" (aggregate)", r, outcome{
			allowed:    s.want.allowed,
			limiting:   0,
			remaining:  s.want.remaining,
			retryAfter: retry,
			resetAfter: s.want.resetAfter,
		})
	}
}

func stepLabel(i int, op string, s step) string {
	return fmt.Sprintf("step %d (%s cost %d at t0+%v)", i+1, op, s.cost, s.at)
}

// isLimitError reports whether err is the *domain.LimitError the store
// contract asks for.
func isLimitError(err error) (*domain.LimitError, bool) {
	var le *domain.LimitError
	if !errors.As(err, &le) || !errors.Is(err, domain.ErrInvalidLimit) {
		return nil, false
	}
	return le, true
}

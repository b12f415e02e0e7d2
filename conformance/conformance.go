// Package conformance is the test suite that makes a store a sluice store.
//
// Every ports.Store implementation runs it from its own tests, the way
// testing/fstest checks an fs.FS:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t testing.TB) ports.Store {
//			s, err := local.New(local.Config{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { _ = s.Close() })
//			return s
//		})
//	}
//
// Run checks the whole ports.Store contract: exact limits, cost, key
// isolation, all-or-nothing across keys, both algorithms, peek, reset,
// context, invalid input, concurrency, Close, and timelines that move the
// caller's clock (units leaving a window at an exact instant, a clock
// going backwards). It also holds a store to the state rules of
// docs/adr/009: a key keeps its consumed units through a change of its
// window's limit, period or algorithm (at one instant and mid-window, both
// directions, cost > 1, never more than the limit across the change), and
// a sliding log keeps counting them for instants out of order by less than
// the store's grace (Features.Grace). A store that implements the optional
// ports.Repeater (found by type assertion) must answer n repeated requests
// exactly as n sequential ones; one that does not is not failed for it.
// Likewise a store that implements ports.Reserver is held to the contract
// of reservations, leases and concurrency windows (docs/adr/012: refunds
// never below zero, charges past the limit, idempotence, expiry, Renew,
// all or nothing across rate and concurrency windows, exact under 200
// goroutines, crashed holders); one that does not is reported in the test
// log. A store that implements ports.Allotter must let allotments
// (docs/adr/019: a reservation made ahead of the instant, spent in
// process at any instant of its hold) never admit past a window, at the
// instants the requests were admitted, across instances, crashes and a
// lowered limit, and count units reserved ahead for every caller. A store
// that implements ports.Batcher must decide a batch, in
// order, exactly as the same requests sent one by one, each request's
// fault its own (docs/adr/018). A store that implements ports.Forgetter
// must say whether a key held state (a counted key, not one never
// written, peeked or already reset). Sliding-log windows that share a key (docs/adr/015) must record
// each request once, count each window in its own period, keep units for
// the longest period, settle once, and answer, step by step on seeded
// random timelines, exactly as the same windows on keys of their own.
// Each case is a subtest named for what it proves; each
// gets a fresh store from the constructor and its own key namespace,
// conf:{<random id>}:<name>, so the cases run in parallel, even against
// one shared server, and every key of a case shares one Redis Cluster hash
// tag. Time is a parameter: cases pass fixed instants and never sleep, so
// remaining, retry-after and reset-after are checked to the microsecond.
//
// A store that differs from the full contract, or offers more, says so
// with Features and RunWith:
//
//	conformance.RunWith(t, conformance.Features{ServerTime: true, Shared: true}, newStore)
//
// A store that reads its own clock (ServerTime) runs every case that does
// not script the caller's clock; the cases left out are listed in the
// test log, never counted as passes.
//
// Check runs the suite without a *testing.T and returns the cases that
// failed, so a test can assert that a broken store fails what it should:
//
//	require.Contains(t, conformance.Check(conformance.Features{}, newBrokenStore).Cases(), "AllOrNothingAcrossNineKeys")
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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Features declares how a store departs from, or goes beyond, the full
// ports.Store contract. The zero value asks for that contract exactly,
// and nothing beyond it.
type Features struct {
	// ServerTime declares a store that ignores the now it is given and
	// reads its own clock (the Redis store's default, which reads Redis
	// TIME). The cases that script the caller's clock do not apply and
	// are not run. The others use windows long enough that nothing leaves
	// them while the case runs, so every count stays exact; a retry-after
	// or reset-after may then be short of the scripted value by as much
	// time as the case has taken so far, never long.
	//
	// The store must read its clock as part of each atomic decision, as
	// the Redis script reads TIME, so that a decision never sees an
	// earlier instant than one committed before it: a clock read before
	// taking the lock lets concurrent requests arrive out of order, and
	// GCRA then refuses a burst's last unit.
	ServerTime bool
	// Shared declares that the stores the constructor makes within one
	// test count on one state, as the instances of a fleet do on one Redis:
	// a case then opens two stores and checks that each sees the other's
	// units and resets, and that closing one leaves the other working.
	Shared bool
	// Grace is the store's grace for instants out of order (rule S5 of
	// docs/adr/009): a sliding log forgets a unit only once it is older
	// than the latest instant the key has seen minus its period and
	// min(Grace, period), so a caller lagging that instant by less than
	// Grace still sees every unit of its window. The local store's is
	// Config.IdleGrace. The out-of-order case steps back by less than
	// min(Grace, 6 s); a store that declares zero runs it with no step
	// back, so it is never skipped.
	Grace time.Duration

	// compactOnly leaves out the large timeline of the shared-log
	// differential (sharedlogs.go). Only the suite's own tests set it, for
	// the faulty stores that case does not target: those stores keep one
	// timestamp per unit and scan them all per window, so thousands of
	// units in each of thirty faulty stores took minutes under the race
	// detector, to prove nothing the faults that list the case don't.
	compactOnly bool
}

// Run checks that the stores made by newStore keep the whole ports.Store
// contract. It is RunWith with the zero Features.
func Run(t *testing.T, newStore func(t testing.TB) ports.Store) {
	t.Helper()
	RunWith(t, Features{}, newStore)
}

// RunWith checks that the stores made by newStore behave as ports.Store
// says, given the features f the store declares. Each case is a parallel
// subtest of t.
//
// newStore is called once per case (twice in the Shared case), from the
// case's own goroutine, with the case's t, and must return a fresh, open
// store; it registers the store's cleanup (t.Cleanup) and may call
// t.Fatal. Calls run in parallel, so newStore must be safe for
// simultaneous use, as must the stores.
//
// The suite writes only keys of the form conf:{<random id>}:<name> and
// resets them when a case ends, so it may share a server with other data.
func RunWith(t *testing.T, f Features, newStore func(t testing.TB) ports.Store) {
	t.Helper()
	run(testingT{t}, f, newStore)
}

// tb is what the suite needs of a test: testing.TB, plus subtests and
// Parallel. The suite is written against it so that Check can drive it
// with its own implementation.
type tb interface {
	testing.TB
	// Run runs f as a subtest named name and reports whether it passed
	// (true for a parallel subtest still running).
	Run(name string, f func(t tb)) bool
	// Parallel lets the subtest run alongside its parallel siblings once
	// the parent's function has returned.
	Parallel()
	// unwrap returns the testing.TB handed to the store's constructor.
	unwrap() testing.TB
}

// testingT adapts *testing.T to tb.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(t tb)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testingT{t}) })
}

func (t testingT) unwrap() testing.TB { return t.T }

// run registers the cases that apply to f as parallel subtests of t, and
// logs the others with the reason they were not run.
func run(t tb, f Features, newStore func(t testing.TB) ports.Store) {
	t.Helper()
	var reasons []string
	notRun := map[string][]string{}
	for _, c := range cases() {
		if why := c.notApplicable(f); why != "" {
			if notRun[why] == nil {
				reasons = append(reasons, why)
			}
			notRun[why] = append(notRun[why], c.name)
		}
	}
	for _, why := range reasons {
		t.Logf("not run with Features%+v, because %s: %s", f, why, strings.Join(notRun[why], ", "))
	}
	for _, c := range cases() {
		if c.notApplicable(f) != "" {
			continue
		}
		t.Run(c.name, func(t tb) {
			// Every case has its own store and key namespace.
			t.Parallel()
			c.run(newEnv(t, f, newStore))
		})
	}
}

// testCase is one named property of the contract.
type testCase struct {
	name string
	// scripted marks a case that moves the caller's clock: it cannot hold
	// on a store that reads its own.
	scripted bool
	// shared marks a case that needs Features.Shared.
	shared bool
	run    func(e *env)
}

// notApplicable returns why c does not apply to a store with features f,
// or "" when it does.
func (c testCase) notApplicable(f Features) string {
	switch {
	case c.scripted && f.ServerTime:
		return "they script the caller's clock, which a ServerTime store ignores"
	case c.shared && !f.Shared:
		return "they need stores that share their state, and Shared is not declared"
	}
	return ""
}

// env is what one case works with: its store, its key namespace, its
// epoch t0 and a context.
type env struct {
	t     tb
	store ports.Store
	// open makes another store, for the Shared case.
	open func() ports.Store
	ctx  context.Context
	ns   string
	// prefix sets a nested subtest's keys apart within the namespace.
	prefix string
	t0     time.Time
	// ownClock is Features.ServerTime; start is when the case began, on
	// this machine's clock, so a duration may fall short by time.Since(start).
	ownClock bool
	start    time.Time
	// grace is Features.Grace.
	grace time.Duration
	// compact is Features.compactOnly.
	compact bool
	keys    *keySet
}

// keySet is the keys a case used, reset when it ends. Parallel nested
// subtests add to it.
type keySet struct {
	mu   sync.Mutex
	used map[string]bool
}

func newEnv(t tb, f Features, newStore func(t testing.TB) ports.Store) *env {
	e := &env{
		t:     t,
		store: newStore(t.unwrap()),
		open:  func() ports.Store { return newStore(t.unwrap()) },
		ctx:   t.Context(),
		ns:    newNamespace(t),
		// Whole seconds near the wall clock: instants a store sees are
		// plausible, and every offset the suite adds stays whole
		// microseconds, the unit every store counts in.
		t0:       time.Now().Truncate(time.Second),
		ownClock: f.ServerTime,
		grace:    f.Grace,
		compact:  f.compactOnly,
		keys:     &keySet{used: map[string]bool{}},
	}
	// Cleanups run last-in first-out, so this runs before the Close the
	// constructor registered: a shared server keeps no key of the suite,
	// not even those of a window long enough to outlive its TTL budget.
	t.Cleanup(func() {
		e.keys.mu.Lock()
		defer e.keys.mu.Unlock()
		for k := range e.keys.used {
			_ = e.store.Reset(context.Background(), k)
		}
	})
	e.start = time.Now()
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

// key returns the store key of name in the case's namespace. Every key
// shares the hash tag {ns}, so one request never spans two cluster slots.
func (e *env) key(name string) string {
	k := "conf:{" + e.ns + "}:" + e.prefix + name
	e.keys.mu.Lock()
	e.keys.used[k] = true
	e.keys.mu.Unlock()
	return k
}

// sub returns the env of a nested subtest: same store, namespace and t0,
// keys set apart by prefix.
func (e *env) sub(t tb, prefix string) *env {
	s := *e
	s.t = t
	s.ctx = t.Context()
	s.prefix = e.prefix + prefix
	return &s
}

// at returns the instant d after t0. Only scripted cases move the clock:
// a case that applies to a ServerTime store passes t0 alone.
func (e *env) at(d time.Duration) time.Time {
	if d != 0 && e.ownClock {
		e.t.Fatalf("conformance: a case run on a store with its own clock scripted t0%+v; it must be marked scripted", d)
	}
	return e.t0.Add(d)
}

// evaluate calls Evaluate and ends the subtest on an error.
func (e *env) evaluate(label string, now time.Time, limits ...domain.Limit) domain.Result {
	e.t.Helper()
	r, err := e.store.Evaluate(e.ctx, now, limits)
	if err != nil {
		e.t.Fatalf("%s: Evaluate: unexpected error: %v", label, err)
	}
	e.checkN(label, r, len(limits))
	return r
}

// peek calls Peek and ends the subtest on an error.
func (e *env) peek(label string, now time.Time, limits ...domain.Limit) domain.Result {
	e.t.Helper()
	r, err := e.store.Peek(e.ctx, now, limits)
	if err != nil {
		e.t.Fatalf("%s: Peek: unexpected error: %v", label, err)
	}
	e.checkN(label, r, len(limits))
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

func (e *env) checkN(label string, r domain.Result, n int) {
	e.t.Helper()
	if got := len(r.Statuses()); got != n {
		e.t.Fatalf("%s: %d statuses in the result, want %d (one per limit)", label, got, n)
	}
}

// clockSlack absorbs the truncation of instants to whole microseconds and
// any difference in rate between this machine's clock and the store's.
const clockSlack = time.Millisecond

// checkDuration compares a retry-after or reset-after with the value the
// case expects at its scripted instant. On a store with its own clock
// every duration the suite checks runs from a unit recorded during the
// case to now, so it may be short by the time the case has taken, never
// long.
func (e *env) checkDuration(label, field string, got, want time.Duration) {
	e.t.Helper()
	if !e.ownClock {
		if got != want {
			e.t.Errorf("%s: %s = %v, want %v", label, field, got, want)
		}
		return
	}
	taken := time.Since(e.start) + clockSlack
	if got > want || got < want-taken {
		e.t.Errorf("%s: %s = %v, want %v, or less by at most the %v the case has taken (the store reads its own clock)", label, field, got, want, taken)
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
func (e *env) checkStatus(label string, got domain.LimitStatus, want status) {
	e.t.Helper()
	if got.Allowed != want.allowed {
		e.t.Errorf("%s: Allowed = %t, want %t", label, got.Allowed, want.allowed)
	}
	if got.Remaining != want.remaining {
		e.t.Errorf("%s: Remaining = %d, want %d", label, got.Remaining, want.remaining)
	}
	e.checkDuration(label, "RetryAfter", got.RetryAfter, want.retryAfter)
	e.checkDuration(label, "ResetAfter", got.ResetAfter, want.resetAfter)
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
func (e *env) checkResult(label string, got domain.Result, want outcome) {
	e.t.Helper()
	if got.Allowed != want.allowed {
		e.t.Errorf("%s: Result.Allowed = %t, want %t", label, got.Allowed, want.allowed)
	}
	if got.Limiting != want.limiting {
		e.t.Errorf("%s: Result.Limiting = %d, want %d", label, got.Limiting, want.limiting)
	}
	if got.Remaining != want.remaining {
		e.t.Errorf("%s: Result.Remaining = %d, want %d", label, got.Remaining, want.remaining)
	}
	e.checkDuration(label, "Result.RetryAfter", got.RetryAfter, want.retryAfter)
	e.checkDuration(label, "Result.ResetAfter", got.ResetAfter, want.resetAfter)
}

// step is one request of a single-limit timeline.
type step struct {
	at   time.Duration // offset from t0
	cost int64
	peek bool // Peek instead of Evaluate
	want status
	// refill, when set, is the time a unit of the window takes to come
	// back. On a store with its own clock the units that came back while
	// the case ran may show in Remaining, at most one per refill.
	refill time.Duration
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
		if got := r.Status(0).Remaining; e.ownClock && s.refill > 0 && got > s.want.remaining {
			refilled := int64((time.Since(e.start) + clockSlack) / s.refill)
			if got <= s.want.remaining+refilled {
				s.want.remaining = got
			}
		}
		e.checkStatus(label, r.Status(0), s.want)
		retry := s.want.retryAfter
		if s.want.allowed {
			retry = 0
		}
		e.checkResult(label+" (aggregate)", r, outcome{
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

package app_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
)

// memReserver is a small reference Reserver for the app's tests: one lock
// around plain maps, so every call is one step. Every rate window counts
// as a sliding log (the tests that use it configure sliding logs only);
// a concurrency window counts the slots of unexpired, unsettled leases.
// With partitioned set it implements ports.Partitioned by hash tag, each
// tag its own partition, and refuses a call whose keys span two, as a
// Redis Cluster does.
type memReserver struct {
	mu          sync.Mutex
	units       map[string][]stamp // rate windows: units by key
	leases      map[string]*leaseRec
	partitioned bool
	partIDs     map[string]int
	calls       map[ports.StoreOp]*atomic.Int64
	closed      bool
	// failTag, when set, makes a call whose first key carries that hash
	// tag fail as an unavailable store would.
	failTag string
}

// stamp is cost units taken at an instant by a lease ("" for Evaluate).
type stamp struct {
	at    int64
	n     int64
	lease string
}

// leaseRec is a lease's record: its concurrency slots by key, and when
// it expires.
type leaseRec struct {
	at, expiry int64
	settled    bool
	slots      map[string]int64
}

func newMemReserver(partitioned bool) *memReserver {
	m := &memReserver{units: map[string][]stamp{}, leases: map[string]*leaseRec{}, partitioned: partitioned, partIDs: map[string]int{}, calls: map[ports.StoreOp]*atomic.Int64{}}
	for _, op := range []ports.StoreOp{ports.OpEvaluate, ports.OpPeek, ports.OpReserve, ports.OpSettle, ports.OpRenew} {
		m.calls[op] = &atomic.Int64{}
	}
	return m
}

var (
	_ ports.Store       = (*memReserver)(nil)
	_ ports.Reserver    = (*memReserver)(nil)
	_ ports.Partitioned = (*memReserver)(nil)
)

// Partition implements ports.Partitioned.
func (m *memReserver) Partition(key string) (int, bool) {
	if !m.partitioned {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.partition(key), true
}

func (m *memReserver) partition(key string) int {
	tag := hashTag(key)
	id, ok := m.partIDs[tag]
	if !ok {
		id = len(m.partIDs)
		m.partIDs[tag] = id
	}
	return id
}

// count is the units of key inside (now-p, now].
func (m *memReserver) count(key string, now, p int64) int64 {
	var n int64
	for _, s := range m.units[key] {
		if s.at > now-p && s.at <= now {
			n += s.n
		}
	}
	return n
}

// held is the slots of key held by live leases at now.
func (m *memReserver) held(key string, now int64) (n int64, expiries []int64) {
	for _, l := range m.leases {
		if c := l.slots[key]; c > 0 && !l.settled && l.expiry > now {
			n += c
			expiries = append(expiries, l.expiry)
		}
	}
	slices.Sort(expiries)
	return n, expiries
}

func (m *memReserver) check(now int64, l domain.Limit) domain.LimitStatus {
	w := l.Window
	if w.Algorithm == domain.Concurrency {
		n, exp := m.held(l.Key, now)
		st := domain.LimitStatus{Allowed: n+l.Cost <= w.Limit, Remaining: max(w.Limit-n, 0)}
		if len(exp) > 0 {
			st.ResetAfter = domain.Micros(exp[len(exp)-1] - now)
			if !st.Allowed {
				st.RetryAfter = domain.Micros(exp[0] - now)
			}
		}
		return st
	}
	p := w.PeriodMicros()
	n := m.count(l.Key, now, p)
	st := domain.LimitStatus{Allowed: n+l.Cost <= w.Limit, Remaining: max(w.Limit-n, 0)}
	var in []stamp
	for _, s := range m.units[l.Key] {
		if s.at > now-p && s.at <= now {
			in = append(in, s)
		}
	}
	slices.SortFunc(in, func(a, b stamp) int { return int(a.at - b.at) })
	if len(in) > 0 {
		st.ResetAfter = domain.Micros(in[len(in)-1].at + p - now)
	}
	if !st.Allowed {
		need := n + l.Cost - w.Limit
		for _, s := range in {
			need -= s.n
			if need <= 0 {
				st.RetryAfter = domain.Micros(s.at + p - now)
				break
			}
		}
	}
	return st
}

func (m *memReserver) decide(ctx context.Context, op ports.StoreOp, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	m.calls[op].Add(1)
	if err := ctx.Err(); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return domain.Result{}, domain.Lease{}, domain.ErrStoreClosed
	}
	if m.failTag != "" && len(limits) > 0 && hashTag(limits[0].Key) == m.failTag {
		return domain.Result{}, domain.Lease{}, fmt.Errorf("%w: injected on one partition", domain.ErrStoreUnavailable)
	}
	validate := domain.ValidateHeld
	if op == ports.OpEvaluate {
		validate = domain.ValidateLimits
	}
	if err := validate(limits); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if m.partitioned {
		for _, l := range limits[1:] {
			if m.partition(l.Key) != m.partition(limits[0].Key) {
				return domain.Result{}, domain.Lease{}, domain.ErrCrossSlot
			}
		}
	}
	at := now.UnixMicro()
	st := make([]domain.LimitStatus, len(limits))
	for i, l := range limits {
		st[i] = m.check(at, l)
	}
	res := domain.NewResult(st)
	if !res.Allowed || op == ports.OpPeek {
		return res, domain.Lease{}, nil
	}
	var lease domain.Lease
	var rec *leaseRec
	if op == ports.OpReserve {
		var id [16]byte
		_, _ = rand.Read(id[:])
		lease = domain.Lease{ID: hex.EncodeToString(id[:]), At: now, TTL: ttl}
		rec = &leaseRec{at: at, expiry: at + ttl.Microseconds(), slots: map[string]int64{}}
		m.leases[lease.ID] = rec
	}
	for i, l := range limits {
		if l.Window.Algorithm == domain.Concurrency {
			rec.slots[l.Key] += l.Cost
		} else {
			m.units[l.Key] = append(m.units[l.Key], stamp{at: at, n: l.Cost, lease: lease.ID})
		}
		st[i] = m.check(at, l)
		st[i].Allowed, st[i].RetryAfter = true, 0 // the status after consumption
	}
	return domain.NewResult(st), lease, nil
}

func (m *memReserver) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	res, _, err := m.decide(ctx, ports.OpEvaluate, now, limits, 0)
	return res, err
}

func (m *memReserver) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	res, _, err := m.decide(ctx, ports.OpPeek, now, limits, 0)
	return res, err
}

func (m *memReserver) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	return m.decide(ctx, ports.OpReserve, now, limits, ttl)
}

func (m *memReserver) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	m.calls[ports.OpSettle].Add(1)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !lease.Valid() {
		return 0, &domain.LimitError{Index: -1, Field: "lease", Reason: "invalid"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failTag != "" && len(limits) > 0 && hashTag(limits[0].Key) == m.failTag {
		return 0, fmt.Errorf("%w: injected on one partition", domain.ErrStoreUnavailable)
	}
	rec := m.leases[lease.ID]
	at := now.UnixMicro()
	switch {
	case rec == nil:
		return domain.Expired, nil
	case rec.settled:
		return domain.AlreadySettled, nil
	case rec.expiry <= at:
		return domain.Expired, nil
	}
	rec.settled = true
	for _, l := range limits {
		if l.Window.Algorithm == domain.Concurrency {
			continue
		}
		if d := l.Cost - actual; d > 0 {
			// Refund the lease's own units, while still counted.
			us := m.units[l.Key]
			for i := range us {
				if us[i].lease == lease.ID && us[i].at > at-l.Window.PeriodMicros() {
					take := min(us[i].n, d)
					us[i].n -= take
					d -= take
				}
			}
		} else if d < 0 {
			m.units[l.Key] = append(m.units[l.Key], stamp{at: at, n: min(-d, l.Window.Limit)})
		}
	}
	return domain.Settled, nil
}

func (m *memReserver) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	m.calls[ports.OpRenew].Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.leases[lease.ID]
	at := now.UnixMicro()
	if rec == nil || rec.settled || rec.expiry <= at {
		return domain.Lease{}, fmt.Errorf("mem: %w", domain.ErrLeaseEnded)
	}
	rec.expiry = at + ttl.Microseconds()
	lease.TTL = ttl
	lease.At = now
	return lease, nil
}

func (m *memReserver) Reset(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.units, key)
	for _, l := range m.leases {
		delete(l.slots, key)
	}
	return nil
}

func (m *memReserver) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// keyUnits is the units key counts inside (now-p, now], for the tests'
// reads of the store.
func (m *memReserver) keyUnits(key string, now time.Time, p time.Duration) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count(key, now.UnixMicro(), p.Microseconds())
}

// keys lists every key holding units or slots.
func (m *memReserver) keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k, us := range m.units {
		for _, s := range us {
			if s.n > 0 {
				out = append(out, k)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// reserveRig is a Limiter with a fake clock on a primary store (store
// when it is a memReserver).
type reserveRig struct {
	l     *app.Limiter
	clock *fakeclock.Clock
	store *memReserver
	rec   *recorder
}

func newReserveRig(t *testing.T, cfg app.Config, primary ports.Store, fallback ports.Store) *reserveRig {
	t.Helper()
	r := &reserveRig{clock: fakeclock.New(t0), rec: &recorder{}}
	r.store, _ = primary.(*memReserver)
	if fallback == nil {
		fallback = newMemReserver(false)
	}
	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Clock: r.clock, Prober: okProber{}, Recorder: r.rec})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	r.l = l
	return r
}

// okProber always answers.
type okProber struct{}

func (okProber) Probe(context.Context) error { return nil }

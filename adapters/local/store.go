package local

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

var (
	_ ports.Store     = (*Store)(nil)
	_ ports.Forgetter = (*Store)(nil)
)

// errClosed is returned by every method after Close.
var errClosed = fmt.Errorf("local: %w", domain.ErrStoreClosed)

// noInstant marks the latest-instant clock before the first call.
const noInstant = math.MinInt64

// hwStep is how far (µs) an instant must pass the recorded latest instant
// before it is recorded: it keeps concurrent decisions from writing one
// shared word on every call, and the lag only ever makes keys look live
// longer.
const hwStep = 1000

// getBufferItems is ristretto's recommended Get buffer size.
const getBufferItems = 64

// Accesses reported to ristretto's frequency sketch, which its admission
// and eviction policy reads: the first sampleFirst accesses of a key (what
// tells a key used a few times from one used once), then one in
// sampleEvery+1. Reporting every access would cost a cache lookup (two
// hashes and a lock) per key per decision; sampling keeps the keys'
// relative frequencies.
const (
	sampleFirst = 4
	sampleEvery = 31 // a power of two, minus one
)

// Store is the in-process ports.Store. Create it with New; it is safe for
// simultaneous use by any number of goroutines. See the package doc for its
// guarantees.
type Store struct {
	plan   plan
	cache  *ristretto.Cache[string, *entry]
	seed   maphash.Seed
	seed2  maphash.Seed // ristretto's conflict hash
	shards [numShards]shard

	sweepEvery int64 // µs
	grace      int64 // µs: IdleGrace

	closed  atomic.Bool // no new call may start
	closing atomic.Bool // ristretto is being closed: ignore its callbacks
	// rw is held shared around the sweeper's Dels and Wait, which may block
	// on ristretto's buffer, and exclusively by Close. Decisions never take
	// it: every cache call they make happens under a shard lock or a live
	// entry's lock, which Close takes in turn (see Close).
	rw        sync.RWMutex
	closeOnce sync.Once
	// sweepMu runs one sweep (or batch of Dels) at a time, so that a sweep
	// returns with every idle key it found forgotten.
	sweepMu sync.Mutex

	hw        atomic.Int64 // latest instant seen (µs), or noInstant
	nextSweep atomic.Int64 // instant (µs) that wakes the sweeper, or noInstant
	_         [64]byte     // keep the words decisions read off the ones the slow path writes

	nextID atomic.Uint64
	// resets are the listeners of reset notices (resets.go).
	resets resetListeners
	// The shares of MaxMemory (see plan.shares) and what counts against
	// them: every entry outside ristretto (outBytes), those on their way to
	// it (inflightBytes, inflight) and the keys its maps hold (slots).
	outCap, inflightCap atomic.Int64
	// cacheRoom is what ristretto's share has left, as last seen from its
	// callbacks: the keys held outside it may borrow it (over).
	cacheRoom                         atomic.Int64
	outBytes, inflightBytes, inflight atomic.Int64
	slots, peakSlots                  atomic.Int64 // lru lists the pending entries the store may forget.
	lru                               lru

	// handoff holds the entries the in-flight limit kept from ristretto.
	handoff handoffQueue

	wake, delWake, offerWake, stop, sweepDone chan struct{}

	stats struct {
		dropped, expired, evicted, rejected, setsDropped atomic.Uint64
	}
}

// New returns a Store configured by cfg (zero values mean the documented
// defaults). It starts ristretto's goroutines and the idle sweeper; Close
// stops them.
func New(cfg Config, opts ...Option) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	p, err := newPlan(cfg, o)
	if err != nil {
		return nil, err
	}
	s := &Store{
		plan:       p,
		seed:       maphash.MakeSeed(),
		seed2:      maphash.MakeSeed(),
		sweepEvery: int64(cfg.SweepInterval / time.Microsecond),
		grace:      int64(cfg.IdleGrace / time.Microsecond),
		wake:       make(chan struct{}, 1),
		delWake:    make(chan struct{}, 1),
		offerWake:  make(chan struct{}, 1),
		stop:       make(chan struct{}),
		sweepDone:  make(chan struct{}),
	}
	s.lru.init(&s.outBytes)
	s.hw.Store(noInstant)
	s.nextSweep.Store(noInstant)
	for i := range s.shards {
		s.shards[i].tab.Store(newTable(minTableSlots))
	}
	cacheCost, out := p.shares(0)
	s.outCap.Store(out)
	s.inflightCap.Store(out / 2)
	s.cacheRoom.Store(cacheCost)
	cache, err := ristretto.NewCache(&ristretto.Config[string, *entry]{
		NumCounters: p.counters,
		MaxCost:     cacheCost,
		BufferItems: getBufferItems,
		Metrics:     o.cacheMetrics,
		// The store counts every byte itself, ristretto's item included.
		IgnoreInternalCost: true,
		// A per-store seed keeps crafted keys from colliding on purpose; the
		// second hash keeps two keys from ever sharing a cache slot.
		KeyToHash: func(key string) (uint64, uint64) { return s.hash(key), maphash.String(s.seed2, key) },
		Cost:      s.admitting,
		OnEvict:   s.evicted,
		OnReject:  s.rejected,
	})
	if err != nil {
		return nil, &domain.ConfigError{Field: "local", Reason: "ristretto refused the configuration", Err: err}
	}
	s.cache = cache
	go s.sweeper()
	return s, nil
}

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// hashIn returns the hash of limits[i].Key, hash[:i] holding those of the
// earlier limits: a key that is the very string of an earlier limit's
// (the windows of a shared log, docs/adr/015, as a caller builds them)
// takes its hash without hashing it again.
func (s *Store) hashIn(limits []domain.Limit, i int, hash *[domain.MaxLimits]uint64) uint64 {
	k := limits[i].Key
	for j := range i {
		if o := limits[j].Key; len(o) == len(k) && unsafe.StringData(o) == unsafe.StringData(k) {
			return hash[j]
		}
	}
	return s.hash(k)
}

// Evaluate checks limits at now and, only if every one admits its cost,
// consumes the cost on every key (see ports.Store).
func (s *Store) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if len(limits) == 1 {
		var st [1]domain.LimitStatus
		if err := s.decide(ctx, now, limits, true, st[:]); err != nil {
			return domain.Result{}, err
		}
		// NewResult is called here, not in decide: a Result is over 500
		// bytes, and every function it is returned through copies it.
		return domain.NewResult(st[:]), nil
	}
	var st [domain.MaxLimits]domain.LimitStatus
	if err := s.decide(ctx, now, limits, true, st[:]); err != nil {
		return domain.Result{}, err
	}
	return domain.NewResult(st[:len(limits)]), nil
}

// Peek answers as Evaluate would at now, consuming nothing. It creates no
// state for keys it has not seen.
func (s *Store) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if len(limits) == 1 {
		var st [1]domain.LimitStatus
		if err := s.decide(ctx, now, limits, false, st[:]); err != nil {
			return domain.Result{}, err
		}
		return domain.NewResult(st[:]), nil
	}
	var st [domain.MaxLimits]domain.LimitStatus
	if err := s.decide(ctx, now, limits, false, st[:]); err != nil {
		return domain.Result{}, err
	}
	return domain.NewResult(st[:len(limits)]), nil
}

// Follow-up work of one entry, done after the decision unlocked it.
const (
	afterTouch  uint8 = 1 << iota // found outside the cache without the shard lock
	afterRecost                   // its sliding log outgrew its estimate
	afterTrim                     // found or made under the shard lock
)

// decide is Evaluate (commit) and Peek: find every entry, lock them all,
// check every limit, and consume on every key only if all allowed. It
// writes the statuses, in request order, to st (at least len(limits)
// long, once the limits are valid).
func (s *Store) decide(ctx context.Context, now time.Time, limits []domain.Limit, commit bool, st []domain.LimitStatus) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if n := len(limits); n == 0 || n > domain.MaxLimits || n == 1 && !limitOK(&limits[0]) {
		if err := validate(limits, commit); err != nil {
			return err
		}
	}
	if len(limits) == 1 {
		if s.closed.Load() {
			return errClosed
		}
		t := now.UnixMicro()
		s.observe(t)
		var err error
		st[0], err = s.decideOne(&limits[0], t, commit)
		return err
	}
	var b batch
	for i := range limits {
		b.hash[i] = s.hashIn(limits, i, &b.hash)
	}
	if err := validateMany(limits, &b, commit); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	t := now.UnixMicro()
	s.observe(t)
	return s.decideMany(&b, limits, t, commit, st)
}

// validate checks a request: for Evaluate (commit) by
// domain.ValidateLimits, which refuses concurrency windows; for Peek by
// domain.ValidateHeld, which accepts them (docs/adr/012).
func validate(limits []domain.Limit, commit bool) error {
	if commit {
		return domain.ValidateLimits(limits)
	}
	return domain.ValidateHeld(limits)
}

// limitOK reports whether l, alone, is a valid rate limit (a GCRA or
// sliding-log window, which Evaluate and Peek both accept): a test of the
// common case in a few comparisons, where validate's calls cost a
// nine-key decision a tenth of its time. Every limit it accepts, validate
// accepts; the others (a concurrency window, any offence) go to validate,
// which decides and names the offence.
func limitOK(l *domain.Limit) bool {
	w := &l.Window
	switch w.Algorithm {
	case domain.GCRA:
	case domain.SlidingLog:
		if w.Limit > domain.MaxSlidingLogLimit {
			return false
		}
	default:
		return false
	}
	return l.Key != "" && len(l.Key) <= domain.MaxKeyLen &&
		w.Limit >= 1 && w.Limit <= domain.MaxLimit &&
		w.Period >= domain.MinPeriod && w.Period <= domain.MaxPeriod && w.Period%time.Microsecond == 0 &&
		l.Cost >= 1 && l.Cost <= w.Limit
}

// validateMany checks a request of several limits as validate does,
// without its comparison of every pair of keys (a string comparison per
// pair, the dearest part of a nine-key decision after the algorithms):
// each limit is checked alone, and keys named twice are found by their
// hashes, checked by canShare and linked in b (a shared log,
// docs/adr/015). A refusal comes from validate on the whole request, so
// that it is the same *domain.LimitError.
func validateMany(limits []domain.Limit, b *batch, commit bool) error {
	for i := range limits {
		if !limitOK(&limits[i]) && validate(limits[i:i+1], commit) != nil {
			return validate(limits, commit)
		}
		for j := range i {
			if b.hash[j] != b.hash[i] || limits[j].Key != limits[i].Key {
				continue
			}
			if !canShare(&limits[j], &limits[i]) {
				return validate(limits, commit)
			}
			if b.of[i] == 0 {
				b.join(limits, i, j)
			}
		}
	}
	return nil
}

// canShare reports whether two limits of a request may name one key,
// as domain.ValidateHeld says: sliding-log windows of the same cost, not
// the same window twice.
func canShare(a, b *domain.Limit) bool {
	return a.Window.Algorithm == domain.SlidingLog && b.Window.Algorithm == domain.SlidingLog &&
		a.Cost == b.Cost && (a.Window.Period != b.Window.Period || a.Window.Limit != b.Window.Limit)
}

// decideOne is decide for a single limit, the most common request: one
// lock-free load, one lock, no batch.
func (s *Store) decideOne(l *domain.Limit, t int64, commit bool) (domain.LimitStatus, error) {
	h := s.hash(l.Key)
	e := s.load(h, l.Key)
	var after uint8
	for {
		if e == nil {
			var err error
			if e, err = s.lookup(h, l, t, commit); err != nil {
				return domain.LimitStatus{}, err
			}
			if e == nil {
				return check(nil, l, t, s.grace), nil
			}
			after |= afterTrim
		}
		e.mu.Lock()
		if !e.dead {
			break
		}
		e.mu.Unlock()
		e = nil
	}
	if !s.access(e, t) && after&afterTrim == 0 {
		after |= afterTouch
	}
	st := check(e, l, t, s.grace)
	if commit && st.Allowed {
		var grew bool
		if st, grew = e.commitLocked(&l.Window, l.Cost, t, s.grace, st); grew {
			after |= afterRecost
		}
	}
	e.mu.Unlock()
	if after != 0 {
		s.settle(e, after)
	}
	return st, nil
}

// batch is the entries of one decision, on the stack.
type batch struct {
	hash  [domain.MaxLimits]uint64
	ents  [domain.MaxLimits]*entry
	order [domain.MaxLimits]uint8 // lock order: indexes sorted by entry id
	after [domain.MaxLimits]uint8 // follow-up work once unlocked
	// of[i] is j+1 when limit i names the key of an earlier limit j, the
	// first to name it (domain.SharesLog), 0 otherwise: a shared log
	// (docs/adr/015), looked up, locked and written through limit j
	// alone. shared says whether any limit shares a key.
	of [domain.MaxLimits]uint8
	// group[j] is g+1 when later limits share limit j's key, logs[g]
	// then being the longest period and the largest limit among the
	// windows naming it (logWindow); 0 otherwise.
	group [domain.MaxLimits]uint8
	logs  [domain.MaxLimits / 2]struct {
		period time.Duration
		limit  int64
	}
	groups uint8
	shared bool
}

// join records that limit i shares the key of limit j, the first to name
// it (docs/adr/015).
func (b *batch) join(limits []domain.Limit, i, j int) {
	g := b.group[j]
	if g == 0 {
		b.groups++
		g, b.group[j] = b.groups, b.groups
		b.logs[g-1].period, b.logs[g-1].limit = limits[j].Window.Period, limits[j].Window.Limit
	}
	l := &b.logs[g-1]
	l.period, l.limit = max(l.period, limits[i].Window.Period), max(l.limit, limits[i].Window.Limit)
	b.of[i], b.shared = uint8(j+1), true
}

// link fills b.of and b.shared from b.hash, for a request already
// validated: the calls that validate with the domain's functions.
func (b *batch) link(limits []domain.Limit) {
	for i := range limits {
		for j := range i {
			if b.hash[j] == b.hash[i] && limits[j].Key == limits[i].Key {
				b.join(limits, i, j)
				break
			}
		}
	}
}

// logWindow returns the window the key of limits[i] is written under,
// limits[i] being the first limit naming it, and whether later limits
// share it: its own window, or for a shared log (docs/adr/015) a
// sliding-log window of the longest period among those naming the key,
// so that the log keeps every unit each of them counts (rule S5 of
// docs/adr/009 with that period), and of their largest limit, so that a
// charge records as many units as the largest window counts.
func (b *batch) logWindow(limits []domain.Limit, i int) (domain.Window, bool) {
	w := limits[i].Window
	g := b.group[i]
	if g == 0 {
		return w, false
	}
	w.Period, w.Limit = b.logs[g-1].period, b.logs[g-1].limit
	return w, true
}

// commitRate records cost units of the rate limit limits[i] at t on its
// locked entry, and returns its status after consumption, checked being
// its status before. A shared log records them once, through the first
// limit naming its key, and each of its windows reads its status from
// it (docs/adr/015): call it in request order.
func (s *Store) commitRate(b *batch, limits []domain.Limit, i int, cost, t int64, checked domain.LimitStatus) domain.LimitStatus {
	e, l := b.ents[i], &limits[i]
	if b.of[i] != 0 {
		return e.st.SharedCommitted(t, l.Window, checked)
	}
	if b.group[i] == 0 {
		st, grew := e.commitLocked(&l.Window, cost, t, s.grace, checked)
		if grew {
			b.after[i] |= afterRecost
		}
		return st
	}
	st := e.st.CommittedShared(t, b.logs[b.group[i]-1].period, l.Window, cost, s.grace, checked)
	if e.grownLocked() {
		b.after[i] |= afterRecost
	}
	return st
}

// decideMany is decide for several limits, all or nothing; b holds their
// hashes.
func (s *Store) decideMany(b *batch, limits []domain.Limit, t int64, commit bool, st []domain.LimitStatus) error {
	n := len(limits)
	for i := range limits {
		if b.of[i] == 0 {
			b.ents[i] = s.load(b.hash[i], limits[i].Key)
		}
	}
	if err := s.lockAll(b, limits, t, commit); err != nil {
		return err
	}
	allowed := true
	for i := range limits {
		st[i] = check(b.ents[i], &limits[i], t, s.grace)
		allowed = allowed && st[i].Allowed
	}
	if commit && allowed {
		for i := range limits {
			st[i] = s.commitRate(b, limits, i, limits[i].Cost, t, st[i])
		}
	}
	s.unlockAll(b, n)
	return nil
}

// unlockAll unlocks the batch's entries, then does their follow-up work.
// A Peek leaves the entries of unknown keys nil: they have none, but the
// keys held outside ristretto may still need trimming. A shared log's
// entry is unlocked once, through the first limit naming its key.
func (s *Store) unlockAll(b *batch, n int) {
	var follow bool
	for i := range n {
		if e := b.ents[i]; e != nil && b.of[i] == 0 {
			e.mu.Unlock()
			follow = follow || b.after[i] != 0
		}
	}
	if !follow {
		return
	}
	for i := range n {
		switch e := b.ents[i]; {
		case b.after[i] == 0:
		case e != nil:
			s.settle(e, b.after[i])
		case s.over():
			s.trim()
		}
	}
}

// lockAll locks the batch's entries in id order (so that two decisions
// cannot deadlock), first looking up under their shard lock the ones the
// lock-free load missed, and again the ones found dead once locked, until
// every locked entry is live. Then it records the access to each. A
// shared log's entry is found and locked once, through the first limit
// naming its key; the later ones get it once it is locked.
func (s *Store) lockAll(b *batch, limits []domain.Limit, t int64, create bool) error {
	n := len(limits)
	var absent, dead [domain.MaxLimits]bool
	for {
		for i := range n {
			if b.ents[i] == nil && !absent[i] && b.of[i] == 0 {
				e, err := s.lookup(b.hash[i], &limits[i], t, create)
				if err != nil {
					return err
				}
				b.ents[i], absent[i] = e, e == nil
				b.after[i] |= afterTrim
			}
		}
		sortByID(&b.order, &b.ents, n)
		live := true
		for _, i := range b.order[:n] {
			if e := b.ents[i]; e != nil {
				e.mu.Lock()
				dead[i] = e.dead
				live = live && !e.dead
			}
		}
		if live {
			break
		}
		for i := range n {
			if e := b.ents[i]; e != nil {
				e.mu.Unlock()
				if dead[i] {
					b.ents[i] = nil
				}
			}
		}
	}
	for i := range n {
		if e := b.ents[i]; e != nil && !s.access(e, t) && b.after[i]&afterTrim == 0 {
			b.after[i] |= afterTouch
		}
	}
	if b.shared {
		for i := range n {
			if j := b.of[i]; j != 0 {
				b.ents[i] = b.ents[j-1]
			}
		}
	}
	return nil
}

// sortByID fills order with 0..n-1 sorted by entry id (absent entries
// first): an insertion sort on the stack, allocation-free for the few keys
// of a request. Ids are unique, so every decision locks in one order.
func sortByID(order *[domain.MaxLimits]uint8, ents *[domain.MaxLimits]*entry, n int) {
	// The ids are read once each, not at every comparison.
	var ids [domain.MaxLimits]uint64
	for i := range n {
		if e := ents[i]; e != nil {
			ids[i] = e.id
		}
	}
	for i := range n {
		order[i] = uint8(i)
		for j := i; j > 0 && ids[order[j]] < ids[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
}

// access records a decision's access to e at t and reports whether
// ristretto holds e. Called with e.mu held, so that Close, which locks
// every entry before it closes ristretto, never closes it under a Get.
func (s *Store) access(e *entry, t int64) bool {
	e.hits++
	e.used = max(e.used, t)
	if e.hits <= sampleFirst || e.hits&sampleEvery == 0 {
		s.cache.Get(e.key)
	}
	return e.cached
}

// settle does the follow-up work of one entry after a decision unlocked
// it: record an access that missed ristretto's cache, report a grown log,
// and trim the keys held outside ristretto back to their share.
func (s *Store) settle(e *entry, after uint8) {
	if after == afterTrim && !s.over() {
		return
	}
	sh := s.shardOf(e.hash)
	sh.mu.Lock()
	if !sh.closed && e.state != forgotten {
		if after&afterTouch != 0 {
			s.touchLocked(sh, e)
		}
		if after&afterRecost != 0 {
			s.recostLocked(sh, e)
		}
	}
	sh.mu.Unlock()
	s.trim()
}

// observe records now as the latest instant seen and wakes the sweeper when
// SweepInterval has passed since the last sweep.
func (s *Store) observe(t int64) {
	hw := s.hw.Load()
	if hw != noInstant && t < hw+hwStep {
		return
	}
	for !s.hw.CompareAndSwap(hw, t) {
		if hw = s.hw.Load(); t <= hw {
			return
		}
	}
	next := s.nextSweep.Load()
	switch {
	case next == noInstant:
		s.nextSweep.CompareAndSwap(noInstant, t+s.sweepEvery)
	case t >= next && s.nextSweep.CompareAndSwap(next, t+s.sweepEvery):
		select {
		case s.wake <- struct{}{}:
		default: // a sweep is already due
		}
	}
}

// Reset forgets every unit counted on key, whatever its algorithm.
// Resetting an unknown key is not an error; an empty or over-long key is a
// *domain.LimitError.
func (s *Store) Reset(ctx context.Context, key string) error {
	_, err := s.Forget(ctx, key)
	return err
}

// Forget forgets key as Reset does and reports whether it held state
// (ports.Forgetter): units or slots that a caller at the latest instant
// the store has seen, lagging it by up to IdleGrace, would still count.
func (s *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("local: %w", err)
	}
	switch {
	case key == "":
		return false, &domain.LimitError{Index: -1, Field: "key", Reason: "must not be empty"}
	case len(key) > domain.MaxKeyLen:
		return false, &domain.LimitError{Index: -1, Field: "key", Reason: fmt.Sprintf("must be at most %d bytes", domain.MaxKeyLen)}
	}
	if s.closed.Load() {
		return false, errClosed
	}
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return false, errClosed
	}
	e := sh.tab.Load().find(h, key)
	if e == nil {
		return false, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	held := !s.idle(e)
	e.resetLocked()
	return held, nil
}

// Wait blocks until ristretto has applied every write the store handed it
// before the call: each key offered to its cache is then in it, or held
// outside it again. Decisions never need it; tests and benchmarks use it
// to reach a steady state. It returns at once after Close.
func (s *Store) Wait() {
	s.rw.RLock()
	defer s.rw.RUnlock()
	if !s.closed.Load() {
		s.cache.Wait()
	}
}

// Close stops the sweeper and ristretto and drops every state. Later calls
// of any method return an error wrapping domain.ErrStoreClosed. Close is
// idempotent and always returns nil.
//
// Decisions take no store-wide lock. Close marks the store closed, then
// locks every directory shard and every entry in turn, marking them
// closed: a call that was inside ristretto held one of those locks, so it
// is done by then, and a later call sees the mark and returns the error.
// Only then is ristretto closed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.sweepDone
		s.rw.Lock()
		defer s.rw.Unlock()
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			sh.closed = true
			sh.tab.Load().each(func(e *entry) {
				e.mu.Lock()
				e.dead = true
				e.mu.Unlock()
			})
			sh.mu.Unlock()
		}
		s.closing.Store(true)
		s.cache.Close()
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			sh.tab.Store(newTable(minTableSlots))
			sh.pending, sh.cached, sh.dels = 0, 0, nil
			sh.mu.Unlock()
		}
		s.lru.clear()
		s.outBytes.Store(0)
		s.inflightBytes.Store(0)
		s.inflight.Store(0)
		s.slots.Store(0)
	})
	return nil
}

// Stats is a snapshot of a Store's bookkeeping, for tests and monitoring.
type Stats struct {
	// Entries is the number of keys with state.
	Entries int
	// Cached is the number of entries ristretto's cache holds.
	Cached int
	// Pending is the number of entries held outside ristretto's cache
	// (refused, evicted, grown, or with their Set on its way), and
	// PendingBytes their estimated size.
	Pending      int
	PendingBytes int64
	// CacheBytes is the estimated size of the entries ristretto holds.
	CacheBytes int64
	// ReservedBytes is what the store counts besides its entries:
	// ristretto's fixed structures and the index of the most keys it has
	// held at once.
	ReservedBytes int64
	// Bytes is ReservedBytes + CacheBytes + PendingBytes, the estimate
	// Config.MaxMemory bounds. It may pass the bound by the entries of the
	// decisions under way, and while ristretto's callbacks run (Store.Wait
	// waits for them).
	Bytes int64
	// Dropped counts live entries forgotten under memory pressure: each one
	// lost its key's state (see the package doc).
	Dropped uint64
	// Expired counts idle entries forgotten, which changed no answer.
	Expired uint64
	// Evicted and Rejected count ristretto's evictions and admission
	// refusals; SetsDropped the Sets ristretto dropped at once. None of
	// them loses state by itself.
	Evicted, Rejected, SetsDropped uint64
}

// Stats returns a snapshot of the store's bookkeeping. The shards are read
// one after another, so the counts are each exact but not simultaneous.
func (s *Store) Stats() Stats {
	st := Stats{
		Dropped:       s.stats.dropped.Load(),
		Expired:       s.stats.expired.Load(),
		Evicted:       s.stats.evicted.Load(),
		Rejected:      s.stats.rejected.Load(),
		SetsDropped:   s.stats.setsDropped.Load(),
		PendingBytes:  s.outBytes.Load(),
		CacheBytes:    s.cache.MaxCost() - s.cache.RemainingCost(),
		ReservedBytes: s.plan.reserved(s.peakSlots.Load()),
		Pending:       int(s.inflight.Load()),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += sh.tab.Load().live
		st.Cached += sh.cached
		st.Pending += sh.pending
		sh.mu.Unlock()
	}
	st.Bytes = st.ReservedBytes + st.CacheBytes + st.PendingBytes
	return st
}

// CacheMetrics returns ristretto's metrics when the store was made with
// WithCacheMetrics, nil otherwise.
func (s *Store) CacheMetrics() *ristretto.Metrics { return s.cache.Metrics }

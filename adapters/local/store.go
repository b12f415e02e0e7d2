package local

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

var _ ports.Store = (*Store)(nil)

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

// Store is the in-process ports.Store. Create it with New; it is safe for
// simultaneous use by any number of goroutines. See the package doc for its
// guarantees.
type Store struct {
	cache      *ristretto.Cache[string, *entry]
	seed       maphash.Seed
	shards     [numShards]shard
	pendingCap int64 // per shard
	sweepEvery int64 // µs
	grace      int64 // µs: IdleGrace

	// life is held shared by every call and exclusively by Close, so that
	// Close never pulls the cache from under a call.
	life      sync.RWMutex
	closed    atomic.Bool // no new call may start
	closing   atomic.Bool // the cache is being torn down: ignore callbacks
	closeOnce sync.Once

	hw        atomic.Int64 // latest instant seen (µs), or noInstant
	nextSweep atomic.Int64 // instant (µs) that wakes the sweeper, or noInstant
	wake      chan struct{}
	stop      chan struct{}
	sweepDone chan struct{}

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
	s := &Store{
		seed:       maphash.MakeSeed(),
		pendingCap: max(cfg.MaxPendingCost/numShards, 1),
		sweepEvery: int64(cfg.SweepInterval / time.Microsecond),
		grace:      int64(cfg.IdleGrace / time.Microsecond),
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		sweepDone:  make(chan struct{}),
	}
	s.hw.Store(noInstant)
	s.nextSweep.Store(noInstant)
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
	cache, err := ristretto.NewCache(&ristretto.Config[string, *entry]{
		NumCounters: cfg.NumCounters,
		MaxCost:     cfg.MaxCost,
		BufferItems: getBufferItems,
		Metrics:     o.cacheMetrics,
		// The store compares the key held in the entry, so ristretto needs
		// no second (conflict) hash; a per-store seed keeps crafted keys from
		// colliding on purpose.
		KeyToHash: func(key string) (uint64, uint64) { return s.hash(key), 0 },
		OnEvict:   func(item *ristretto.Item[*entry]) { s.displaced(item, false) },
		OnReject:  func(item *ristretto.Item[*entry]) { s.displaced(item, true) },
	})
	if err != nil {
		return nil, &domain.ConfigError{Field: "local", Reason: "ristretto refused the configuration", Err: err}
	}
	s.cache = cache
	go s.sweeper()
	return s, nil
}

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// Evaluate checks limits at now and, only if every one admits its cost,
// consumes the cost on every key (see ports.Store).
func (s *Store) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.decide(ctx, now, limits, true)
}

// Peek answers as Evaluate would at now, consuming nothing. It creates no
// state for keys it has not seen.
func (s *Store) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.decide(ctx, now, limits, false)
}

// batch is the entries of one decision, on the stack.
type batch struct {
	ents  [domain.MaxLimits]*entry
	order [domain.MaxLimits]uint8 // lock order: indexes sorted by key
	hit   [domain.MaxLimits]bool  // found in the cache rather than the directory
	after [domain.MaxLimits]uint8 // follow-up work once unlocked
}

// Follow-up work of one entry, done after every entry is unlocked.
const (
	afterSettle uint8 = 1 << iota
	afterRecost
)

// decide is Evaluate (commit) and Peek: find every entry, lock them all in
// key order, check every limit, and consume on every key only if all
// allowed.
func (s *Store) decide(ctx context.Context, now time.Time, limits []domain.Limit, commit bool) (domain.Result, error) {
	if err := ctx.Err(); err != nil {
		return domain.Result{}, fmt.Errorf("local: %w", err)
	}
	if err := domain.ValidateLimits(limits); err != nil {
		return domain.Result{}, err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return domain.Result{}, errClosed
	}
	t := now.UnixMicro()
	s.observe(t)

	n := len(limits)
	var st [domain.MaxLimits]domain.LimitStatus
	if n == 1 {
		st[0] = s.decideOne(&limits[0], t, commit)
		return domain.NewResult(st[:1]), nil
	}
	var b batch
	for i := range limits {
		b.ents[i], b.hit[i] = s.find(limits[i].Key, commit)
	}
	sortByKey(&b.order, limits)
	s.lockAll(&b, limits, commit)

	allowed := true
	for i := range limits {
		st[i] = check(b.ents[i], &limits[i], t)
		allowed = allowed && st[i].Allowed
	}
	if commit && allowed {
		for i := range limits {
			var grew bool
			st[i], grew = b.ents[i].commitLocked(&limits[i], t, st[i])
			if grew {
				b.after[i] |= afterRecost
			}
		}
	}
	var follow bool
	for _, i := range b.order[:n] {
		if e := b.ents[i]; e != nil {
			e.mu.Unlock()
			follow = follow || b.after[i] != 0
		}
	}
	if follow {
		for i := range n {
			if b.after[i]&afterSettle != 0 {
				s.settle(b.ents[i])
			}
			if b.after[i]&afterRecost != 0 {
				s.recost(b.ents[i])
			}
		}
	}
	return domain.NewResult(st[:n]), nil
}

// decideOne is decide for a single limit, the most common request: no
// batch, no sort, one lock.
func (s *Store) decideOne(l *domain.Limit, t int64, commit bool) domain.LimitStatus {
	e, hit := s.find(l.Key, commit)
	for e != nil {
		e.mu.Lock()
		if !e.dead {
			break
		}
		e.mu.Unlock()
		e, hit = s.lookup(l.Key, commit), false
	}
	st := check(e, l, t)
	if e == nil {
		return st
	}
	settle := hit && !e.resident
	e.resident = e.resident || hit
	grew := false
	if commit && st.Allowed {
		st, grew = e.commitLocked(l, t, st)
	}
	e.mu.Unlock()
	if settle {
		s.settle(e)
	}
	if grew {
		s.recost(e)
	}
	return st
}

// find returns key's entry and whether the cache held it. A cached entry
// may turn out dead once locked; lockAll then looks again.
func (s *Store) find(key string, create bool) (*entry, bool) {
	if e, ok := s.cache.Get(key); ok && e != nil && e.key == key {
		return e, true
	}
	return s.lookup(key, create), false
}

// lockAll locks the batch's entries in key order, replacing dead ones
// (forgotten between find and lock) by a fresh directory lookup until every
// locked entry is live.
func (s *Store) lockAll(b *batch, limits []domain.Limit, create bool) {
	n := len(limits)
	for {
		for _, i := range b.order[:n] {
			if e := b.ents[i]; e != nil {
				e.mu.Lock()
			}
		}
		var dead [domain.MaxLimits]bool
		live := true
		for i := range n {
			if e := b.ents[i]; e != nil && e.dead {
				dead[i], live = true, false
			}
		}
		if live {
			break
		}
		for _, i := range b.order[:n] {
			if e := b.ents[i]; e != nil {
				e.mu.Unlock()
			}
		}
		for i := range n {
			if dead[i] {
				b.ents[i], b.hit[i] = s.lookup(limits[i].Key, create), false
			}
		}
	}
	for i := range n {
		if e := b.ents[i]; b.hit[i] && !e.resident {
			e.resident = true
			b.after[i] |= afterSettle
		}
	}
}

// sortByKey fills order with 0..len(limits)-1 sorted by key: an insertion
// sort on the stack, allocation-free for the few keys of a request.
func sortByKey(order *[domain.MaxLimits]uint8, limits []domain.Limit) {
	for i := range limits {
		order[i] = uint8(i)
		for j := i; j > 0 && limits[order[j]].Key < limits[order[j-1]].Key; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
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
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	switch {
	case key == "":
		return &domain.LimitError{Index: -1, Field: "key", Reason: "must not be empty"}
	case len(key) > domain.MaxKeyLen:
		return &domain.LimitError{Index: -1, Field: "key", Reason: fmt.Sprintf("must be at most %d bytes", domain.MaxKeyLen)}
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return errClosed
	}
	// The directory holds every live entry, so no cache lookup is needed.
	sh := s.shardOf(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil {
		e.mu.Lock()
		e.resetLocked()
		e.mu.Unlock()
	}
	sh.mu.Unlock()
	return nil
}

// Close stops the sweeper and ristretto and drops every state. Later calls
// of any method return an error wrapping domain.ErrStoreClosed. Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.sweepDone
		s.life.Lock()
		defer s.life.Unlock()
		s.closing.Store(true)
		s.cache.Close()
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			sh.m, sh.head, sh.tail, sh.pendingLen, sh.pendingBytes = nil, nil, nil, 0, 0
			sh.mu.Unlock()
		}
	})
	return nil
}

// Stats is a snapshot of a Store's bookkeeping, for tests and monitoring.
type Stats struct {
	// Entries is the number of keys with state (in the cache or pending).
	Entries int
	// Pending is the number of entries held outside ristretto, and
	// PendingBytes their estimated size.
	Pending      int
	PendingBytes int64
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
		Dropped:     s.stats.dropped.Load(),
		Expired:     s.stats.expired.Load(),
		Evicted:     s.stats.evicted.Load(),
		Rejected:    s.stats.rejected.Load(),
		SetsDropped: s.stats.setsDropped.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += len(sh.m)
		st.Pending += sh.pendingLen
		st.PendingBytes += sh.pendingBytes
		sh.mu.Unlock()
	}
	return st
}

// CacheMetrics returns ristretto's metrics when the store was made with
// WithCacheMetrics, nil otherwise.
func (s *Store) CacheMetrics() *ristretto.Metrics { return s.cache.Metrics }

package app

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Allotments (docs/adr/019-allotments.md). A key set (the same keys,
// windows and costs) that this instance decides often enough to pay for
// it, and that is far from its limits, takes an allotment: m requests
// reserved at the primary store in one call, made as if at the decision's
// instant plus a hold H under the windows domain.AllotWindow gives, so
// that the instance may admit them at any instant of [t0, t0 + H]
// without exceeding any window in any period, whatever every other
// instance does. The next requests of the key set are then admitted in
// process, from the allotment, with no store call (Source
// SourceAllotment), until it is spent or its hold ends; what it did not
// spend goes back to the store (Settle on its sliding logs). When three
// quarters of an allotment are spent, or of its hold gone, the next one
// is taken ahead, off the decisions' path, and follows it: a hot key set
// holds at most two at once, and its decisions wait on no take. A window
// near its limit gets a small allotment, then none: an allotment takes at
// most a quarter of what the store said was left, and under
// allotMinRequests requests the key set is decided at the store one
// request at a time, exactly as without allotments.
//
// While the store cannot answer, what an instance holds stays its to
// spend (its units are counted at the store); nothing more is taken. A
// Reset drops the allotments on its keys at once.

// allotMinRequests is the fewest requests worth an allotment: under it
// the store decides one request at a time.
const allotMinRequests = 4

// allotShare is the share of what a window has left that one allotment
// takes at most: near the limit allotments shrink geometrically, then
// stop.
const allotShare = 4

// allotMaxRequests bounds one allotment.
const allotMaxRequests = 1 << 16

// allotShards spreads the key sets over locks.
const allotShards = 64

// allotMaxKeys bounds the key sets one shard tracks; past it, an idle one
// is forgotten for the newcomer.
const allotMaxKeys = 1024

// allotter holds the instance's allotments, one per key set at most.
type allotter struct {
	l      *Limiter
	store  ports.Allotter
	hold   time.Duration // Config.AllotmentHold
	seed   maphash.Seed
	shards [allotShards]allotShard

	// The sweeper gives back allotments whose hold ended. closed is set
	// by close: no allotment is taken after it.
	stop   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	// notifier tells the fleet of a reset and this instance of the
	// fleet's (nil when the store cannot); unlisten ends the listening.
	notifier ports.ResetNotifier
	unlisten func()
	// gone counts the allotments given back, spent out or dropped; taken
	// those taken (Limiter.Allotments).
	taken, spentOut, returned, dropped atomic.Uint64
}

// allotShard is a lock over a share of the key sets: a decision looks
// its key set up under the read lock; what a key set holds changes under
// the write lock (the held and next allotments are read without it).
type allotShard struct {
	mu   sync.RWMutex
	keys map[uint64]*allotKey
}

// allotKey is one key set's state on this instance.
type allotKey struct {
	first string // the first key and the number of limits confirm the fingerprint
	n     int
	keys  []string // every key of the set (a Reset of one drops the allotment)

	// The decisions on the key set in the span that began at spanStart
	// (on the Limiter's clock, ns) and in the one before, and the last
	// one's instant: counted without a lock, as decisions are admitted.
	spanStart, cur, prev, lastSeen atomic.Int64
	// inflight is the key set's decisions at the store now: an
	// allotment leaves them their room (a burst in flight is not
	// refused for units this instance would hold unspent).
	inflight atomic.Int64
	sh       *allotShard

	// Under the shard's lock: the least requests every window had left
	// at the last store answer (-1: unknown), whether a take is in
	// flight, and whether a reset dropped the key set (a take in flight
	// then gives back nothing and holds nothing).
	room   int64
	taking bool
	gone   bool
	// taken is closed when the take in flight ends (nil when none is):
	// a decision the store refused while it was in flight waits for it
	// (spendRefused).
	taken chan struct{}
	// calm is when a take may be tried again after the store refused
	// one (ns): a GCRA window allots less than it has left (the hold's
	// share of its burst), which the room does not show.
	calm int64

	// held is the allotment decisions spend from; next the one taken
	// ahead, which follows it. Both change under the shard's lock.
	held, next atomic.Pointer[allotment]
}

// allotment is one allotment held.
type allotment struct {
	m     int64 // requests allotted
	left  atomic.Int64
	start time.Time // t0, the decision's instant
	end   time.Time // t0 + hold: the last instant a request may be admitted from it
	hold  time.Duration
	lease domain.Lease
	// logs are the allotment's sliding-log limits as reserved (the
	// allotment's windows, cost m × the request's), which Settle gives
	// back what was not spent on; empty for an allotment of GCRA windows
	// only, which gives nothing back (docs/adr/019).
	logs []domain.Limit
	cost int64 // the first log's cost per request
	// st is each window's status after the allotment (in the request's
	// order), under the allotment's windows, and ahead how far after t0
	// the store's answer was made (the reset-afters are from then).
	st   [domain.MaxLimits]domain.LimitStatus
	n    int
	node string
	done atomic.Bool
	// ahead is set by the decision that asked for the next allotment.
	ahead atomic.Bool
}

// newAllotter returns the Limiter's allotter, or nil when the primary
// store cannot reserve ahead or Config.Allotments is off.
func newAllotter(l *Limiter, store ports.Store) *allotter {
	al, ok := store.(ports.Allotter)
	if !ok || l.cfg.Allotments == AllotmentsOff {
		return nil
	}
	a := &allotter{l: l, store: al, hold: l.cfg.AllotmentHold, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	for i := range a.shards {
		a.shards[i].keys = map[uint64]*allotKey{}
	}
	if n, ok := store.(ports.ResetNotifier); ok {
		a.notifier = n
		a.unlisten = n.OnReset(a.drop)
	}
	a.wg.Add(1)
	go a.sweep()
	return a
}

// reset drops this instance's allotments on keys and tells the fleet,
// whose instances drop theirs as the notice reaches them (best effort:
// an instance that misses it stops when its allotment's hold ends). The
// notice is recorded as a reset call of the store.
func (a *allotter) reset(ctx context.Context, keys []string) {
	a.drop(keys)
	if a.notifier == nil {
		return
	}
	start := a.l.clock.Now()
	sctx, cancel := context.WithTimeout(ctx, a.l.cfg.StoreTimeout)
	err := classify(a.notifier.NotifyReset(sctx, keys))
	cancel()
	a.l.rec.RecordStoreCall(ctx, ports.StoreCall{Op: ports.OpReset, Start: start, Latency: a.l.clock.Now().Sub(start), Keys: len(keys), Err: err})
}

// key returns ev's key set state and its shard, or nil when the key set
// is not tracked (create false) or ev's fingerprint names another one.
func (a *allotter) key(ev *evaluation, create bool) (*allotShard, *allotKey) {
	fp := fingerprint(a.seed, ev)
	sh := &a.shards[fp%allotShards]
	// Under the read lock first: every store decision of a tracked key
	// set comes here (enter), and only a new one needs the write lock.
	sh.mu.RLock()
	k := sh.keys[fp]
	sh.mu.RUnlock()
	if k != nil || !create {
		if k != nil && (k.first != ev.limits[0].Key || k.n != ev.n) {
			k = nil
		}
		return sh, k
	}
	sh.mu.Lock()
	k = sh.keys[fp]
	switch {
	case k != nil && (k.first != ev.limits[0].Key || k.n != ev.n):
		k = nil
	case k == nil:
		if len(sh.keys) >= allotMaxKeys && !sh.evictOne() {
			break
		}
		k = &allotKey{first: ev.limits[0].Key, n: ev.n, room: -1, keys: make([]string, ev.n), sh: sh}
		for i := range ev.n {
			k.keys[i] = ev.limits[i].Key
		}
		sh.keys[fp] = k
	}
	sh.mu.Unlock()
	return sh, k
}

// evictOne forgets one key set that holds no allotment and has no take
// in flight; false when every one does. Called under the shard's lock.
func (sh *allotShard) evictOne() bool {
	for fp, k := range sh.keys {
		if k.held.Load() == nil && k.next.Load() == nil && !k.taking {
			delete(sh.keys, fp)
			return true
		}
	}
	return false
}

// seen counts a decision on k at now (ns), in spans of hold, without a
// lock: the decision that rolls a span over starts the next (a decision
// counted in the instant between lands in either span; demand is an
// estimate).
func (k *allotKey) seen(now int64, hold time.Duration) {
	k.lastSeen.Store(now)
	for {
		s := k.spanStart.Load()
		d := now - s
		if d < int64(hold) {
			k.cur.Add(1)
			return
		}
		if k.spanStart.CompareAndSwap(s, now) {
			if d >= 2*int64(hold) {
				k.prev.Store(0)
			} else {
				k.prev.Store(k.cur.Load())
			}
			k.cur.Store(1)
			return
		}
	}
}

// demand is the requests the key set is expected to bring over the next
// hold: the larger of the last whole span's and the current one's pace.
func (k *allotKey) demand(now int64, hold time.Duration) int64 {
	d := k.prev.Load()
	if el := now - k.spanStart.Load(); el > 0 {
		d = max(d, k.cur.Load()*int64(hold)/el)
	}
	return d
}

// size is the requests of the key set's next allotment at now, under the
// shard's lock: 1.25 × the expected demand over the hold, at most a
// quarter of the room its decisions in flight at the store leave; 0 when
// no allotment may be taken now.
func (a *allotter) size(k *allotKey, now int64, hold time.Duration) int64 {
	m := min(k.demand(now, hold)*5/4, (k.room-k.inflight.Load())/allotShare, allotMaxRequests)
	if k.taking || k.gone || k.room < 0 || m < allotMinRequests || now < k.calm || a.closed.Load() {
		return 0
	}
	return m
}

// spend admits ev from its key set's allotment, if one is held and
// covers ev's instant, and reports whether it did. An allotment spent or
// past its hold makes way for the next, taken ahead; the decision that
// spends the first of its last quarter (of its requests or of its hold)
// asks for that next one.
func (a *allotter) spend(ev *evaluation) bool {
	sh, k := a.key(ev, false)
	if k == nil {
		return false
	}
	return a.spendAt(sh, k, ev, ev.now)
}

// spendAt admits ev at now from k's held allotment, as spend does, and
// makes now ev's instant when it does.
func (a *allotter) spendAt(sh *allotShard, k *allotKey, ev *evaluation, now time.Time) bool {
	// Three turns: the held allotment, the next one, and a next one
	// another decision made held in between.
	for range 3 {
		al := k.held.Load()
		switch {
		case al == nil:
			return false
		case now.Before(al.start):
			// Taken after this decision's instant: not its to spend.
			return false
		case now.After(al.end):
			a.advance(sh, k, al, now)
			continue
		}
		left := al.left.Add(-1)
		if left < 0 {
			a.advance(sh, k, al, now)
			continue
		}
		k.seen(now.UnixNano(), al.hold)
		// The decision's instant is its admission's
		// (ports.DecisionRecord.At).
		ev.now = now
		if (left < al.m/4 || now.Sub(al.start) >= al.hold*3/4) && al.ahead.CompareAndSwap(false, true) {
			a.takeAhead(sh, k, ev)
		}
		a.l.fromAllotment(ev, al)
		return true
	}
	return false
}

// advance ends k's held allotment al, spent or past its hold at now, and
// makes the next one held, if al is still held: what al did not spend
// goes back to the store, in a call of its own.
func (a *allotter) advance(sh *allotShard, k *allotKey, al *allotment, now time.Time) {
	sh.mu.Lock()
	ended := k.held.Load() == al
	if ended {
		k.held.Store(k.next.Swap(nil))
	}
	sh.mu.Unlock()
	if !ended {
		return
	}
	if al.left.Load() > 0 {
		go a.giveBack(context.WithoutCancel(context.Background()), al, now)
	} else {
		a.giveBack(context.Background(), al, now) // spent: no store call
	}
}

// takeAhead takes, off the decisions' path, the allotment that follows
// k's held one, sized and taken as take sizes and takes one (ev's key set,
// at the decision's instant), when none is held next or in flight, the
// store took none too large lately, and ev's node's breaker lets calls
// through.
func (a *allotter) takeAhead(sh *allotShard, k *allotKey, ev *evaluation) {
	hold := a.holdFor(ev)
	if hold <= 0 {
		return
	}
	now := ev.now.UnixNano()
	sh.mu.Lock()
	m := a.size(k, now, hold)
	if m == 0 || k.next.Load() != nil {
		sh.mu.Unlock()
		return
	}
	k.startTake()
	sh.mu.Unlock()
	node := a.l.nodeOf(ev)
	if !a.l.allowed(node) {
		a.untake(sh, k)
		return
	}
	var lim [domain.MaxLimits]domain.Limit
	copy(lim[:], ev.limits[:ev.n])
	n, t0 := ev.n, ev.now
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.untake(sh, k)
		var res domain.Result
		var al *allotment
		_, _ = a.l.timedCall(context.Background(), ports.OpAllot, node, n, func(ctx context.Context) (err error) {
			al, res, err = a.reserve(ctx, lim[:n], t0, hold, m, node)
			return err
		})
		a.install(sh, k, al, &res, lim[:n], true)
	}()
}

// startTake marks a take of k in flight, under its shard's lock.
func (k *allotKey) startTake() {
	k.taking, k.taken = true, make(chan struct{})
}

// untake ends k's take in flight, after its allotment was installed.
func (a *allotter) untake(sh *allotShard, k *allotKey) {
	sh.mu.Lock()
	k.taking = false
	if k.taken != nil {
		close(k.taken)
		k.taken = nil
	}
	sh.mu.Unlock()
}

// reserve takes an allotment of m requests of the key set lim at t0 for
// hold: nil when the store failed (err) or refused one that large (res).
func (a *allotter) reserve(ctx context.Context, lim []domain.Limit, t0 time.Time, hold time.Duration, m int64, node string) (*allotment, domain.Result, error) {
	// The allotment's windows, sliding logs first: Settle gives back on
	// them alone, and a lease record lives beside the first key.
	var limits [domain.MaxLimits]domain.Limit
	var order [domain.MaxLimits]int
	j := 0
	for _, logs := range []bool{true, false} {
		for i, l := range lim {
			if (l.Window.Algorithm == domain.SlidingLog) != logs {
				continue
			}
			w, ok := domain.AllotWindow(l.Window, hold)
			if !ok || l.Cost*m > w.Limit {
				return nil, domain.Result{}, nil
			}
			l.Window, l.Cost = w, l.Cost*m
			limits[j], order[j] = l, i
			j++
		}
	}
	res, lease, err := a.store.ReserveAhead(ctx, t0, hold, limits[:len(lim)], allotLeaseTTL(hold))
	if err != nil || !res.Allowed {
		return nil, res, err
	}
	al := &allotment{m: m, start: t0, end: t0.Add(hold), hold: hold, lease: lease, n: len(lim), node: node}
	al.left.Store(m)
	for x := range lim {
		al.st[order[x]] = res.Status(x)
		if limits[x].Window.Algorithm == domain.SlidingLog {
			al.logs = append(al.logs, limits[x])
		}
	}
	if len(al.logs) > 0 {
		al.cost = al.logs[0].Cost / m
	}
	// What the store has left after it, in requests: the next
	// allotment takes at most a quarter of that.
	res = domain.NewResult(al.st[:al.n])
	return al, res, nil
}

// install makes al, just taken for the key set lim, k's held allotment
// (next: its next one) and learns the room its answer res shows; a nil al
// the store refused leaves k no take for a hold. An allotment k can no
// longer hold (a reset dropped the key set, the Limiter closed, another
// took its place) goes back at once.
func (a *allotter) install(sh *allotShard, k *allotKey, al *allotment, res *domain.Result, lim []domain.Limit, next bool) {
	sh.mu.Lock()
	if al == nil {
		if len(res.Statuses()) > 0 && !res.Allowed {
			// Too large for what is left: no take tried for a hold.
			k.room, k.calm = 0, a.l.clock.Now().UnixNano()+int64(a.hold)
		}
		sh.mu.Unlock()
		return
	}
	k.room = roomOf(lim, res)
	slot := &k.held
	if next && k.held.Load() != nil {
		// Taken ahead, and the held one is still spending.
		slot = &k.next
	}
	gone := k.gone
	ok := !gone && !a.closed.Load() && slot.CompareAndSwap(nil, al)
	sh.mu.Unlock()
	a.taken.Add(1)
	switch {
	case ok:
	case gone:
		// A reset forgot its keys while it was taken: dropped, as the
		// ones held then were.
		if al.done.CompareAndSwap(false, true) {
			a.dropped.Add(1)
		}
	case next:
		// Off the decisions' path already (and awaited by close).
		a.giveBack(context.Background(), al, a.l.clock.Now())
	default:
		go a.giveBack(context.WithoutCancel(context.Background()), al, a.l.clock.Now())
	}
}

// roomOf is the least requests of lim's costs every window of res has
// left; 0 for a refusal.
func roomOf(lim []domain.Limit, res *domain.Result) int64 {
	if !res.Allowed {
		return 0
	}
	room := int64(-1)
	for i, st := range res.Statuses() {
		if r := st.Remaining / lim[i].Cost; room < 0 || r < room {
			room = r
		}
	}
	return room
}

// holdFor is the hold of ev's allotments: Config.AllotmentHold, no
// longer than half of any window's period; 0 when a window cannot be
// allotted.
func (a *allotter) holdFor(ev *evaluation) time.Duration {
	h := a.hold
	for i := range ev.n {
		w := ev.limits[i].Window
		if w.Algorithm == domain.Concurrency {
			return 0
		}
		h = min(h, w.Period/2)
	}
	return h.Truncate(time.Microsecond)
}

// enter counts ev, about to be decided at the store, in flight on its key
// set, which it returns (nil when the key set cannot be tracked) for
// observe.
func (a *allotter) enter(ev *evaluation) *allotKey {
	_, k := a.key(ev, true)
	if k != nil {
		k.inflight.Add(1)
	}
	return k
}

// observe learns from the store's decision on ev, entered as k: one more
// request, and what every window had left (in requests of ev's cost); res
// is nil when the call failed.
func (a *allotter) observe(ev *evaluation, k *allotKey, res *domain.Result) {
	if k == nil {
		return
	}
	k.inflight.Add(-1)
	if res == nil {
		return
	}
	k.seen(ev.now.UnixNano(), a.holdFor(ev))
	k.sh.mu.Lock()
	k.room = roomOf(ev.limits[:ev.n], res)
	k.sh.mu.Unlock()
}

// spendRefused admits ev, which the store refused, from the allotment its
// key set k holds now, if any: its refusal may be for units this instance
// holds unspent, taken while ev was at the store. A take in flight then
// may be the one its refusal met: ev waits for it to end (or for ctx),
// and spends from what it installed. The admission's instant is now,
// inside the allotment's hold, whatever ev's own instant.
func (a *allotter) spendRefused(ctx context.Context, ev *evaluation, k *allotKey) bool {
	if k == nil {
		return false
	}
	k.sh.mu.RLock()
	wait := k.taken
	k.sh.mu.RUnlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
	return a.spendAt(k.sh, k, ev, a.l.clock.Now())
}

// take decides ev by taking an allotment of its key set when the key set
// is hot enough to pay for one and far enough from its limits: ev is the
// allotment's first request. It reports whether ev was decided (admitted
// from a new allotment, or failed at the store); false leaves ev to the
// usual store call (no allotment was worth taking, or the store refused
// one that large).
func (a *allotter) take(ctx context.Context, ev *evaluation, node string) bool {
	hold := a.holdFor(ev)
	if hold <= 0 {
		return false
	}
	sh, k := a.key(ev, false)
	if k == nil {
		return false
	}
	now := ev.now.UnixNano()
	sh.mu.Lock()
	m := a.size(k, now, hold)
	if m == 0 || k.held.Load() != nil || k.next.Load() != nil {
		sh.mu.Unlock()
		return false
	}
	k.startTake()
	sh.mu.Unlock()
	defer a.untake(sh, k)
	var res domain.Result
	var al *allotment
	start, took, err := a.l.timed(ctx, ports.OpAllot, ev.n, func(ctx context.Context) (err error) {
		al, res, err = a.reserve(ctx, ev.limits[:ev.n], ev.now, hold, m, node)
		return err
	})
	ev.latency += took
	ev.madeCall, ev.callStart = true, start
	ev.transErr = a.l.storeOutcome(ctx, node, start, err)
	if err != nil {
		a.l.failed(ctx, ev, err)
		return true
	}
	if al == nil {
		// Refused (decided on its own), or none to take.
		a.install(sh, k, nil, &res, ev.limits[:ev.n], false)
		return false
	}
	// ev is the allotment's first request, whether k keeps it or gives
	// back the rest at once.
	al.left.Add(-1)
	a.install(sh, k, al, &res, ev.limits[:ev.n], false)
	k.seen(now, hold)
	a.l.fromAllotment(ev, al)
	ev.d.Source = domain.SourcePrimary
	return true
}

// allotLeaseTTL is the TTL of an allotment's lease: time to give back
// what was not spent after the hold (on a store slowed by a burst).
func allotLeaseTTL(hold time.Duration) time.Duration {
	return max(domain.MinLeaseTTL, 2*hold+2*time.Second)
}

// fromAllotment makes ev's decision an admission from al: each window's
// status as the store gave it for the allotment (under the allotment's
// windows, which count every request of it as consumed: the remaining
// reported is never above what is left), the reset-afters counted from
// the store's instant, t0 + hold, to ev's.
func (l *Limiter) fromAllotment(ev *evaluation, al *allotment) {
	var st [domain.MaxLimits]domain.LimitStatus
	shift := al.end.Sub(ev.now)
	for i := range al.n {
		st[i] = al.st[i]
		st[i].RetryAfter = 0
		st[i].ResetAfter += shift
	}
	res := domain.NewResult(st[:al.n])
	l.fromResult(ev, &res, domain.SourceAllotment)
}

// giveBack ends al, at now: what it did not spend goes back to the store
// on its sliding logs, in a store call of its own, recorded and accounted
// to its node; a failed call leaves it counted (never more than was
// allotted), as a crash would.
func (a *allotter) giveBack(ctx context.Context, al *allotment, now time.Time) {
	if !al.done.CompareAndSwap(false, true) {
		return
	}
	left := al.left.Swap(0)
	if left <= 0 {
		a.spentOut.Add(1)
		return
	}
	a.returned.Add(1)
	if len(al.logs) == 0 || !a.l.allowed(al.node) {
		return
	}
	spent := (al.m - left) * al.cost
	_, err := a.l.timedCall(ctx, ports.OpSettle, al.node, len(al.logs), func(ctx context.Context) error {
		_, err := a.store.Settle(ctx, now, al.lease, al.logs, spent)
		return err
	})
	_ = err // the outcome is recorded and accounted by timedCall
}

// sweep gives back, every quarter of the hold, the allotments whose hold
// ended, and those idle for half of it; it forgets key sets idle for two
// holds. At Close it gives back every allotment held.
func (a *allotter) sweep() {
	defer a.wg.Done()
	tk := a.l.clock.NewTicker(max(a.hold/4, time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-a.stop:
			a.each(func(k *allotKey, al *allotment) bool { return true })
			return
		case <-tk.C():
		}
		now := a.l.clock.Now()
		a.each(func(k *allotKey, al *allotment) bool {
			return now.After(al.end) || now.UnixNano()-k.lastSeen.Load() > int64(al.hold/2)
		})
	}
}

// each gives back every allotment for which end says so, and forgets the
// key sets idle for two holds that hold none.
func (a *allotter) each(end func(k *allotKey, al *allotment) bool) {
	now := a.l.clock.Now()
	var ending []*allotment
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for fp, k := range sh.keys {
			// The next one first: a held one that ends makes it held.
			if nx := k.next.Load(); nx != nil && end(k, nx) {
				k.next.Store(nil)
				ending = append(ending, nx)
			}
			if al := k.held.Load(); al != nil && end(k, al) {
				k.held.Store(k.next.Swap(nil))
				ending = append(ending, al)
			}
			if k.held.Load() == nil && k.next.Load() == nil && !k.taking && now.UnixNano()-k.lastSeen.Load() > 2*int64(a.hold) {
				delete(sh.keys, fp)
			}
		}
		sh.mu.Unlock()
	}
	for _, al := range ending {
		a.giveBack(context.Background(), al, now)
	}
}

// drop forgets, without giving back, the allotments on key sets that
// name one of keys (a Reset forgot their counts).
func (a *allotter) drop(keys []string) {
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for fp, k := range sh.keys {
			if !slices.ContainsFunc(k.keys, func(key string) bool { return slices.Contains(keys, key) }) {
				continue
			}
			for _, slot := range []*atomic.Pointer[allotment]{&k.held, &k.next} {
				if al := slot.Swap(nil); al != nil && al.done.CompareAndSwap(false, true) {
					a.dropped.Add(1)
				}
			}
			k.gone = true
			delete(sh.keys, fp)
		}
		sh.mu.Unlock()
	}
}

// close gives back every allotment held and stops the sweeper.
func (a *allotter) close() {
	if a.closed.CompareAndSwap(false, true) {
		close(a.stop)
		if a.unlisten != nil {
			a.unlisten()
		}
	}
	a.wg.Wait()
}

// AllotmentStats is what Limiter.Allotments reports.
type AllotmentStats struct {
	// Held is the allotments held now (a key set holds two when the
	// next one was taken ahead); Taking the takes in flight.
	Held, Taking int
	// Taken, SpentOut, Returned and Dropped count since New the
	// allotments taken, spent to their last request, given back with
	// requests unspent, and dropped unspent by a reset.
	Taken, SpentOut, Returned, Dropped uint64
}

// Allotments reports this instance's allotments (docs/adr/019): zero
// when it takes none.
func (l *Limiter) Allotments() AllotmentStats {
	a := l.allots
	if a == nil {
		return AllotmentStats{}
	}
	st := AllotmentStats{Taken: a.taken.Load(), SpentOut: a.spentOut.Load(), Returned: a.returned.Load(), Dropped: a.dropped.Load()}
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.RLock()
		for _, k := range sh.keys {
			if k.held.Load() != nil {
				st.Held++
			}
			if k.next.Load() != nil {
				st.Held++
			}
			if k.taking {
				st.Taking++
			}
		}
		sh.mu.RUnlock()
	}
	return st
}

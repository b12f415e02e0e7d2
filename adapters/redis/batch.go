package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Batches (docs/adr/018-batches.md). A request whose batcher has fewer
// than batchInFlight calls in flight is sent at once, alone, with
// lua.RateLimitV5: a lone request never waits for company (docs/adr/007).
// Requests that arrive while it has that many queue, and when one
// returns, up to Config.MaxBatch of them go as one call of lua.BatchV5,
// which decides each in arrival order exactly as its own call would. On a
// standalone server one batcher serves every request; on a cluster, one
// per hash slot, since rueidis routes a call by one slot and only Redis
// knows which slots a node holds at the instant the call lands.

// DefaultMaxBatch is Config.MaxBatch's default: the most requests one
// call decides. 64 requests of the bench's heaviest shape cost Redis
// about 2.5 ms, well under what a waiting request's deadline allows.
const DefaultMaxBatch = 64

// batchInFlight is how many calls a batcher keeps in flight: a request
// finding fewer goes at once, alone (rueidis pipelines them); else it
// queues for a batch. With 2 or 4, Redis waited on the client between
// batches and 64 workers decided fewer requests than without batches;
// with 8 they decide as many, and 256 more (docs/adr/018).
const batchInFlight = 8

// batcher queues the requests bound for one node (one slot on a cluster)
// while batchInFlight calls to it are in flight.
type batcher struct {
	mu       sync.Mutex
	inflight int       // calls in flight; at batchInFlight newcomers queue
	queue    []*waiter // in arrival order
	// node is the answers' record of the node that serves the batcher's
	// keys (progress.go).
	node atomic.Pointer[nodeAnswers]
}

// A queued request is sent under its own caller's context or not at all
// (docs/adr/018, "Deadlines"). Its state moves once, from queued: to sent
// by the batch that carries it, or to left by its caller giving up (or
// by the batch, finding its caller gone): whichever comes first. A
// request that left unsent ran nothing (ports.ErrNotRun); one whose
// caller gave up once it was sent may have run (ports.ErrInFlight), as a
// call abandoned on its deadline may.
const (
	waitQueued int32 = iota
	waitSent
	waitLeft
)

// waiter is one queued request: its call's KEYS and ARGV, and what came
// back for it.
type waiter struct {
	ctx        context.Context
	keys, args []string
	done       chan struct{}
	state      atomic.Int32
	// flight is the batch call that carries it, set before it is sent
	// (nil when it went alone).
	flight *flight
	resp   rueidis.RedisResult
}

// flight is one batch call in flight. Its context ends when every
// request it carries has been left by its caller: a batch runs no longer
// than its longest-waiting caller, and never on a deadline of its own
// that a caller's store time could not vouch for (a deadline read from
// the callers' contexts is not the instant they end: ports/storetime.go).
type flight struct {
	ctx    context.Context
	cancel context.CancelFunc
	// waiting counts the requests still waiting for its answer, plus
	// one that runBatch holds while it fills the batch.
	waiting atomic.Int32
}

// leave is called once by each request that stops waiting for f.
func (f *flight) leave() {
	if f.waiting.Add(-1) == 0 {
		f.cancel()
	}
}

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// send runs one request's call: alone when its batcher has a call to
// spare (or batching is off), else in the next batch.
func (s *Store) send(ctx context.Context, keys, args []string) rueidis.RedisResult {
	b := s.batcherFor(keys[0])
	if s.maxBatch <= 1 {
		return s.exec(ctx, b, keys, args)
	}
	b.mu.Lock()
	if b.inflight < batchInFlight {
		b.inflight++
		b.mu.Unlock()
		resp := s.exec(ctx, b, keys, args)
		s.next(b)
		return resp
	}
	w := waiters.Get().(*waiter)
	w.ctx, w.keys, w.args = ctx, keys, args
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		select {
		case <-w.done:
			// Its answer and its end were both there when it ran (a
			// select picks either): the answer came first.
		default:
			// Gone before its answer. The waiter stays with its batch
			// (which may still hold it) and is never reused.
			if w.state.CompareAndSwap(waitQueued, waitLeft) || w.state.Load() == waitLeft {
				return rueidis.NewErrorResult(notSent(ctx))
			}
			if w.flight != nil {
				w.flight.leave()
			}
			return rueidis.NewErrorResult(fmt.Errorf("%w: %w", ports.ErrInFlight, ctx.Err()))
		}
	}
	resp := s.classify(ctx, w.keys, w.resp)
	w.reset()
	waiters.Put(w)
	return resp
}

// reset readies w for reuse.
func (w *waiter) reset() {
	w.ctx, w.keys, w.args, w.flight, w.resp = nil, nil, nil, nil, rueidis.RedisResult{}
	w.state.Store(waitQueued)
}

// notSent is the error of a request whose caller gave up before it was
// sent: it ran nothing.
func notSent(ctx context.Context) error {
	return fmt.Errorf("%w: its caller gave up while it waited in the store's queue: %w", ports.ErrNotRun, ctx.Err())
}

// Batched returns the batch calls the store has sent (calls of two
// requests or more) and the requests they carried; every other request
// went in a call of its own.
func (s *Store) Batched() (calls, requests uint64) {
	return s.batchCalls.Load(), s.batchRequests.Load()
}

// Dispatches reports whether the store may queue a call before sending
// it (ports.Dispatcher): whenever batching is on. It then calls
// ports.Dispatched on every call's context as it sends it, and the store
// deadline of an app.Limiter's call starts there.
func (s *Store) Dispatches() bool { return s.maxBatch > 1 }

// batcherFor returns the batcher of key's node: the one batcher of a
// standalone server, the batcher of key's slot on a cluster.
func (s *Store) batcherFor(key string) *batcher {
	if !s.cluster {
		return &s.batchers[0]
	}
	return &s.batchers[Slot(key)]
}

// next hands b's queue, if any, to a goroutine that sends it batch after
// batch until it is empty; else the call that ended is b's no more.
func (s *Store) next(b *batcher) {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go s.drain(b)
}

// drain sends b's queue, at most maxBatch requests a call, until it finds
// it empty; then its call is b's no more.
func (s *Store) drain(b *batcher) {
	var batch []*waiter
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		k := min(len(b.queue), s.maxBatch)
		batch = append(batch[:0], b.queue[:k]...)
		rest := copy(b.queue, b.queue[k:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		s.runBatch(b, batch, nil)
		clear(batch)
	}
}

// runBatch sends the requests of batch whose callers still wait as one
// call (or, if one, alone) and hands each its reply, in order. shared,
// when set, is the one context of every request (EvaluateBatch): the
// call runs under it. Otherwise the call runs until it answers or every
// request it carries has been left by its caller (flight).
func (s *Store) runBatch(b *batcher, batch []*waiter, shared context.Context) {
	f := &flight{ctx: shared, cancel: func() {}}
	if shared == nil {
		f.ctx, f.cancel = context.WithCancel(context.Background())
	}
	defer f.cancel()
	f.waiting.Store(1)
	live := batch[:0]
	for _, w := range batch {
		w.flight = f
		if w.ctx.Err() != nil {
			// Its caller is gone: it is never sent.
			w.state.CompareAndSwap(waitQueued, waitLeft)
			continue
		}
		f.waiting.Add(1)
		if !w.state.CompareAndSwap(waitQueued, waitSent) {
			f.waiting.Add(-1)
			continue
		}
		live = append(live, w)
	}
	f.leave() // the hold: from now on the last caller to leave ends it
	switch len(live) {
	case 0:
		return
	case 1:
		w := live[0]
		w.resp = s.exec(w.ctx, b, w.keys, w.args)
		w.done <- struct{}{}
		return
	}
	sizes := make([]byte, 0, 2*len(live))
	nk, na := 0, 1
	for _, w := range live {
		sizes = append(sizes, byte(len(w.keys)), byte(len(w.args)))
		nk, na = nk+len(w.keys), na+len(w.args)
	}
	keys, args := make([]string, 0, nk), make([]string, 1, na)
	args[0] = string(sizes)
	node := b.node.Load()
	for _, w := range live {
		keys = append(keys, w.keys...)
		args = append(args, w.args...)
		if shared == nil {
			ports.Dispatched(w.ctx, node)
		}
	}
	if shared != nil {
		ports.Dispatched(shared, node)
	}
	s.batchCalls.Add(1)
	s.batchRequests.Add(uint64(len(live)))
	sent := time.Now().UnixNano()
	resp := s.batch.Exec(f.ctx, s.client, keys, args)
	if resp.NonRedisError() == nil {
		node.answered(sent)
	}
	if re, ok := rueidis.IsRedisErr(resp.Error()); ok && (re.IsTryAgain() || isRedirection(re)) {
		// Redis ran none of it: each request goes on its own, with its
		// own retries and deadline, never a batch-wide failure, and in
		// arrival order, before any later request of the node's queue
		// (ports.Batcher's order).
		for _, w := range live {
			w.resp = s.exec(w.ctx, b, w.keys, w.args)
			w.done <- struct{}{}
		}
		return
	}
	replies, err := resp.ToArray()
	if err == nil && len(replies) != len(live) {
		err = fmt.Errorf("%w: batch of %d requests answered with %d replies", domain.ErrStoreUnavailable, len(live), len(replies))
	}
	for i, w := range live {
		switch {
		case resp.Error() != nil:
			w.resp = resp
		case err != nil:
			w.resp = rueidis.NewErrorResult(fmt.Errorf("%w: unexpected batch reply: %w", domain.ErrStoreUnavailable, err))
		default:
			w.resp = rueidis.NewResult(replies[i], nil)
		}
		w.done <- struct{}{}
	}
}

// EvaluateBatch decides reqs at now in order, each as its own Evaluate
// would; see ports.Batcher. The requests of one node (of one slot, on a
// cluster) go in calls of lua.BatchV5 of at most Config.MaxBatch each;
// those of different slots go side by side. A request that does not
// validate, or whose keys span two slots on a cluster, gets its error
// and is not sent.
func (s *Store) EvaluateBatch(ctx context.Context, now time.Time, reqs [][]domain.Limit) ([]domain.Result, []error) {
	res, errs := make([]domain.Result, len(reqs)), make([]error, len(reqs))
	if err := ports.CheckBatch(len(reqs)); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	cctx, cancel, whose := s.deadline(ctx)
	defer cancel()
	ws := make([]*waiter, len(reqs))
	bufs := make([]*callBuf, len(reqs))
	groups := map[*batcher][]*waiter{}
	var order []*batcher
	for i, limits := range reqs {
		if errs[i] = s.admit(ctx, limits, domain.ValidateLimits); errs[i] != nil {
			continue
		}
		bufs[i] = s.bufs.Get().(*callBuf)
		req := request{n: 1, consume: true}
		args := s.pack(bufs[i], now, limits, &req)
		ws[i] = &waiter{ctx: cctx, keys: bufs[i].keys, args: args, done: make(chan struct{}, 1)}
		b := s.batcherFor(bufs[i].keys[0])
		if groups[b] == nil {
			order = append(order, b)
		}
		groups[b] = append(groups[b], ws[i])
	}
	var wg sync.WaitGroup
	for _, b := range order {
		wg.Go(func() {
			g := groups[b]
			for len(g) > 0 {
				k := min(len(g), max(s.maxBatch, 1))
				s.runBatch(b, g[:k], cctx)
				g = g[k:]
			}
		})
	}
	wg.Wait()
	for i, w := range ws {
		if w == nil {
			continue
		}
		var resp rueidis.RedisResult
		if w.state.Load() == waitLeft {
			// Left out of its batch: the deadline passed before it went.
			resp = rueidis.NewErrorResult(notSent(cctx))
		} else {
			<-w.done
			resp = s.classify(cctx, w.keys, w.resp)
		}
		if resp.NonRedisError() == nil {
			defer s.bufs.Put(bufs[i])
		}
		reply, err := s.reply(ctx, cctx, whose, reqs[i], "", resp)
		if err == nil {
			var rep domain.Repeated
			if err = decode(reply, reqs[i], 1, true, &rep); err == nil {
				res[i] = rep.For(0, reqs[i])
			}
		}
		errs[i] = err
	}
	return res, errs
}

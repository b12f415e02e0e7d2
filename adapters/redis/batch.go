package redis

import (
	"context"
	"fmt"
	"sync"
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
}

// waiter is one queued request: its call's KEYS and ARGV, and what came
// back for it.
type waiter struct {
	ctx        context.Context
	keys, args []string
	done       chan struct{}
	// resp is its reply (or the batch's error); alone asks it to send
	// its own call (the batch was refused before it ran: TRYAGAIN, a
	// redirection past the bound).
	resp  rueidis.RedisResult
	alone bool
}

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// send runs one request's call: alone when its batcher has a call to
// spare (or batching is off), else in the next batch.
func (s *Store) send(ctx context.Context, keys, args []string) rueidis.RedisResult {
	if s.maxBatch <= 1 {
		return s.exec(ctx, keys, args)
	}
	b := s.batcherFor(keys[0])
	b.mu.Lock()
	if b.inflight < batchInFlight {
		b.inflight++
		b.mu.Unlock()
		resp := s.exec(ctx, keys, args)
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
		// Gone before its answer. The batch may carry it still (its
		// script may run, as a call abandoned on its deadline may), so
		// the waiter is left to it and never reused.
		return rueidis.NewErrorResult(ctx.Err())
	}
	resp := s.answer(ctx, w)
	*w = waiter{done: w.done}
	waiters.Put(w)
	return resp
}

// answer is what a batch brought w, classified as a call of its own
// would be; when Redis ran none of the batch, w's own call.
func (s *Store) answer(ctx context.Context, w *waiter) rueidis.RedisResult {
	if w.alone {
		return s.exec(ctx, w.keys, w.args)
	}
	return s.classify(ctx, w.keys, w.resp)
}

// Batched returns the batch calls the store has sent (calls of two
// requests or more) and the requests they carried; every other request
// went in a call of its own.
func (s *Store) Batched() (calls, requests uint64) {
	return s.batchCalls.Load(), s.batchRequests.Load()
}

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
		s.runBatch(batch)
		clear(batch)
	}
}

// runBatch sends the requests of batch still awaited as one call (or, if
// one, alone) and hands each its reply.
func (s *Store) runBatch(batch []*waiter) {
	live := batch[:0]
	var latest time.Time
	for _, w := range batch {
		if w.ctx.Err() != nil {
			// Its caller is gone and nothing was sent: it never runs.
			continue
		}
		live = append(live, w)
		if dl, ok := w.ctx.Deadline(); ok && dl.After(latest) {
			latest = dl
		}
	}
	if len(live) == 1 {
		w := live[0]
		w.resp = s.exec(w.ctx, w.keys, w.args)
		w.alone = false
		w.done <- struct{}{}
		return
	}
	if len(live) == 0 {
		return
	}
	// One call for them all, under the latest of their deadlines (every
	// call has one: Store.deadline); a request whose own deadline passes
	// first stops waiting for it.
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	sizes := make([]byte, 0, 2*len(live))
	nk, na := 0, 1
	for _, w := range live {
		sizes = append(sizes, byte(len(w.keys)), byte(len(w.args)))
		nk, na = nk+len(w.keys), na+len(w.args)
	}
	keys, args := make([]string, 0, nk), make([]string, 1, na)
	args[0] = string(sizes)
	for _, w := range live {
		keys = append(keys, w.keys...)
		args = append(args, w.args...)
	}
	s.batchCalls.Add(1)
	s.batchRequests.Add(uint64(len(live)))
	resp := s.batch.Exec(ctx, s.client, keys, args)
	if re, ok := rueidis.IsRedisErr(resp.Error()); ok && (re.IsTryAgain() || isRedirection(re)) {
		// Redis ran none of it: each request goes on its own, with its
		// own retries and deadline, never a batch-wide failure.
		for _, w := range live {
			w.alone = true
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
				s.runBatch(g[:k])
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
		select {
		case <-w.done:
			resp = s.answer(cctx, w)
		default:
			// Left out of its batch: its deadline passed before it went.
			resp = rueidis.NewErrorResult(cctx.Err())
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

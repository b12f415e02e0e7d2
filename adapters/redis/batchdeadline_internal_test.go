package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// A batch call runs until it answers or every request it carries has
// been left by its caller, never on a deadline read from the callers'
// contexts; a queued request whose caller gives up is never sent; and a
// batch Redis refused before running it (TRYAGAIN) is re-sent request by
// request in arrival order, before any later batch (docs/adr/018,
// ports/storetime.go).

// batchNow is the instant the tests below decide at (CallerTime).
var batchNow = time.UnixMicro(1_770_000_000_000_000)

// logLimit is one sliding log of limit units an hour on key, cost 1.
func logLimit(key string, limit int64) []domain.Limit {
	return []domain.Limit{{Key: key, Window: domain.Window{Limit: limit, Period: time.Hour, Algorithm: domain.SlidingLog}, Cost: 1}}
}

// newBatchStore returns a store on cfg, closed on t.Cleanup.
func newBatchStore(t *testing.T, cfg Config) *Store {
	s, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// staleDeadline is a context whose Deadline is an instant already past
// while it is not done (until its parent is): as the store-time context
// of an app.Limiter behaved, whose Deadline was a nominal instant earlier
// than the instant it ends (ports/storetime.go: a store derives its
// bounds from Done, never from Deadline).
type staleDeadline struct {
	context.Context
	at time.Time
}

func (c staleDeadline) Deadline() (time.Time, bool) { return c.at, true }

// TestBatchStaleDeadline: requests whose contexts report a deadline
// already past, but are live, are decided in one batch call: the call is
// not born expired (it once ran under the latest of its requests'
// deadlines, and every request failed with a timeout while Redis was
// healthy).
func TestBatchStaleDeadline(t *testing.T) {
	s := batchStore(t, false)
	tag := fmt.Sprint(rand.Uint64())
	const n, limit = 10, 6
	results, errs := make([]domain.Result, n), make([]error, n)
	ops := make([]batchOp, n)
	for i := range ops {
		ops[i] = func(ctx context.Context, s *Store, tag string) string {
			stale := staleDeadline{Context: ctx, at: time.Now().Add(-time.Second)}
			results[i], errs[i] = s.Evaluate(stale, batchNow, logLimit("{"+tag+"}:log", limit))
			return ""
		}
	}
	calls, reqs := s.Batched()
	inOneBatch(t, s, tag, ops)
	for i := range n {
		require.NoError(t, errs[i], "request %d", i)
		assert.Equal(t, i < limit, results[i].Allowed, "request %d", i)
	}
	calls2, reqs2 := s.Batched()
	assert.Equal(t, calls+1, calls2, "not one batch call")
	assert.Equal(t, reqs+n, reqs2, "the batch call did not carry every request")
}

// threeCallers are three requests on one sliding log of 10, queued in
// order; the second runs under a context the test ends with leave, and
// left is closed once it has returned.
type threeCallers struct {
	tag     string
	key     string
	results [3]domain.Result
	errs    [3]error
	leave   context.CancelFunc
	left    chan struct{}
	ops     []batchOp
}

func newThreeCallers(t *testing.T) *threeCallers {
	tag := fmt.Sprint(rand.Uint64())
	c := &threeCallers{tag: tag, key: "{" + tag + "}:log", left: make(chan struct{})}
	gone, leave := context.WithCancel(t.Context())
	t.Cleanup(leave)
	c.leave = leave
	for i := range 3 {
		c.ops = append(c.ops, func(ctx context.Context, s *Store, _ string) string {
			if i == 1 {
				ctx = gone
				defer close(c.left)
			}
			c.results[i], c.errs[i] = s.Evaluate(ctx, batchNow, logLimit(c.key, 10))
			return ""
		})
	}
	return c
}

// check requires the second request's error to wrap want and
// context.Canceled, the others admitted, one batch call since the store
// had sent calls of reqs requests, carrying sent requests, and Redis to
// have counted the units of those alone.
func (c *threeCallers) check(t *testing.T, s *Store, want error, calls, reqs uint64, sent int) {
	require.ErrorIs(t, c.errs[1], want)
	require.ErrorIs(t, c.errs[1], context.Canceled)
	for _, i := range []int{0, 2} {
		require.NoError(t, c.errs[i], "request %d", i)
		assert.True(t, c.results[i].Allowed, "request %d", i)
	}
	calls2, reqs2 := s.Batched()
	assert.Equal(t, calls+1, calls2, "not one batch call")
	assert.Equal(t, reqs+uint64(sent), reqs2, "requests the batch carried")
	peek, err := s.Peek(t.Context(), batchNow, logLimit(c.key, 10))
	require.NoError(t, err)
	assert.Equal(t, int64(10-sent), peek.Remaining, "Redis counted other requests than those sent")
}

// TestBatchGoneBeforeSent: a queued request whose caller gives up before
// its batch is sent is never sent (ports.ErrNotRun, with its context's
// error), and Redis counts nothing for it; the others are decided.
func TestBatchGoneBeforeSent(t *testing.T) {
	s := batchStore(t, false)
	c := newThreeCallers(t)
	ops := append(c.ops, func(context.Context, *Store, string) string {
		// Every request has queued: the second's caller gives up before
		// the queue is handed on, and has its answer.
		c.leave()
		<-c.left
		return ""
	})
	calls, reqs := s.Batched()
	inOneBatch(t, s, c.tag, ops)
	c.check(t, s, ports.ErrNotRun, calls, reqs, 2)
}

// TestBatchGoneInFlight: a caller that gives up once its batch is sent
// gets an error wrapping ports.ErrInFlight (it may have run); the batch
// goes on for the callers still waiting, who get their answers, and
// Redis counted every request. A proxy holds the batch call (a black
// hole) until the caller has given up.
func TestBatchGoneInFlight(t *testing.T) {
	u, err := url.Parse(redistest.StandaloneURL(t))
	require.NoError(t, err)
	p := faultproxy.New(t, redistest.Standalone(t))
	u.Host = p.Addr()
	s := newBatchStore(t, Config{URL: u.String(), Mode: ModeStandalone, Timeout: 5 * time.Second, Time: CallerTime})
	c := newThreeCallers(t)
	calls, reqs := s.Batched()
	p.Inject(faultproxy.Fault{Mode: faultproxy.BlackHole})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer p.Heal()
		// Batched counts the call before it is sent, and once every
		// request of it is marked sent.
		sent := assert.Eventually(t, func() bool {
			n, _ := s.Batched()
			return n > calls
		}, 10*time.Second, 50*time.Microsecond, "the batch was never sent")
		c.leave()
		if sent {
			<-c.left
		}
	}()
	defer func() { <-watched }() // no report from it after the test ends
	inOneBatch(t, s, c.tag, c.ops)
	<-watched
	c.check(t, s, ports.ErrInFlight, calls, reqs, 3)
}

// clusterMaster is a master of the cluster as CLUSTER SLOTS names it.
type clusterMaster struct{ addr, id string }

// slotMasters returns the master serving slot and another master, read
// from CLUSTER SLOTS on addr.
func slotMasters(t *testing.T, addr string, slot int) (owner, other clusterMaster) {
	v, err := redistest.Do(t.Context(), addr, "CLUSTER", "SLOTS")
	require.NoError(t, err)
	entries, _ := v.([]any)
	var masters []clusterMaster
	for _, e := range entries {
		r, _ := e.([]any)
		require.GreaterOrEqual(t, len(r), 3, "CLUSTER SLOTS entry %v", e)
		first, _ := r[0].(int64)
		last, _ := r[1].(int64)
		node, _ := r[2].([]any)
		require.GreaterOrEqual(t, len(node), 3, "CLUSTER SLOTS entry %v", e)
		host, _ := node[0].(string)
		port, _ := node[1].(int64)
		id, _ := node[2].(string)
		m := clusterMaster{addr: net.JoinHostPort(host, strconv.FormatInt(port, 10)), id: id}
		if int64(slot) >= first && int64(slot) <= last {
			owner = m
		}
		masters = append(masters, m)
	}
	require.NotEmpty(t, owner.id, "no master serves slot %d", slot)
	slices.SortFunc(masters, func(a, b clusterMaster) int { return strings.Compare(a.id, b.id) })
	for _, m := range masters {
		if m.id != owner.id {
			return owner, m
		}
	}
	t.Fatalf("the cluster has one master: no slot can move")
	return
}

// errorStat returns INFO errorstats' count of the error code on addr.
func errorStat(t *testing.T, addr, code string) int64 {
	v, err := redistest.Do(t.Context(), addr, "INFO", "errorstats")
	require.NoError(t, err)
	info, _ := v.(string)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+code+":count="); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// TestBatchTryAgainKeepsOrder: a batch that Redis refuses with TRYAGAIN
// (its keys are split between the two nodes of a slot in migration) is
// re-sent request by request, in arrival order, before the next batch of
// its batcher (ports.Batcher's order). With MaxBatch 2, EvaluateBatch
// sends [r1 K1, r2 K2] then [r3 K1, r4 K1] on one slot; K1 (a log of 3
// with 1 unit used) stays on the source and K2 has moved to the target,
// so the first batch gets TRYAGAIN. In arrival order r1 and r3 take K1's
// last 2 units and r4 is refused; the second batch run before the first
// one's re-sends would admit r3 and r4 and refuse r1.
func TestBatchTryAgainKeepsOrder(t *testing.T) {
	addrs := redistest.Cluster(t)
	s := newBatchStore(t, Config{Addrs: addrs, Mode: ModeCluster, Timeout: 5 * time.Second, Time: CallerTime, MaxBatch: 2})
	tag := fmt.Sprint(rand.Uint64())
	k1, k2 := "{"+tag+"}:k1", "{"+tag+"}:k2"
	slot := int(Slot(k1))
	src, dst := slotMasters(t, addrs[0], slot)
	for _, k := range []string{k1, k2} {
		res, err := s.Evaluate(t.Context(), batchNow, logLimit(k, 3))
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}

	// Whatever happens below, the slot ends stable on its owner and the
	// test's keys are gone: other tests share the cluster.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range []string{k1, k2} {
			// On the source, or (moved) on the target through ASK.
			if err := s.client.Do(ctx, s.client.B().Del().Key(k).Build()).Error(); err != nil {
				t.Errorf("DEL %s: %v", k, err)
			}
		}
		for _, m := range []clusterMaster{dst, src} {
			if _, err := redistest.Do(ctx, m.addr, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "STABLE"); err != nil {
				t.Errorf("SETSLOT %d STABLE on %s: %v", slot, m.addr, err)
			}
			v, err := redistest.Do(ctx, m.addr, "CLUSTER", "NODES")
			nodes, _ := v.(string)
			if err != nil || strings.Contains(nodes, "["+strconv.Itoa(slot)+"-") {
				t.Errorf("slot %d still in migration on %s: %v\n%s", slot, m.addr, err, nodes)
			}
		}
		if v, err := redistest.Do(ctx, dst.addr, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); err != nil || v != int64(0) {
			t.Errorf("keys of slot %d left on %s: %v %v", slot, dst.addr, v, err)
		}
	})
	host, port, err := net.SplitHostPort(dst.addr)
	require.NoError(t, err)
	for _, cmd := range [][]string{
		{dst.addr, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "IMPORTING", src.id},
		{src.addr, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "MIGRATING", dst.id},
		{src.addr, "MIGRATE", host, port, "", "0", "5000", "KEYS", k2},
	} {
		_, err := redistest.Do(t.Context(), cmd[0], cmd[1:]...)
		require.NoError(t, err, "%v on %s", cmd[1:], cmd[0])
	}

	tryAgain := errorStat(t, src.addr, "TRYAGAIN")
	res, errs := s.EvaluateBatch(t.Context(), batchNow, [][]domain.Limit{
		logLimit(k1, 3), logLimit(k2, 3), logLimit(k1, 3), logLimit(k1, 3),
	})
	for i, err := range errs {
		require.NoError(t, err, "request %d", i+1)
	}
	require.Greater(t, errorStat(t, src.addr, "TRYAGAIN"), tryAgain, "the first batch was not refused with TRYAGAIN: the test proved nothing")
	admitted := make([]bool, len(res))
	for i, r := range res {
		admitted[i] = r.Allowed
	}
	assert.Equal(t, []bool{true, true, true, false}, admitted, "r1..r4 admitted, in arrival order")
}

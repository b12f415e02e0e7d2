package redis

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/ports"
)

// Answers per node (ports.Progress, docs/adr/008 "The store deadline is
// the store's"). The calls sent to one node share its connection and are
// answered in order: a call waits in the node's input behind the calls
// sent before it, for as long as the node takes to answer them. That
// wait is the node's work for the service's other calls, not slowness
// with this one, so a call's store deadline counts from the node's
// latest answer when it came after the call was sent, as long as the
// node answers a call quickly when little is ahead of it (its latency
// floor). Only answers a caller still waited for count, and a node whose
// every answer comes late (a slow link) has a floor above the deadline:
// it misses every deadline, as it should.
//
// Each batcher points at the record of the node that serves its slot:
// one record on a standalone server; on a cluster, one per slot until a
// slot map is known (Prober), then one per master.

// nodeAnswers is the answers' record of one node: its latest answer,
// and the least time it took to answer a call in the current and the
// previous span of floorSpan.
type nodeAnswers struct {
	at   atomic.Int64 // Unix ns of the latest answer
	span atomic.Int64 // the current span's index
	// cur and prev are the least latencies (ns) of the current and the
	// previous span, 0 for none.
	cur, prev atomic.Int64
}

// floorSpan is how long a span of the latency floor lasts: the floor is
// the least of the last one to two spans.
const floorSpan = int64(500 * time.Millisecond)

var _ ports.Progress = (*nodeAnswers)(nil)

// Answered is the latest instant (Unix ns) the node answered a call, and
// the least time it took to answer one over the last second (-1: none).
func (n *nodeAnswers) Answered() (int64, time.Duration) {
	at := n.at.Load()
	if n.span.Load() < time.Now().UnixNano()/floorSpan-1 {
		return at, -1 // nothing answered for two spans
	}
	floor := time.Duration(-1)
	for _, v := range []int64{n.cur.Load(), n.prev.Load()} {
		if v > 0 && (floor < 0 || time.Duration(v) < floor) {
			floor = time.Duration(v)
		}
	}
	return at, floor
}

// answered records an answer now to a call sent at sent (Unix ns).
func (n *nodeAnswers) answered(sent int64) {
	t := time.Now().UnixNano()
	for cur := n.at.Load(); t > cur && !n.at.CompareAndSwap(cur, t); cur = n.at.Load() {
	}
	if sp := t / floorSpan; sp != n.span.Load() {
		// A new span: the current one becomes the previous (or is
		// forgotten, if it is older). Racing writers lose a sample at
		// worst.
		old := n.span.Swap(sp)
		if old == sp-1 {
			n.prev.Store(n.cur.Load())
		} else if old != sp {
			n.prev.Store(0)
		}
		if old != sp {
			n.cur.Store(0)
		}
	}
	lat := max(t-sent, 1)
	for cur := n.cur.Load(); (cur == 0 || lat < cur) && !n.cur.CompareAndSwap(cur, lat); cur = n.cur.Load() {
	}
}

// nodeRecords maps the masters of a cluster to their records, kept
// across slot maps so that a master's record survives a reshard.
type nodeRecords struct {
	mu    sync.Mutex
	nodes map[string]*nodeAnswers
	last  *topology
}

// initAnswers gives every batcher a record of its own.
func (s *Store) initAnswers() {
	for i := range s.batchers {
		s.batchers[i].node.Store(new(nodeAnswers))
	}
}

// learnSlots points each slot's batcher at the record of the master that
// serves it in t (a slot map a probe read). A map equal to the last one
// changes nothing.
func (s *Store) learnSlots(t *topology) {
	if !s.cluster || t == nil || len(t.ranges) == 0 {
		return
	}
	r := &s.records
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && sameRanges(r.last.ranges, t.ranges) {
		return
	}
	if r.nodes == nil {
		r.nodes = map[string]*nodeAnswers{}
	}
	for _, o := range t.ranges {
		n := r.nodes[o.node]
		if n == nil {
			n = new(nodeAnswers)
			r.nodes[o.node] = n
		}
		for slot := int(o.first); slot <= int(o.last) && slot < len(s.batchers); slot++ {
			s.batchers[slot].node.Store(n)
		}
	}
	r.last = t
}

func sameRanges(a, b []slotOwner) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// answersOf returns the answers' record of the node at addr: the one
// record of a standalone server, a master's once a slot map named it;
// nil for a node no slot map named yet.
func (s *Store) answersOf(addr string) *nodeAnswers {
	if !s.cluster {
		return s.batchers[0].node.Load()
	}
	s.records.mu.Lock()
	defer s.records.mu.Unlock()
	return s.records.nodes[addr]
}

// allAnswers is the answers of several nodes a probe round waits on
// together: the latest instant by which every one of them had answered,
// and the worst of their latency floors (-1 when one has none).
type allAnswers []*nodeAnswers

func (a allAnswers) Answered() (int64, time.Duration) {
	var at int64
	var floor time.Duration
	for i, n := range a {
		if n == nil {
			return 0, -1
		}
		t, f := n.Answered()
		if i == 0 || t < at {
			at = t
		}
		if f < 0 {
			return at, -1
		}
		floor = max(floor, f)
	}
	return at, floor
}

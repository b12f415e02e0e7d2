package otel

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/domain"
)

// observeFunc reports one series of an observable counter.
type observeFunc func(v int64, opts ...metric.ObserveOption)

// nLayers are the layer label's values: none, tenant, user.
const nLayers = int(domain.LayerUser) + 1

// tenantCount is one tenant_id's rejections per layer, with the attribute
// set of each series.
type tenantCount struct {
	n    [nLayers]int64
	opts [nLayers][]metric.ObserveOption
}

func newTenantCount(tenantID string) *tenantCount {
	c := &tenantCount{}
	for l := range nLayers {
		c.opts[l] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String(LabelTenantID, tenantID),
			attribute.String(LabelLayer, domain.Layer(l).String()),
		))}
	}
	return c
}

func (c *tenantCount) observe(o observeFunc) {
	for l, n := range c.n {
		if n > 0 {
			o(n, c.opts[l]...)
		}
	}
}

// tenantSeries counts rejections per (tenant_id, layer) with at most max
// tenants labelled by their pseudonym; the rest count under "(other)",
// anonymous traffic under "(anonymous)". A tenant takes a free slot when
// it is first rejected. Every epoch, the slots go to the tenants most
// rejected during it (a Space-Saving sketch of 2×max entries estimates
// them in bounded memory), then to the tenants already labelled; a tenant
// that loses its slot loses its series, and a later one starts from zero,
// as a counter does after a restart. Each rejection is counted once, in
// one series, and every series is monotonic while it exists.
type tenantSeries struct {
	mu       sync.Mutex
	max      int // 0: per-tenant series off
	epoch    time.Duration
	epochEnd time.Time
	labelled map[string]*tenantCount
	other    *tenantCount
	anon     *tenantCount
	sketch   spaceSaving
}

func newTenantSeries(n int, epoch time.Duration) *tenantSeries {
	n = max(n, 0)
	return &tenantSeries{
		max:      n,
		epoch:    epoch,
		labelled: make(map[string]*tenantCount, n),
		other:    newTenantCount(ValueOther),
		anon:     newTenantCount(ValueAnonymous),
		sketch:   newSpaceSaving(2 * n),
	}
}

// add counts one rejection of tenantID ("" for anonymous) at now.
func (t *tenantSeries) add(tenantID string, layer domain.Layer, now time.Time) {
	l := int(layer)
	if l >= nLayers {
		l = int(domain.LayerNone)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.epochEnd.IsZero() {
		t.epochEnd = now.Add(t.epoch)
	} else if !now.Before(t.epochEnd) {
		t.rotate()
		t.epochEnd = now.Add(t.epoch)
	}
	switch {
	case tenantID == "":
		t.anon.n[l]++
		return
	case t.max == 0:
		t.other.n[l]++
		return
	}
	t.sketch.add(tenantID)
	c, ok := t.labelled[tenantID]
	if !ok && len(t.labelled) < t.max {
		c = newTenantCount(tenantID)
		t.labelled[tenantID] = c
		ok = true
	}
	if ok {
		c.n[l]++
	} else {
		t.other.n[l]++
	}
}

// rotate gives the slots to the epoch's most rejected tenants first, then
// to those already labelled, most rejected first; it forgets the epoch.
func (t *tenantSeries) rotate() {
	next := make(map[string]*tenantCount, t.max)
	for _, id := range t.sketch.top(t.max) {
		c, ok := t.labelled[id]
		if !ok {
			c = newTenantCount(id)
		}
		next[id] = c
	}
	if len(next) < t.max {
		kept := make([]string, 0, len(t.labelled))
		for id := range t.labelled {
			if _, ok := next[id]; !ok {
				kept = append(kept, id)
			}
		}
		slices.SortFunc(kept, func(a, b string) int {
			return cmp.Or(cmp.Compare(t.labelled[b].total(), t.labelled[a].total()), cmp.Compare(a, b))
		})
		for _, id := range kept[:min(len(kept), t.max-len(next))] {
			next[id] = t.labelled[id]
		}
	}
	t.labelled = next
	t.sketch.reset()
}

func (c *tenantCount) total() (n int64) {
	for _, v := range c.n {
		n += v
	}
	return n
}

// observe reports every series with a count.
func (t *tenantSeries) observe(o observeFunc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.labelled {
		c.observe(o)
	}
	t.other.observe(o)
	t.anon.observe(o)
}

// spaceSaving is the Space-Saving heavy-hitters sketch (Metwally et al.):
// at most cap keys; an unseen key replaces the least counted one and
// inherits its count plus one, so every key's count is an upper bound and
// any key counted more than total/cap times is kept.
type spaceSaving struct {
	cap   int
	index map[string]int
	items []ssItem
}

type ssItem struct {
	key   string
	count int64
}

func newSpaceSaving(cap int) spaceSaving {
	return spaceSaving{cap: cap, index: make(map[string]int, cap), items: make([]ssItem, 0, cap)}
}

func (s *spaceSaving) add(key string) {
	if i, ok := s.index[key]; ok {
		s.items[i].count++
		return
	}
	if len(s.items) < s.cap {
		s.index[key] = len(s.items)
		s.items = append(s.items, ssItem{key: key, count: 1})
		return
	}
	least := 0
	for i := range s.items {
		if s.items[i].count < s.items[least].count {
			least = i
		}
	}
	delete(s.index, s.items[least].key)
	s.index[key] = least
	s.items[least] = ssItem{key: key, count: s.items[least].count + 1}
}

// top returns up to n keys, most counted first.
func (s *spaceSaving) top(n int) []string {
	sorted := slices.Clone(s.items)
	slices.SortFunc(sorted, func(a, b ssItem) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.key, b.key))
	})
	keys := make([]string, 0, min(n, len(sorted)))
	for _, it := range sorted[:min(n, len(sorted))] {
		keys = append(keys, it.key)
	}
	return keys
}

func (s *spaceSaving) reset() {
	clear(s.index)
	s.items = s.items[:0]
}

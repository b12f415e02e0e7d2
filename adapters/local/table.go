package local

import "sync/atomic"

// minTableSlots is the size of an empty shard's table.
const minTableSlots = 16

// table is one directory shard's index of its entries: open addressing
// with linear probing over pointers. Decisions read it without a lock
// (atomic loads only, so a hit costs no shared write); writers hold the
// shard lock, change slots in place and publish a new table to grow or
// shrink it. A reader may thus miss an entry being added, or find one being
// removed: either way it falls back to the shard lock, and an entry found
// is used only once locked and seen alive.
//
// Live and removed slots never fill more than half the table, so a probe
// always ends on an empty slot; a table shrinks when its live slots fall to
// an eighth, so its size follows the keys (8 to 64 bytes per key).
type table struct {
	mask  uint64
	slots []atomic.Pointer[entry]
	live  int // guarded by the shard lock, like every write
	gone  int // slots holding tombstone
}

// tombstone marks a removed slot, so that probes continue past it.
var tombstone = new(entry)

func newTable(slots int) *table {
	return &table{mask: uint64(slots - 1), slots: make([]atomic.Pointer[entry], slots)}
}

// find returns the entry of key, whose hash is h, or nil.
func (t *table) find(h uint64, key string) *entry {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e.hash == h && e != tombstone && e.key == key {
			return e
		}
	}
}

// insert adds e, whose key the table does not hold, and returns the table
// to publish (t itself, or a larger one). Called with the shard lock held.
func (t *table) insert(e *entry) *table {
	if 2*(t.live+t.gone+1) > len(t.slots) {
		t = t.resized(t.live + 1)
	}
	for i := e.hash & t.mask; ; i = (i + 1) & t.mask {
		switch t.slots[i].Load() {
		case tombstone:
			t.gone--
		case nil:
		default:
			continue
		}
		t.slots[i].Store(e)
		t.live++
		return t
	}
}

// remove takes e out and returns the table to publish (t itself, or a
// smaller one). Called with the shard lock held.
func (t *table) remove(e *entry) *table {
	for i := e.hash & t.mask; ; i = (i + 1) & t.mask {
		switch t.slots[i].Load() {
		case nil:
			return t // not there
		case e:
			t.slots[i].Store(tombstone)
			t.live--
			t.gone++
			if 8*t.live < len(t.slots) && len(t.slots) > minTableSlots {
				return t.resized(t.live)
			}
			return t
		}
	}
}

// resized returns a new table holding t's live entries, sized for n of
// them at a quarter load.
func (t *table) resized(n int) *table {
	size := minTableSlots
	for size < 4*n {
		size *= 2
	}
	nt := newTable(size)
	for i := range t.slots {
		if e := t.slots[i].Load(); e != nil && e != tombstone {
			for j := e.hash & nt.mask; ; j = (j + 1) & nt.mask {
				if nt.slots[j].Load() == nil {
					nt.slots[j].Store(e)
					break
				}
			}
		}
	}
	nt.live = t.live
	return nt
}

// each calls f on every entry of the table. Called with the shard lock
// held; f may remove entries (from the shard's current table).
func (t *table) each(f func(e *entry)) {
	for i := range t.slots {
		if e := t.slots[i].Load(); e != nil && e != tombstone {
			f(e)
		}
	}
}

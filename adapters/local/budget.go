package local

import (
	"fmt"
	"math/bits"
	"runtime"
	"unsafe"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/sluicehq/sluice/domain"
)

// The memory model: how Config.MaxMemory is shared out (see the package
// doc). Every size is an upper estimate of what the Go heap really holds,
// rounded up to the allocator's size classes; TestMaxMemoryBoundsLiveAllocs
// checks the sum against the live heap.
const (
	// bytesPerCounter derives ristretto's admission counters from
	// MaxMemory: one per 128 bytes, rounded down to a power of two (its
	// sketch rounds up), so that the sketch (4 bits × 4 rows) and its
	// doorkeeper (a 16-bit-per-counter bloom filter) take 4 bytes per
	// counter, at most 1/32 of MaxMemory. That is 2 to 5 counters per key
	// the store can hold, enough for TinyLFU to tell a key used many times
	// from one used once.
	bytesPerCounter = 128
	minCounters     = 1 << 10
	// setBufSlots is ristretto's Set buffer (fixed inside ristretto).
	setBufSlots = 32 << 10
	// ristrettoShardBytes covers ristretto's 256 item-map shards (header
	// and first group each) and the rest of its fixed structures.
	ristrettoShardBytes = 256 * 576
	// stripeBytes is one of ristretto's Get buffers (64 hashes): one per P,
	// twice over for sync.Pool's victim cache, plus those queued for its
	// policy goroutine.
	stripeBytes = 1 << 10
	// slotBytes is what ristretto's item and cost maps spend per key they
	// hold, with Go maps' growth headroom: measured at 215 bytes once keys
	// churn through the maps (192 were reserved, and the live heap passed
	// MaxMemory under sustained churn).
	// Go maps never shrink, so it is reserved for the most keys ristretto
	// has held at once.
	slotBytes = 224
	// dirBytes is a key's slot in the directory's table, whose load stays
	// between 1/8 and 1/2 (8-byte slots).
	dirBytes = 64
	// logEntryBytes is one sliding-log entry (a timestamp and a count).
	logEntryBytes = 16
	// baseLogEntries is what the first estimate of a sliding log covers.
	baseLogEntries = 4
	// delBatch bounds the Dels the sweeper hands ristretto before waiting
	// for them, so that their Items stay within the fixed share.
	delBatch = 1024
	// maxInflightSets bounds the Sets waiting in ristretto's buffer. With
	// delBatch it keeps the buffer from ever filling, so that ristretto
	// never drops one of the store's writes.
	maxInflightSets = 8 << 10
	// metricsBytes covers ristretto's metrics (WithCacheMetrics): its
	// counters and the admission times of up to 100,000 keys.
	metricsBytes = 9 << 20
	// fixedSlack covers the store's own small structures.
	fixedSlack = 64 << 10
	// outShare: the keys held outside ristretto get 1/outShare of what the
	// fixed share and the reservation leave; ristretto's cache the rest.
	outShare = 8
)

var (
	// entryBytes is an entry's own allocation.
	entryBytes = sizeClass(int64(unsafe.Sizeof(entry{})))
	// itemBytes is the Item ristretto allocates for a Set or a Del while it
	// waits in the Set buffer.
	itemBytes = sizeClass(int64(unsafe.Sizeof(ristretto.Item[*entry]{})))
)

// plan is how one store shares out its MaxMemory.
type plan struct {
	max      int64 // MaxMemory
	counters int64 // ristretto's NumCounters
	fixed    int64 // structures whose size does not depend on the keys
	// cacheCost, when non-zero, fixes ristretto's share (tests).
	cacheCost int64
}

func newPlan(cfg Config, o options) (plan, error) {
	p := plan{max: cfg.MaxMemory, cacheCost: cfg.cacheCost}
	p.counters = max(prevPow2(p.max/bytesPerCounter), minCounters)
	procs := int64(max(runtime.GOMAXPROCS(0), runtime.NumCPU()))
	p.fixed = 4*p.counters + setBufSlots*8 + ristrettoShardBytes +
		3*procs*stripeBytes + delBatch*(itemBytes+8) +
		numShards*(int64(unsafe.Sizeof(shard{}))+minTableSlots*8+64) + fixedSlack
	if o.cacheMetrics {
		p.fixed += metricsBytes
	}
	if p.fixed > p.max/2 {
		return p, &domain.ConfigError{Field: "local.max_memory", Reason: fmt.Sprintf(
			"%d bytes leave too little for keys: the fixed structures take %d (at least twice that is needed)", p.max, p.fixed)}
	}
	return p, nil
}

// shares returns ristretto's MaxCost and the bytes for keys held outside
// it, once the largest number of keys ristretto has held at once reserved
// its index.
func (p plan) shares(peakSlots int64) (cache, out int64) {
	free := max(p.max-p.fixed-peakSlots*slotBytes, p.max/16)
	if p.cacheCost > 0 {
		return p.cacheCost, max(free-p.cacheCost, free/2)
	}
	out = free / outShare
	return free - out, out
}

// reserved returns the bytes counted outside the keys: the fixed
// structures and ristretto's index.
func (p plan) reserved(peakSlots int64) int64 { return p.fixed + peakSlots*slotBytes }

// sizeClasses are the Go allocator's small size classes: an allocation of
// n bytes takes the first class of at least n.
var sizeClasses = [...]int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224,
	240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280,
	1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784,
	6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760,
	24576, 27264, 28672, 32768}

// sizeClass returns the heap bytes an allocation of n bytes takes: its size
// class, or whole 8 KiB pages beyond 32 KiB.
func sizeClass(n int64) int64 {
	if n <= 0 {
		return 0
	}
	if n > sizeClasses[len(sizeClasses)-1] {
		return (n + 8191) &^ 8191
	}
	lo, hi := 0, len(sizeClasses)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if sizeClasses[mid] < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return sizeClasses[lo]
}

// prevPow2 returns the largest power of two not above n (n > 0), or 0.
func prevPow2(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return 1 << (63 - bits.LeadingZeros64(uint64(n)))
}

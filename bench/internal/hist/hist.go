// Package hist is a latency histogram in the manner of HdrHistogram:
// log-linear buckets with a fixed relative precision, so that recording is
// one array increment (no allocation, no sort) and quantiles of millions of
// samples cost a walk over a few thousand counters.
//
// Every power of two of nanoseconds is split into 128 buckets, so a
// reported quantile is within 1/128 (0.8 %) of the true sample, and always
// at or above it: the upper bound of the sample's bucket is reported.
package hist

import (
	"math/bits"
	"time"
)

// subBits is log2 of the buckets per power of two: 7 bits, < 0.8 % error.
const subBits = 7

// maxShift bounds the buckets to values below 2^(maxShift+subBits+1) ns
// (about 69 s); longer values share the last bucket, which reports Max.
const maxShift = 28

const buckets = (maxShift + 2) << subBits

// Histogram counts durations. The zero value is empty and ready to use.
// It is not safe for simultaneous use: give each goroutine its own and
// Merge them.
type Histogram struct {
	counts [buckets]uint32
	total  uint64
	max    time.Duration
}

// index returns the bucket of v nanoseconds: values below 256 have their
// own bucket; above, the top 8 significant bits pick one.
func index(v uint64) int {
	if v < 2<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	if shift > maxShift {
		return buckets - 1
	}
	return shift<<subBits + int(v>>shift)
}

// upper returns the largest value that falls in bucket i.
func upper(i int) uint64 {
	if i < 2<<subBits {
		return uint64(i)
	}
	shift := i>>subBits - 1
	m := uint64(i - shift<<subBits)
	return (m+1)<<shift - 1
}

// Record counts one duration (a negative one counts as zero).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[index(v)]++
	h.total++
	h.max = max(h.max, d)
}

// Count returns the number of recorded durations.
func (h *Histogram) Count() uint64 { return h.total }

// Max returns the longest recorded duration.
func (h *Histogram) Max() time.Duration { return h.max }

// Merge adds every count of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// Quantile returns the duration at or below which a fraction q (0 to 1) of
// the recorded durations fall, rounded up to its bucket's upper bound
// (never above Max); 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total) + 0.5)
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank && i < buckets-1 {
			return min(time.Duration(upper(i)), h.max)
		}
	}
	return h.max
}

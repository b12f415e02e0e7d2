package hist

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsAreContiguousAndOrdered(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<22; v += 1 + v/512 {
		i := index(v)
		if i < prev {
			t.Fatalf("index(%d) = %d after %d: buckets out of order", v, i, prev)
		}
		if up := upper(i); up < v {
			t.Fatalf("upper(index(%d)) = %d, below the value", v, up)
		}
		if i > 0 && upper(i-1) >= v {
			t.Fatalf("value %d also fits bucket %d (upper %d)", v, i-1, upper(i-1))
		}
		prev = i
	}
}

func TestQuantilesWithinPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	sample := make([]time.Duration, 100_000)
	for i := range sample {
		// Log-uniform from 1 µs to 100 ms, like latencies.
		d := time.Duration(1000 * math.Exp2(rng.Float64()*16.6))
		sample[i] = d
		h.Record(d)
	}
	slices.Sort(sample)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		want := sample[min(int(q*float64(len(sample))+0.5), len(sample))-1]
		got := h.Quantile(q)
		if got < want || float64(got-want) > float64(want)/128 {
			t.Errorf("Quantile(%v) = %v, sorted sample says %v (want within +0.8%%)", q, got, want)
		}
	}
	if h.Count() != uint64(len(sample)) || h.Max() != sample[len(sample)-1] {
		t.Errorf("Count, Max = %d, %v; want %d, %v", h.Count(), h.Max(), len(sample), sample[len(sample)-1])
	}
}

func TestMergeAndEdges(t *testing.T) {
	var a, b Histogram
	if a.Quantile(0.5) != 0 {
		t.Error("an empty histogram has no quantile but 0")
	}
	a.Record(-time.Second) // counts as zero
	b.Record(10 * time.Minute)
	b.Record(3 * time.Microsecond)
	a.Merge(&b)
	if a.Count() != 3 {
		t.Fatalf("Count after Merge = %d, want 3", a.Count())
	}
	if got := a.Quantile(0); got != 0 {
		t.Errorf("Quantile(0) = %v, want 0", got)
	}
	if got := a.Quantile(1); got != 10*time.Minute {
		t.Errorf("Quantile(1) = %v, want the clamped maximum 10m", got)
	}
	if got := a.Quantile(0.5); got < 3*time.Microsecond || got > 3*time.Microsecond+3*time.Microsecond/128 {
		t.Errorf("median = %v, want 3µs within 0.8%%", got)
	}
}

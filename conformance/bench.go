package conformance

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Benchmark measures the stores made by newStore on the requests sluice
// sends: Evaluate with 1 key (anonymous, one window), 2 keys (burst and
// sustained) and 9 keys (four dimensions by two windows plus the
// tenant-global key), for each algorithm, from one goroutine (Serial) and
// from GOMAXPROCS goroutines on the same keys (Parallel, the hot-tenant
// case); and Peek with 9 keys. A store that implements ports.Reserver is
// measured on reservations too: Reserve then Settle (a full refund) of a
// concurrency window with 1 or 8 rate windows, serial.
//
// newStore is called once per sub-benchmark with the sub-benchmark's
// *testing.B and registers its own cleanup, as with Run. Every call is admitted in the serial runs: each key allows
// 100 units per second and the scripted clock moves 10ms per call. In the
// parallel runs calls may reach the store out of order, so a few can be
// refused; the share is reported as refused/op. A store that reads its own
// clock (Features.ServerTime) ignores the scripted one: its refused/op
// says how many calls came faster than 100 per second per key.
func Benchmark(b *testing.B, newStore func(t testing.TB) ports.Store) {
	for _, n := range []int{1, 2, 9} {
		for _, a := range algorithms {
			for _, parallel := range []bool{false, true} {
				mode := "Serial"
				if parallel {
					mode = "Parallel"
				}
				name := fmt.Sprintf("Evaluate/%s/%s/%s", a, keysName(n), mode)
				b.Run(name, func(b *testing.B) { benchmarkCalls(b, newStore(b), a, n, parallel, true) })
			}
		}
	}
	for _, a := range algorithms {
		b.Run(fmt.Sprintf("Peek/%s/%s/Serial", a, keysName(9)), func(b *testing.B) { benchmarkCalls(b, newStore(b), a, 9, false, false) })
	}
	for _, n := range []int{2, 9} {
		for _, a := range algorithms {
			b.Run(fmt.Sprintf("ReserveSettle/%s/%s/Serial", a, keysName(n)), func(b *testing.B) {
				store := newStore(b)
				if _, ok := store.(ports.Reserver); !ok {
					b.Skip("the store does not implement ports.Reserver")
				}
				benchmarkReserveSettle(b, store, a, n)
			})
		}
	}
}

// benchmarkReserveSettle measures one Reserve and its Settle (actual 0:
// every rate window refunded) per op, on a concurrency window of 100
// slots and n-1 rate windows of algorithm a, the scripted clock moving
// benchmarkStep per op.
func benchmarkReserveSettle(b *testing.B, store ports.Store, a domain.Algorithm, n int) {
	rs := store.(ports.Reserver)
	ns := newNamespace(b)
	limits := make([]domain.Limit, n)
	limits[0] = domain.Limit{Key: "conf:{" + ns + "}:bench:c", Window: domain.Window{Name: "c", Limit: 100, Period: time.Minute, Algorithm: domain.Concurrency}, Cost: 1}
	w := domain.Window{Name: "bench", Limit: 100, Period: time.Second, Algorithm: a}
	for i := 1; i < n; i++ {
		limits[i] = domain.Limit{Key: "conf:{" + ns + "}:bench:" + strconv.Itoa(i), Window: w, Cost: 1}
	}
	b.Cleanup(func() {
		for _, l := range limits {
			_ = store.Reset(context.Background(), l.Key)
		}
	})
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	var refused int64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(benchmarkStep)
		r, lease, err := rs.Reserve(ctx, now, limits, time.Minute)
		if err != nil {
			b.Fatalf("Reserve: %v", err)
		}
		if !r.Allowed {
			refused++
			continue
		}
		if _, err := rs.Settle(ctx, now, lease, limits, 0); err != nil {
			b.Fatalf("Settle: %v", err)
		}
	}
	b.StopTimer()
	if b.N > 0 {
		b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
	}
}

func keysName(n int) string {
	if n == 1 {
		return "1Key"
	}
	return strconv.Itoa(n) + "Keys"
}

// benchmarkStep is how far the scripted clock moves per call; with 100
// units per second per key, it keeps a serial run always admitted.
const benchmarkStep = 10 * time.Millisecond

func benchmarkCalls(b *testing.B, store ports.Store, a domain.Algorithm, n int, parallel, evaluate bool) {
	ns := newNamespace(b)
	w := domain.Window{Name: "bench", Limit: 100, Period: time.Second, Algorithm: a}
	limits := make([]domain.Limit, n)
	for i := range limits {
		limits[i] = domain.Limit{Key: "conf:{" + ns + "}:bench:" + strconv.Itoa(i), Window: w, Cost: 1}
	}
	b.Cleanup(func() {
		for _, l := range limits {
			_ = store.Reset(context.Background(), l.Key)
		}
	})
	call := store.Peek
	if evaluate {
		call = store.Evaluate
	}
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Second)
	var tick, refused atomic.Int64
	// once reports an error with Errorf, which unlike Fatalf may be called
	// from RunParallel's goroutines, and returns false to stop the loop.
	once := func() bool {
		now := t0.Add(time.Duration(tick.Add(1)) * benchmarkStep)
		r, err := call(ctx, now, limits)
		if err != nil {
			b.Errorf("%s: %v", b.Name(), err)
			return false
		}
		if !r.Allowed {
			refused.Add(1)
		}
		return true
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && once() {
			}
		})
	} else {
		for b.Loop() && once() {
		}
	}
	b.StopTimer()
	if calls := tick.Load(); calls > 0 {
		b.ReportMetric(float64(refused.Load())/float64(calls), "refused/op")
	}
}

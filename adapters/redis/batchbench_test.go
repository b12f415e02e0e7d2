package redis_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkBatchRedisTime measures what a batch saves (docs/adr/018):
// rounds of 64 requests of one shape, each round decided once by a store
// that batches (one call of lua.BatchV5) and once by one that sends each
// request alone (redis.Config.MaxBatch = 1), all 64 at once (rueidis
// pipelines them), taking turns on one
// dedicated server, every request on keys of its own client (1 000
// clients). It reports Redis' own time per decision (INFO commandstats)
// and this process' CPU per decision for both; nothing is asserted about
// time.
//
//	go test -run '^$' -bench BenchmarkBatchRedisTime -benchtime 200x ./adapters/redis/
func BenchmarkBatchRedisTime(b *testing.B) {
	log := func(limit int64, p time.Duration) domain.Window {
		return domain.Window{Limit: limit, Period: p, Algorithm: domain.SlidingLog}
	}
	gcra := domain.Window{Limit: 1000, Period: time.Second, Algorithm: domain.GCRA}
	shapes := []struct {
		name string
		req  func(j int) []domain.Limit
	}{
		{"envoy-2", func(j int) []domain.Limit {
			return []domain.Limit{
				{Key: fmt.Sprintf("{c%d}:tenant", j), Window: log(1000, time.Second), Cost: 1},
				{Key: fmt.Sprintf("{c%d}:user", j), Window: log(1000, time.Second), Cost: 1},
			}
		}},
		{"log-9-shared", func(j int) []domain.Limit {
			var ls []domain.Limit
			for k := range 4 {
				key := fmt.Sprintf("{c%d}:%d", j, k)
				ls = append(ls, domain.Limit{Key: key, Window: log(1000, time.Second), Cost: 1},
					domain.Limit{Key: key, Window: log(1000, 10*time.Second), Cost: 1})
			}
			return append(ls, domain.Limit{Key: fmt.Sprintf("{c%d}:g", j), Window: log(1000, 10*time.Second), Cost: 1})
		}},
		{"gcra-9", func(j int) []domain.Limit {
			var ls []domain.Limit
			for k := range 9 {
				ls = append(ls, domain.Limit{Key: fmt.Sprintf("{c%d}:%d", j, k), Window: gcra, Cost: 1})
			}
			return ls
		}},
	}
	srv := redistest.NewServer(b)
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			do(b, srv.Addr(), "FLUSHALL")
			cfg := redis.Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second}
			batched := newStore(b, cfg)
			cfg.MaxBatch = 1
			alone := newStore(b, cfg)
			addrs := []string{srv.Addr()}
			const per = 64
			var redisUs, cpu [2]time.Duration
			var decisions int64
			next := 0
			for b.Loop() {
				reqs := make([][]domain.Limit, per)
				for i := range reqs {
					reqs[i] = sh.req(next % 1000)
					next++
				}
				for k, st := range []*redis.Store{batched, alone} {
					s0, c0 := scriptStats(b, addrs), processCPU(b)
					errs := make([]error, per)
					if k == 0 {
						_, errs = st.EvaluateBatch(b.Context(), time.Now(), reqs)
					} else {
						// Alone, but all at once: rueidis pipelines the calls.
						var wg sync.WaitGroup
						for i := range reqs {
							wg.Go(func() { _, errs[i] = st.Evaluate(b.Context(), time.Now(), reqs[i]) })
						}
						wg.Wait()
					}
					c1, s1 := processCPU(b), scriptStats(b, addrs)
					for _, err := range errs {
						require.NoError(b, err)
					}
					redisUs[k] += time.Duration(s1.usec-s0.usec) * time.Microsecond
					cpu[k] += c1 - c0
				}
				decisions += per
			}
			for k, name := range []string{"batched", "alone"} {
				b.ReportMetric(float64(redisUs[k].Microseconds())/float64(decisions), name+"-redis-µs/decision")
				b.ReportMetric(float64(cpu[k].Microseconds())/float64(decisions), name+"-client-cpu-µs/decision")
			}
		})
	}
}

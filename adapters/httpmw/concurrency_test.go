package httpmw_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestThousandConcurrentRequestsOnRedis: 1 000 requests released together
// through the middleware, on a route limited to 5: exactly 5 pass, and
// the handler runs exactly 5 times.
func TestThousandConcurrentRequestsOnRedis(t *testing.T) {
	const requests, limit = 1000, 5
	// The point is atomicity, not latency: deadlines are generous, so that
	// a slow machine (the race detector, two cores) cannot turn store
	// calls into degraded decisions.
	store, err := redis.New(redis.Config{URL: redistest.StandaloneURL(t), Mode: redis.ModeStandalone, Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	cfg := testConfig(t)
	cfg.StoreTimeout = 10 * time.Second
	svc := newService(t, newLimiter(t, cfg, store, nil), httpmw.Config{})
	// Enough connections for real concurrency, few enough for any
	// machine's file limit.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 128, MaxIdleConnsPerHost: 128}}
	defer client.CloseIdleConnections()

	start := make(chan struct{})
	var wg sync.WaitGroup
	codes := make([]int, requests)
	errs := make([]error, requests)
	for i := range requests {
		wg.Go(func() {
			<-start
			resp, err := client.Get(svc.srv.URL + "/api/v1/five")
			if err != nil {
				errs[i] = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	close(start)
	wg.Wait()

	count := map[int]int{}
	for i := range requests {
		require.NoError(t, errs[i])
		count[codes[i]]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: limit, http.StatusTooManyRequests: requests - limit}, count)
	assert.Equal(t, int64(limit), svc.callsOf("GET /api/v1/five"))
}

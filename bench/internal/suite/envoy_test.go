package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// TestEnvoyContendersCount: each contender of the envoy shape answers a
// client's requests as its design says on a real Redis: sluice's two
// descriptors each count every admitted request (with allotments, the
// second request takes one, whose lease record is a key of its own:
// docs/adr/019), envoyproxy/ratelimit's fixed windows count each
// descriptor's hits, refused ones included.
func TestEnvoyContendersCount(t *testing.T) {
	env := newEnv(t, 2)
	env.Addr = redistest.Standalone(t)
	ctx := context.Background()
	reqs := envoyRequests(env.Population)
	for _, ct := range shape(t, "envoy").Contenders {
		t.Run(ct.Name, func(t *testing.T) {
			if _, err := redistest.Do(ctx, env.Addr, "FLUSHALL", "SYNC"); err != nil {
				t.Fatal(err)
			}
			worker, closeClient, err := ct.Open(ctx, env, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := closeClient(); err != nil {
					t.Error(err)
				}
			}()
			op := worker(0, 1)
			for i := range 3 {
				out, err := op(ctx)
				if err != nil || out != load.Allowed {
					t.Fatalf("request %d: %v, %v; want an admission", i, out, err)
				}
			}
			keys, err := redistest.Do(ctx, env.Addr, "KEYS", "*")
			if err != nil {
				t.Fatal(err)
			}
			var counts, leases int
			for _, k := range keys.([]any) {
				if strings.Contains(k.(string), ":lease:") {
					leases++
				} else {
					counts++
				}
			}
			wantLeases := 0
			if ct.Twin != nil {
				wantLeases = 1
			}
			if counts != 4 || leases != wantLeases {
				t.Errorf("keys %q: %d counts and %d lease records, want 2 clients × 2 descriptors and %d", keys, counts, leases, wantLeases)
			}
		})
	}
	t.Run("fixed window refuses past its limit", func(t *testing.T) {
		st, err := newStore(env)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		at := time.Unix(1_764_590_000, 0) // one instant: one fixed window
		fw := &fixedWindow{client: st.Client(), limit: 2, now: func() time.Time { return at }}
		req := reqs[0]
		req.Domain = "fixed_window_test"
		var codes []rlsv3.RateLimitResponse_Code
		var remaining []uint32
		for range 3 {
			resp, err := fw.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, resp.OverallCode)
			remaining = append(remaining, resp.Statuses[0].LimitRemaining)
		}
		ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
		if codes[0] != ok || codes[1] != ok || codes[2] != over || remaining[0] != 1 || remaining[1] != 0 || remaining[2] != 0 {
			t.Errorf("codes %v, remaining %v; want OK, OK, OVER_LIMIT and 1, 0, 0", codes, remaining)
		}
	})
}

// TestStrictRefusesDegraded: a decision that did not come from the shared
// store fails the call, so a measurement never counts it as an answer.
func TestStrictRefusesDegraded(t *testing.T) {
	env := newEnv(t, 1)
	st, err := local.New(local.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fallback, err := local.New(local.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer fallback.Close()
	l, err := app.New(app.Config{HMACSecret: Secret, StoreTimeout: callTimeout}, app.Deps{Store: st, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg, err := envoyConfig("sliding_log")
	if err != nil {
		t.Fatal(err)
	}
	op := rlsWorker(envoyrls.New(strict{l}, cfg), envoyRequests(env.Population))(0, 1)
	if out, err := op(context.Background()); err != nil || out != load.Allowed {
		t.Fatalf("healthy: %v, %v", out, err)
	}
	st.Close() // the primary store now fails every call
	if _, err := op(context.Background()); err == nil {
		t.Error("a degraded decision was taken for an answer")
	}
}

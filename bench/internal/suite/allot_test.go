package suite

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestHotAdmitShape: every contender of the hot-admit shape checks the
// one tenant-global key the Limiter builds, under the one window, and
// admits every request; the Limiter takes an allotment (docs/adr/019) and
// decides the rest in process, its twin decides each request at the
// store, and StoreCalls counts what each did.
func TestHotAdmitShape(t *testing.T) {
	env := newEnv(t, 3)
	env.Addr = redistest.Standalone(t)
	ctx := context.Background()
	sets, err := limiterLimits(benchConfig, globalRequest)(env)
	if err != nil {
		t.Fatal(err)
	}
	for i, set := range sets {
		if len(set) != 1 || set[0] != sets[0][0] || set[0].Window != globalWindow || set[0].Cost != 1 {
			t.Fatalf("client %d: limits %+v, want client 0's one tenant-global key under %+v", i, set, globalWindow)
		}
	}
	sh := shape(t, "hot-admit")
	if sh.Hot || sh.Keys != 1 || sh.Windows != 1 {
		t.Errorf("hot-admit: hot %t, %d keys, %d windows; want an admitted shape of 1 key and 1 window", sh.Hot, sh.Keys, sh.Windows)
	}
	const requests = 40
	for _, ct := range sh.Contenders {
		t.Run(ct.Name, func(t *testing.T) {
			if _, err := redistest.Do(ctx, env.Addr, "FLUSHALL", "SYNC"); err != nil {
				t.Fatal(err)
			}
			env.StoreCalls = &StoreCalls{}
			worker, closeClient, err := ct.Open(ctx, env, 1)
			if err != nil {
				t.Fatal(err)
			}
			op := worker(0, 1)
			for i := range requests {
				if out, err := op(ctx); err != nil || out != load.Allowed {
					t.Fatalf("request %d: %v, %v; want an admission", i, out, err)
				}
			}
			calls, micros := env.StoreCalls.Counts()
			if err := closeClient(); err != nil {
				t.Error(err)
			}
			keys, err := redistest.Do(ctx, env.Addr, "KEYS", "*")
			if err != nil {
				t.Fatal(err)
			}
			want := sets[0][0].Key
			if ct.Name == "redis_rate" {
				want = "rate:" + want // redis_rate's own prefix
			}
			if !slices.Contains(keys.([]any), any(want)) {
				t.Errorf("keys %q, want %q among them", keys, want)
			}
			switch ct.Name {
			case LimiterName:
				if calls["allot"] != 1 || calls["evaluate"] != 1 || len(calls) != 2 || micros["allot"] <= 0 {
					t.Errorf("store calls %v (%v µs), want one evaluate, then one allotment for the other %d requests", calls, micros, requests-1)
				}
			case LimiterName + NoAllotmentsSuffix:
				if calls["evaluate"] != requests || len(calls) != 1 {
					t.Errorf("store calls %v, want %d evaluate", calls, requests)
				}
			default:
				if calls != nil {
					t.Errorf("store calls %v counted for a contender with no Limiter", calls)
				}
			}
		})
	}
}

// TestWithTwins: every contender with a Twin gets it right after itself,
// once, where the shape does not measure it already.
func TestWithTwins(t *testing.T) {
	names := func(s Shape) []string {
		var out []string
		for _, ct := range s.Contenders {
			out = append(out, ct.Name)
		}
		return out
	}
	shapes := WithTwins(Shapes())
	for _, tc := range []struct {
		shape string
		want  []string
	}{
		{"log-2", []string{LimiterName, LimiterName + NoAllotmentsSuffix, "sluice store", "plain script", "redis_rate", FloorName}},
		{"envoy", []string{"sluice RLS", "sluice RLS" + NoAllotmentsSuffix, "sluice RLS, GCRA", "sluice RLS, GCRA" + NoAllotmentsSuffix, "fixed-window INCR"}},
		{"hot-admit", []string{LimiterName, LimiterName + NoAllotmentsSuffix, "sluice store", "redis_rate"}},
		{"gcra-1", []string{"sluice store", "redis_rate", FloorName}},
	} {
		var got []string
		for _, s := range shapes {
			if s.Name == tc.shape {
				got = names(s)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.shape, got, tc.want)
		}
	}
	if got := names(shape(t, "log-2")); slices.Contains(got, LimiterName+NoAllotmentsSuffix) {
		t.Errorf("Shapes' log-2 has its twin without WithTwins: %q", got)
	}
}

package suite

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// keyRecorder is a store that remembers the keys of the last Evaluate.
type keyRecorder struct {
	ports.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	k.mu.Lock()
	k.keys = k.keys[:0]
	for _, l := range limits {
		k.keys = append(k.keys, l.Key)
	}
	k.mu.Unlock()
	return k.Store.Evaluate(ctx, now, limits)
}

// TestBareStoreKeysAreTheLimiters checks that the bare stores are given
// the keys the Limiter builds for the same client and shape, so that the
// two contenders differ by the pipeline alone.
func TestBareStoreKeysAreTheLimiters(t *testing.T) {
	newLocal := func() *local.Store {
		s, err := local.New(local.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	rec := &keyRecorder{Store: newLocal()}
	l, err := app.New(limiterConfig(), app.Deps{Store: rec, Fallback: newLocal(), Recorder: recordertest.Discard{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pop, err := NewPopulation(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  decide
		keys func(*Identity) []string
	}{
		{"nine windows", nineRequest, func(id *Identity) []string { return id.Nine }},
		{"AllowDual", dualRequest, func(id *Identity) []string { return id.Dual }},
	} {
		for i := range pop.Clients {
			id := &pop.Clients[i]
			d, err := tc.req(context.Background(), l, id)
			if out, oerr := outcome(d); err != nil || oerr != nil || out != load.Allowed {
				t.Fatalf("%s, client %d: decision %s (%s), %v, %v", tc.name, i, d.State, d.Cause, err, oerr)
			}
			got, want := slices.Sorted(slices.Values(rec.keys)), slices.Sorted(slices.Values(tc.keys(id)))
			if !slices.Equal(got, want) {
				t.Errorf("%s, client %d: the Limiter used\n%q\nthe bare store is given\n%q", tc.name, i, got, want)
			}
		}
	}
}

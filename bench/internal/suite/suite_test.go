package suite

import (
	"context"
	"fmt"
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

// keyRecorder is a store that remembers the keys of the last Evaluate,
// each with the window it served (key|window|limit|period).
type keyRecorder struct {
	ports.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	k.mu.Lock()
	k.keys = k.keys[:0]
	for _, l := range limits {
		k.keys = append(k.keys, keyWindow(l))
	}
	k.mu.Unlock()
	return k.Store.Evaluate(ctx, now, limits)
}

func keyWindow(l domain.Limit) string {
	return fmt.Sprintf("%s|%s|%d|%s", l.Key, l.Window.Name, l.Window.Limit, l.Window.Period)
}

// TestBareStoreKeysAreTheLimiters checks that the bare stores are given
// the keys the Limiter builds for the same client and shape, so that the
// two contenders differ by the pipeline alone: for the nine windows, the
// shared layout of docs/adr/015, the app's default (9 windows on 5 keys,
// each key as many times as windows name it).
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
		// windows is the bare store's windows in keys' order.
		windows []domain.Window
	}{
		{"nine windows", nineRequest, func(id *Identity) []string { return id.NineShared }, NineWindows(burstLog, sustainedLog)},
		{"AllowDual", dualRequest, func(id *Identity) []string { return id.Dual }, []domain.Window{burstLog}},
	} {
		for i := range pop.Clients {
			id := &pop.Clients[i]
			d, err := tc.req(context.Background(), l, id)
			if out, oerr := outcome(d); err != nil || oerr != nil || out != load.Allowed {
				t.Fatalf("%s, client %d: decision %s (%s), %v, %v", tc.name, i, d.State, d.Cause, err, oerr)
			}
			var bare []string
			for _, l := range limits(tc.keys(id), tc.windows...) {
				bare = append(bare, keyWindow(l))
			}
			got, want := slices.Sorted(slices.Values(rec.keys)), slices.Sorted(slices.Values(bare))
			if !slices.Equal(got, want) {
				t.Errorf("%s, client %d: the Limiter used\n%q\nthe bare store is given\n%q", tc.name, i, got, want)
			}
		}
	}
}

package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// ctxStore is a store that reports the deadline of every call's context
// and, when waits is set, waits on its Done channel as a networked store
// does (its answer is already there, so it never blocks).
type ctxStore struct {
	ports.Store
	waits     bool
	types     []string
	deadlines []time.Duration
}

func (s *ctxStore) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	s.types = append(s.types, fmt.Sprintf("%T", ctx))
	dl, ok := ctx.Deadline()
	if !ok {
		return domain.Result{}, fmt.Errorf("no deadline")
	}
	s.deadlines = append(s.deadlines, time.Until(dl))
	if s.waits {
		select {
		case <-ctx.Done():
			return domain.Result{}, ctx.Err()
		default:
		}
	}
	if err := ctx.Err(); err != nil {
		return domain.Result{}, err
	}
	return s.Store.Evaluate(ctx, now, limits)
}

// TestStoreDeadlineEitherWay: every store call carries the one store
// deadline, whether the store only checks Err (the lazy context stays in
// use) or waits on Done (after its first call the Limiter hands it the
// standard context, which costs such a store less), and decisions are the
// same both ways.
func TestStoreDeadlineEitherWay(t *testing.T) {
	for _, waits := range []bool{false, true} {
		t.Run(fmt.Sprintf("waits=%t", waits), func(t *testing.T) {
			store := &ctxStore{Store: conformance.NewReferenceStore(), waits: waits}
			cfg := testConfig()
			cfg.StoreTimeout = 10 * time.Second
			l, err := app.New(cfg, app.Deps{Store: store, Fallback: newLocal(t), Recorder: recordertest.Discard{}})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			for i := range 3 {
				d, err := l.Evaluate(context.Background(), fullRequest(routeRead))
				require.NoError(t, err)
				require.Equal(t, domain.Allowed, d.State, "decision %d (%s)", i, d.Cause)
				require.Equal(t, domain.SourcePrimary, d.Source, "decision %d", i)
			}
			require.Len(t, store.types, 3)
			for i, left := range store.deadlines {
				assert.True(t, left > 0 && left <= 10*time.Second, "call %d: the store deadline is %s away", i, left)
			}
			assert.Equal(t, "*app.storeContext", store.types[0], "the first call is lazy")
			if waits {
				assert.NotEqual(t, "*app.storeContext", store.types[2], "a store that waits gets the standard context")
			} else {
				assert.Equal(t, "*app.storeContext", store.types[2], "a store that never waits keeps the lazy context")
			}
		})
	}
}

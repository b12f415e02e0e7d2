package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// TestStoreContextLikeWithDeadline runs one script of steps on a
// storeContext and on the context.WithDeadline it stands for, from the same
// parent and deadline, and requires the same answers at every step: the
// lazy timer changes when the timer starts, never what the context says.
func TestStoreContextLikeWithDeadline(t *testing.T) {
	const long, past = time.Hour, -time.Second
	type step int
	const (
		checkErr step = iota
		checkDone
		stop
		cancelParent
		derive // a child made with context.WithCancel must end with it
	)
	cases := []struct {
		name    string
		timeout time.Duration
		// parentDeadline, when set, bounds the parent before the call.
		parentDeadline time.Duration
		steps          []step
	}{
		{"live, never armed, stopped", long, 0, []step{checkErr, stop, checkErr, checkDone}},
		{"live, armed, stopped", long, 0, []step{checkDone, checkErr, stop, checkDone, checkErr}},
		{"deadline passed, never armed", past, 0, []step{checkErr, stop, checkErr, checkDone}},
		{"deadline passed, armed", past, 0, []step{checkDone, checkErr, stop, checkErr}},
		{"parent cancelled, never armed", long, 0, []step{cancelParent, checkErr, checkDone, stop, checkErr}},
		{"parent cancelled, armed", long, 0, []step{checkDone, cancelParent, checkDone, checkErr, stop, checkErr}},
		{"parent deadline earlier and passed", long, past, []step{checkErr, checkDone, stop, checkErr}},
		{"parent deadline earlier, live", long, time.Minute, []step{checkErr, checkDone, stop, checkErr}},
		{"child of a live context, stopped", long, 0, []step{derive, checkErr, stop, checkDone, checkErr}},
		{"child, parent cancelled", long, 0, []step{derive, cancelParent, checkDone, checkErr}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := context.WithValue(context.Background(), ctxKey{}, "v")
			if tc.parentDeadline != 0 {
				var cancel context.CancelFunc
				base, cancel = context.WithDeadline(base, time.Now().Add(tc.parentDeadline))
				defer cancel()
			}
			parent, cancelParentFn := context.WithCancel(base)
			defer cancelParentFn()

			sc := newStoreContext(parent, time.Now().Add(tc.timeout))
			ref, refCancel := context.WithDeadline(parent, sc.deadline)
			defer refCancel()
			var got, want context.Context = sc, ref
			var stops []func()
			defer func() {
				for _, f := range stops {
					f()
				}
			}()

			wantDL, _ := ref.Deadline()
			gotDL, ok := got.Deadline()
			require.True(t, ok)
			assert.Equal(t, wantDL, gotDL, "deadline")
			assert.Equal(t, "v", got.Value(ctxKey{}), "values pass through")

			for i, st := range tc.steps {
				switch st {
				case checkErr:
					assert.Equal(t, want.Err(), got.Err(), "step %d: Err", i)
				case checkDone:
					assert.Equal(t, isClosed(want.Done()), isClosed(got.Done()), "step %d: Done closed", i)
				case stop:
					sc.stop(time.Now())
					refCancel()
				case cancelParent:
					cancelParentFn()
				case derive:
					g, gc := context.WithCancel(got)
					w, wc := context.WithCancel(want)
					stops = append(stops, gc, wc)
					got, want = g, w
				}
			}
		})
	}
}

// isClosed reports whether ch is closed now, without waiting: a
// cancellation reaches a child context synchronously, and an armed context
// whose deadline has passed is born done.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestStoreContextUnarmedStartsNoTimer: a store that only asks Err (the
// local store) leaves the context unarmed, so no timer is started.
func TestStoreContextUnarmedStartsNoTimer(t *testing.T) {
	sc := newStoreContext(context.Background(), time.Now().Add(time.Hour))
	require.NoError(t, sc.Err())
	_, _ = sc.Deadline()
	assert.False(t, sc.armed.Load(), "Err and Deadline arm nothing")
	sc.stop(time.Now())
	assert.False(t, sc.armed.Load(), "stopping an unarmed context arms nothing")
	assert.ErrorIs(t, sc.Err(), context.Canceled)
	_ = sc.Done()
	assert.True(t, sc.armed.Load(), "Done arms")
}

// BenchmarkStoreContext compares a store call's context with the
// context.WithTimeout it replaces: unarmed (a store that checks Err, as
// the local store does) and armed (one that waits on Done, as rueidis
// does).
//
//	go test -run '^$' -bench StoreContext -benchmem ./app/
func BenchmarkStoreContext(b *testing.B) {
	parent := context.Background()
	b.Run("WithTimeout/Err", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithTimeout(parent, time.Second)
			_ = ctx.Err()
			cancel()
		}
	})
	b.Run("storeContext/Err", func(b *testing.B) {
		for b.Loop() {
			now := time.Now()
			ctx := newStoreContext(parent, now.Add(time.Second))
			_ = ctx.Err()
			ctx.stop(now)
		}
	})
	b.Run("WithTimeout/Done", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithTimeout(parent, time.Second)
			_ = ctx.Err()
			_ = ctx.Done()
			cancel()
		}
	})
	b.Run("storeContext/Done", func(b *testing.B) {
		for b.Loop() {
			now := time.Now()
			ctx := newStoreContext(parent, now.Add(time.Second))
			_ = ctx.Err()
			_ = ctx.Done()
			ctx.stop(now)
		}
	})
	// The store-time context a store that waits gets (storetime.go),
	// against the context.WithTimeout it replaced there; the lag meter
	// runs, as it does while calls are in flight.
	lag := newLagMeter(DefaultShedAfter)
	defer lag.close()
	lag.acquire()
	defer lag.release()
	cancelled, cancel := context.WithCancel(parent)
	defer cancel()
	b.Run("WithTimeout/Done/cancellable parent", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithTimeout(cancelled, time.Second)
			_ = ctx.Err()
			_ = ctx.Done()
			cancel()
		}
	})
	b.Run("storeTime/Done/cancellable parent", func(b *testing.B) {
		for b.Loop() {
			now := time.Now()
			ctx := newStoreTime(cancelled, lag, now, time.Second, now.Add(2*time.Second), false)
			_ = ctx.Err()
			_ = ctx.Done()
			ctx.stop()
		}
	})
}

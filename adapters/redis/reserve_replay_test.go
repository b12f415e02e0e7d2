package redis_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// TestReservationsMatchTheReference replays random timelines of
// reservations (rate and concurrency windows, random TTLs), settlements
// at random actual costs (refunds, charges past the limit, settled twice,
// after expiry), renewals, evaluations and peeks on Redis and on the
// conformance reference store, and requires the same answers to the
// microsecond: results, leases' instants and TTLs, settlements and
// renewals. One key changes algorithm, limit and period between a
// reservation and its settlement, so refunds meet states the other
// algorithm wrote (refunded in the algorithm they are stored in). The
// store's grace is the reference's. Standalone and cluster, logs compact
// and as ZSETs.
func TestReservationsMatchTheReference(t *testing.T) {
	windows := []domain.Window{
		sliding(5, 10*time.Second),
		sliding(redis.CompactLogMaxLimit+6, 10*time.Second),
		gcra(3, 10*time.Second+7*time.Microsecond),
		gcra(7, time.Minute),
	}
	morph := []domain.Window{sliding(10, 10*time.Second), gcra(10, 10*time.Second), sliding(5, 20*time.Second), gcra(4, 6*time.Second)}
	slots := concurrency(3, time.Minute)
	for _, topo := range topologies {
		for _, enc := range []redis.LogEncoding{redis.LogCompact, redis.LogZSet} {
			t.Run(topo.name+"/"+enc.String(), func(t *testing.T) {
				cfg := topo.cfg(t)
				cfg.Log, cfg.Grace, cfg.MinTTL = enc, conformance.ReferenceGrace, time.Minute
				s := newStore(t, cfg)
				for seq := range 6 {
					replayReservations(t, s, uint64(seq), windows, morph, slots)
				}
			})
		}
	}
}

// leasePair is one reservation as each store returned it, and its limits.
type leasePair struct {
	got, want domain.Lease
	limits    []domain.Limit
}

func replayReservations(t *testing.T, s *redis.Store, seq uint64, windows, morph []domain.Window, slots domain.Window) {
	rng := rand.New(rand.NewPCG(seq, 18))
	ref := conformance.NewReferenceStore().(ports.Reserver)
	refStore := ref.(ports.Store)
	tg := tag(t)
	keys := make([]string, len(windows)+2)
	for i := range keys {
		keys[i] = fmt.Sprintf("rr:{%s}:%d", tg, i)
	}
	concKey := len(windows) + 1
	var open []leasePair
	now := time.Now().Truncate(time.Second)
	for step := range 300 {
		switch p := rng.IntN(100); {
		case p < 8: // a little back, within the grace
			now = now.Add(-time.Duration(rng.Int64N(int64(2 * time.Second))).Truncate(time.Microsecond))
		case p < 30: // same instant
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))).Truncate(time.Microsecond))
		}
		idx := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
		limits := make([]domain.Limit, len(idx))
		held := false
		for j, k := range idx {
			var w domain.Window
			switch {
			case k < len(windows):
				w = windows[k]
			case k == concKey:
				w, held = slots, true
			default:
				w = morph[rng.IntN(len(morph))]
			}
			cost := int64(1)
			if rng.IntN(3) == 0 {
				cost = 1 + rng.Int64N(min(w.Limit, 3))
			}
			limits[j] = domain.Limit{Key: keys[k], Window: w, Cost: cost}
		}
		where := fmt.Sprintf("sequence %d step %d at %s", seq, step, now.Format(time.StampMicro))

		switch op := rng.IntN(20); {
		case op < 8:
			ttl := time.Duration(1+rng.IntN(20)) * time.Second
			want, wl, err := ref.Reserve(t.Context(), now, limits, ttl)
			require.NoError(t, err)
			got, gl, err := s.Reserve(t.Context(), now, limits, ttl)
			require.NoError(t, err, where)
			require.Equal(t, want, got, "%s: reserve %+v", where, limits)
			require.Equal(t, wl.At, gl.At, where)
			require.Equal(t, wl.TTL, gl.TTL, where)
			if got.Allowed {
				open = append(open, leasePair{got: gl, want: wl, limits: limits})
			}
		case op < 13 && len(open) > 0:
			i := rng.IntN(len(open))
			lp := open[i]
			settleLimits := lp.limits
			if rng.IntN(4) == 0 {
				// The morphing key's window changed since the reservation.
				settleLimits = append([]domain.Limit(nil), lp.limits...)
				for j := range settleLimits {
					if settleLimits[j].Key == keys[len(windows)] {
						w := morph[rng.IntN(len(morph))]
						settleLimits[j].Window, settleLimits[j].Cost = w, min(settleLimits[j].Cost, w.Limit)
					}
				}
			}
			actual := rng.Int64N(3 * 3)
			want, err := ref.Settle(t.Context(), now, lp.want, settleLimits, actual)
			require.NoError(t, err)
			got, err := s.Settle(t.Context(), now, lp.got, settleLimits, actual)
			require.NoError(t, err, where)
			require.Equal(t, want, got, "%s: settle %d of %+v", where, actual, settleLimits)
			if rng.IntN(3) > 0 {
				open = append(open[:i], open[i+1:]...)
			}
		case op < 15 && len(open) > 0:
			lp := open[rng.IntN(len(open))]
			ttl := time.Duration(1+rng.IntN(20)) * time.Second
			wl, werr := ref.Renew(t.Context(), now, lp.want, lp.limits, ttl)
			gl, gerr := s.Renew(t.Context(), now, lp.got, lp.limits, ttl)
			require.Equal(t, werr != nil, gerr != nil, "%s: renew: reference %v, redis %v", where, werr, gerr)
			if werr != nil {
				require.ErrorIs(t, gerr, domain.ErrLeaseEnded)
				continue
			}
			require.Equal(t, wl.TTL, gl.TTL, where)
			require.Equal(t, wl.At, gl.At, where)
		case op < 18 || held:
			want, err := refStore.Peek(t.Context(), now, limits)
			require.NoError(t, err)
			got, err := s.Peek(t.Context(), now, limits)
			require.NoError(t, err, where)
			require.Equal(t, want, got, "%s: peek %+v", where, limits)
		default:
			want, err := refStore.Evaluate(t.Context(), now, limits)
			require.NoError(t, err)
			got, err := s.Evaluate(t.Context(), now, limits)
			require.NoError(t, err, where)
			require.Equal(t, want, got, "%s: evaluate %+v", where, limits)
		}
	}
	for _, k := range keys {
		require.NoError(t, s.Reset(t.Context(), k))
	}
}

// TestRefundAfterTheKeyChangedAlgorithm: a key reserved under one
// algorithm and rewritten under the other before its Settle gives back
// what its stored state still holds, in the algorithm it is stored in
// (domain.KeyState.Refund), on Redis as on the reference store: a GCRA
// state moves its TAT back in the interval it was written with, a log
// loses units stamped at the lease's instant.
func TestRefundAfterTheKeyChangedAlgorithm(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	cases := []struct {
		name              string
		reserved, rewrote domain.Window
	}{
		{"GCRAThenLog", gcra(10, 10*time.Second), sliding(10, 10*time.Second)},
		{"LogThenGCRA", sliding(10, 10*time.Second), gcra(10, 10*time.Second)},
		{"GCRAThenGCRAOfAnotherInterval", gcra(10, 10*time.Second), gcra(4, 10*time.Second)},
		{"LogThenZSetLog", sliding(10, 10*time.Second), sliding(redis.CompactLogMaxLimit+10, 10*time.Second)},
	}
	for _, topo := range topologies {
		cfg := topo.cfg(t)
		cfg.Grace, cfg.MinTTL = conformance.ReferenceGrace, time.Minute
		s := newStore(t, cfg)
		for _, c := range cases {
			t.Run(topo.name+"/"+c.name, func(t *testing.T) {
				ref := conformance.NewReferenceStore()
				key := "chg:{" + tag(t) + "}:k"
				reserved := []domain.Limit{{Key: key, Window: c.reserved, Cost: 4}}
				rewrote := []domain.Limit{{Key: key, Window: c.rewrote, Cost: 1}}
				_, wl, err := ref.(ports.Reserver).Reserve(t.Context(), t0, reserved, time.Minute)
				require.NoError(t, err)
				_, gl, err := s.Reserve(t.Context(), t0, reserved, time.Minute)
				require.NoError(t, err)
				at := t0.Add(time.Second)
				want, err := ref.Evaluate(t.Context(), at, rewrote)
				require.NoError(t, err)
				got, err := s.Evaluate(t.Context(), at, rewrote)
				require.NoError(t, err)
				require.Equal(t, want, got, "the rewrite")
				at = at.Add(time.Second)
				ws, err := ref.(ports.Reserver).Settle(t.Context(), at, wl, reserved, 1)
				require.NoError(t, err)
				gs, err := s.Settle(t.Context(), at, gl, reserved, 1)
				require.NoError(t, err)
				require.Equal(t, ws, gs)
				for _, w := range []domain.Window{c.reserved, c.rewrote} {
					one := []domain.Limit{{Key: key, Window: w, Cost: 1}}
					want, err := ref.Peek(t.Context(), at, one)
					require.NoError(t, err)
					got, err := s.Peek(t.Context(), at, one)
					require.NoError(t, err)
					require.Equal(t, want, got, "after the refund, read under %s %d", w.Algorithm, w.Limit)
				}
			})
		}
	}
}

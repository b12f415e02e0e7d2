package redis_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

func concurrency(limit int64, ttl time.Duration) domain.Window {
	return domain.Window{Name: "c", Limit: limit, Period: ttl, Algorithm: domain.Concurrency}
}

// reserveStores returns a store per topology on the caller's clock, with
// a TTL floor that a loaded machine cannot outrun between two scripted
// steps (see TestConformance).
func reserveStores(t *testing.T) map[string]*redis.Store {
	stores := map[string]*redis.Store{}
	for _, topo := range topologies {
		cfg := topo.cfg(t)
		cfg.MinTTL = time.Minute
		stores[topo.name] = newStore(t, cfg)
	}
	return stores
}

// TestSettleRefundsAndCharges: Settle below the cost reserved refunds the
// difference (a later request sees it), above it charges past the limit,
// and a second Settle changes nothing; on a compact log, a ZSET log and
// GCRA, scripted instants.
func TestSettleRefundsAndCharges(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	cases := []struct {
		name   string
		window domain.Window
		cost   int64
		actual int64
		// remaining at t0+100ms after the settle; and the retry-after of
		// one more unit then (0: admitted)
		remaining int64
		retry     time.Duration
	}{
		{"log/refund", sliding(10, 10*time.Second), 4, 1, 9, 0},
		{"log/refund-all", sliding(10, 10*time.Second), 4, 0, 10, 0},
		{"log/exact", sliding(10, 10*time.Second), 4, 4, 6, 0},
		{"log/charge-past-the-limit", sliding(10, 10*time.Second), 2, 15, 0, 10 * time.Second},
		{"zset/refund", sliding(2000, 10*time.Second), 4, 1, 1999, 0},
		{"zset/charge", sliding(2000, 10*time.Second), 2, 15, 1985, 0},
		{"zset/charge-past-the-limit", sliding(2000, 10*time.Second), 2, 2500, 0, 10 * time.Second},
		// GCRA, T = 1 s: TAT t0+4s, back 3 T: t0+1s.
		{"gcra/refund", gcra(10, 10*time.Second), 4, 1, 9, 0},
		{"gcra/refund-all", gcra(10, 10*time.Second), 4, 0, 10, 0},
		// TAT t0+2s, then + 13 T: t0+15s; one more at t0+0.1s waits
		// 15 + 1 - 10 - 0.1 s.
		{"gcra/charge-past-the-limit", gcra(10, 10*time.Second), 2, 15, 0, 5900 * time.Millisecond},
	}
	for name, s := range reserveStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					limits := []domain.Limit{{Key: fmt.Sprintf("res:{%s}:w", tag(t)), Window: c.window, Cost: c.cost}}
					res, lease, err := s.Reserve(t.Context(), t0, limits, time.Minute)
					require.NoError(t, err)
					require.True(t, res.Allowed)
					assert.Equal(t, c.window.Limit-c.cost, res.Remaining)
					assert.Equal(t, t0, lease.At)
					assert.Equal(t, time.Minute, lease.TTL)
					require.True(t, lease.Valid(), "%+v", lease)

					at := t0.Add(100 * time.Millisecond)
					got, err := s.Settle(t.Context(), at, lease, limits, c.actual)
					require.NoError(t, err)
					require.Equal(t, domain.Settled, got)
					one := []domain.Limit{{Key: limits[0].Key, Window: c.window, Cost: 1}}
					check := func() {
						t.Helper()
						p, err := s.Peek(t.Context(), at, one)
						require.NoError(t, err)
						assert.Equal(t, c.remaining, p.Remaining, "remaining")
						assert.Equal(t, c.retry, p.RetryAfter, "retry-after")
					}
					check()
					again, err := s.Settle(t.Context(), at, lease, limits, c.actual)
					require.NoError(t, err)
					assert.Equal(t, domain.AlreadySettled, again)
					check()
				})
			}
		})
	}
}

// TestRefundNeverBelowZero: a refund takes back only the reservation's
// own units still inside the window: none once they left it (other units
// at the same instant stay, as a caller whose now lags still sees), and
// a GCRA state never moves before now.
func TestRefundNeverBelowZero(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	for name, s := range reserveStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, w := range []domain.Window{sliding(10, 10*time.Second), sliding(2000, 10*time.Second), gcra(10, 10*time.Second)} {
				t.Run(w.Algorithm.String()+fmt.Sprint(w.Limit), func(t *testing.T) {
					key := fmt.Sprintf("res:{%s}:w", tag(t))
					limits := []domain.Limit{{Key: key, Window: w, Cost: 4}}
					_, lease, err := s.Reserve(t.Context(), t0, limits, time.Minute)
					require.NoError(t, err)
					other, err := s.Evaluate(t.Context(), t0, []domain.Limit{{Key: key, Window: w, Cost: 3}})
					require.NoError(t, err)
					require.True(t, other.Allowed)
					// 11 s later the 4 units left the window: nothing
					// comes back, not even the 3 others.
					got, err := s.Settle(t.Context(), t0.Add(11*time.Second), lease, limits, 0)
					require.NoError(t, err)
					require.Equal(t, domain.Settled, got)
					p, err := s.Peek(t.Context(), t0.Add(11*time.Second), []domain.Limit{{Key: key, Window: w, Cost: 1}})
					require.NoError(t, err)
					assert.Equal(t, w.Limit, p.Remaining)
					if w.Algorithm == domain.SlidingLog {
						// A caller whose now lags (t0+5s) still sees
						// all seven: the refund removed none.
						p, err = s.Peek(t.Context(), t0.Add(5*time.Second), []domain.Limit{{Key: key, Window: w, Cost: 1}})
						require.NoError(t, err)
						assert.Equal(t, w.Limit-7, p.Remaining, "units that left the window stay counted where they count")
					}
				})
			}
		})
	}
}

// TestLeaseExpiry: a lease not settled within its TTL counts at its cost
// reserved, its concurrency slots come back, Settle then answers Expired
// and changes nothing, and Renew refuses it.
func TestLeaseExpiry(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	for name, s := range reserveStores(t) {
		t.Run(name, func(t *testing.T) {
			tg := tag(t)
			limits := []domain.Limit{
				{Key: "res:{" + tg + "}:rate", Window: sliding(10, 10*time.Second), Cost: 3},
				{Key: "res:{" + tg + "}:conc", Window: concurrency(1, time.Second), Cost: 1},
			}
			res, lease, err := s.Reserve(t.Context(), t0, limits, time.Second)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			at := t0.Add(1500 * time.Millisecond)
			p, err := s.Peek(t.Context(), at, limits)
			require.NoError(t, err)
			assert.Equal(t, int64(7), p.Status(0).Remaining, "the cost reserved stays counted")
			assert.Equal(t, int64(1), p.Status(1).Remaining, "the slot is back")
			got, err := s.Settle(t.Context(), at, lease, limits, 0)
			require.NoError(t, err)
			assert.Equal(t, domain.Expired, got)
			p2, err := s.Peek(t.Context(), at, limits)
			require.NoError(t, err)
			assert.Equal(t, p, p2, "an expired Settle changes nothing")
			_, err = s.Renew(t.Context(), at, lease, limits, time.Second)
			assert.ErrorIs(t, err, domain.ErrLeaseEnded)
			assert.Equal(t, domain.CodeLeaseEnded, domain.CodeOf(err))
			// An ID never reserved is as good as expired.
			unknown := domain.Lease{ID: "0123456789abcdef0123456789abcdef", At: t0, TTL: time.Second}
			got, err = s.Settle(t.Context(), at, unknown, limits, 0)
			require.NoError(t, err)
			assert.Equal(t, domain.Expired, got)
		})
	}
}

// TestConcurrencyWindow: at most Limit slots held; a refusal's
// RetryAfter is the wait until the earliest held lease expires and its
// ResetAfter until the last does; Settle gives a slot back, Renew keeps
// it past the first expiry, and a lease ended is not renewed.
func TestConcurrencyWindow(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	s := time.Second
	for name, st := range reserveStores(t) {
		t.Run(name, func(t *testing.T) {
			limits := []domain.Limit{{Key: "res:{" + tag(t) + "}:conc", Window: concurrency(2, 30*s), Cost: 1}}
			reserve := func(at time.Duration) (domain.Result, domain.Lease) {
				t.Helper()
				r, l, err := st.Reserve(t.Context(), t0.Add(at), limits, 30*s)
				require.NoError(t, err)
				return r, l
			}
			peek := func(at time.Duration) domain.Result {
				t.Helper()
				r, err := st.Peek(t.Context(), t0.Add(at), limits)
				require.NoError(t, err)
				return r
			}
			figures := func(r domain.Result) [4]any {
				return [4]any{r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter}
			}
			ra, a := reserve(0)
			assert.Equal(t, [4]any{true, int64(1), time.Duration(0), 30 * s}, figures(ra))
			rb, b := reserve(s)
			assert.Equal(t, [4]any{true, int64(0), time.Duration(0), 30 * s}, figures(rb))
			rc, c := reserve(2 * s)
			assert.Equal(t, [4]any{false, int64(0), 28 * s, 29 * s}, figures(rc))
			assert.Equal(t, domain.Lease{}, c)
			assert.Equal(t, figures(rc), figures(peek(2*s)), "Peek reads as Reserve decides")
			assert.Equal(t, figures(rc), figures(peek(2*s)), "Peek takes nothing")

			got, err := st.Settle(t.Context(), t0.Add(3*s), a, limits, 1)
			require.NoError(t, err)
			require.Equal(t, domain.Settled, got)
			assert.Equal(t, int64(1), peek(3*s).Remaining)
			rc, c = reserve(3 * s)
			require.True(t, rc.Allowed)

			// b expires at 31 s, c at 33 s; c renewed at 32 s holds to 62 s.
			assert.Equal(t, int64(1), peek(31500*time.Millisecond).Remaining)
			c2, err := st.Renew(t.Context(), t0.Add(32*s), c, limits, 30*s)
			require.NoError(t, err)
			assert.Equal(t, domain.Lease{ID: c.ID, At: c.At, TTL: 30 * s}, c2)
			p := peek(40 * s)
			assert.Equal(t, [4]any{true, int64(1), time.Duration(0), 22 * s}, figures(p))
			got, err = st.Settle(t.Context(), t0.Add(40*s), b, limits, 1)
			require.NoError(t, err)
			assert.Equal(t, domain.Expired, got)
			_, err = st.Renew(t.Context(), t0.Add(40*s), b, limits, 30*s)
			assert.ErrorIs(t, err, domain.ErrLeaseEnded)
			got, err = st.Settle(t.Context(), t0.Add(41*s), c2, limits, 1)
			require.NoError(t, err)
			assert.Equal(t, domain.Settled, got)
			assert.Equal(t, int64(2), peek(41*s).Remaining)
			_, err = st.Renew(t.Context(), t0.Add(41*s), c2, limits, 30*s)
			assert.ErrorIs(t, err, domain.ErrLeaseEnded, "a settled lease is not renewed")
		})
	}
}

// TestReserveIsAllOrNothing: a concurrency window and rate windows in one
// reservation; a refusal by either takes nothing from the other.
func TestReserveIsAllOrNothing(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	for name, s := range reserveStores(t) {
		t.Run(name, func(t *testing.T) {
			tg := tag(t)
			conc := domain.Limit{Key: "res:{" + tg + "}:conc", Window: concurrency(1, time.Minute), Cost: 1}
			rate := domain.Limit{Key: "res:{" + tg + "}:rate", Window: sliding(3, time.Minute), Cost: 1}
			g := domain.Limit{Key: "res:{" + tg + "}:gcra", Window: gcra(3, time.Minute), Cost: 1}
			limits := []domain.Limit{rate, conc, g}
			r, lease, err := s.Reserve(t.Context(), t0, limits, time.Minute)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			// The slot is taken: refused by the concurrency window.
			r, _, err = s.Reserve(t.Context(), t0, limits, time.Minute)
			require.NoError(t, err)
			require.False(t, r.Allowed)
			assert.Equal(t, 1, r.Limiting)
			p, err := s.Peek(t.Context(), t0, limits)
			require.NoError(t, err)
			assert.Equal(t, int64(2), p.Status(0).Remaining, "the refusal consumed nothing")
			assert.Equal(t, int64(2), p.Status(2).Remaining, "the refusal consumed nothing")
			_, err = s.Settle(t.Context(), t0, lease, limits, 1)
			require.NoError(t, err)
			// Fill the rate window: refused by it, no slot taken.
			_, err = s.Evaluate(t.Context(), t0, []domain.Limit{{Key: rate.Key, Window: rate.Window, Cost: 2}})
			require.NoError(t, err)
			r, _, err = s.Reserve(t.Context(), t0, limits, time.Minute)
			require.NoError(t, err)
			require.False(t, r.Allowed)
			assert.Equal(t, 0, r.Limiting)
			p, err = s.Peek(t.Context(), t0, []domain.Limit{conc})
			require.NoError(t, err)
			assert.Equal(t, int64(1), p.Remaining, "the refusal took no slot")
		})
	}
}

// TestReservationValidation: what no store takes is a *domain.LimitError,
// before anything is sent; Evaluate refuses a concurrency window.
func TestReservationValidation(t *testing.T) {
	s := newStore(t, topologies[0].cfg(t))
	now := time.Now()
	conc := []domain.Limit{{Key: "res:{v}:c", Window: concurrency(2, time.Minute), Cost: 1}}
	good := domain.Lease{ID: "0123456789abcdef0123456789abcdef", At: now, TTL: time.Minute}
	isLimitError := func(t *testing.T, err error, field string) {
		t.Helper()
		var le *domain.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, field, le.Field)
	}
	_, err := s.Evaluate(t.Context(), now, conc)
	isLimitError(t, err, "algorithm")
	_, err = s.EvaluateRepeated(t.Context(), now, conc, 2)
	isLimitError(t, err, "algorithm")
	for _, ttl := range []time.Duration{0, time.Microsecond, domain.MaxLeaseTTL + time.Second, time.Second + time.Nanosecond} {
		_, _, err = s.Reserve(t.Context(), now, conc, ttl)
		isLimitError(t, err, "ttl")
		_, err = s.Renew(t.Context(), now, good, conc, ttl)
		isLimitError(t, err, "ttl")
	}
	for _, actual := range []int64{-1, domain.MaxLimit + 1} {
		_, err = s.Settle(t.Context(), now, good, conc, actual)
		isLimitError(t, err, "actual")
	}
	for _, bad := range []domain.Lease{{}, {ID: "short", TTL: time.Minute}, {ID: "0123456789ABCDEF0123456789ABCDEF", TTL: time.Minute}, {ID: good.ID}} {
		_, err = s.Settle(t.Context(), now, bad, conc, 1)
		isLimitError(t, err, "lease")
		_, err = s.Renew(t.Context(), now, bad, conc, time.Minute)
		isLimitError(t, err, "lease")
	}
	_, _, err = s.Reserve(t.Context(), now, []domain.Limit{{Key: "x}y", Window: concurrency(2, time.Minute), Cost: 1}}, time.Minute)
	isLimitError(t, err, "key")
	// Keys of two slots: refused on a cluster only (a standalone server
	// takes them, TestCrossSlotIsRefusedBeforeSending).
	_, _, err = newStore(t, topologies[1].cfg(t)).Reserve(t.Context(), now, []domain.Limit{conc[0], {Key: "res:{other}:c", Window: sliding(2, time.Minute), Cost: 1}}, time.Minute)
	assert.ErrorIs(t, err, domain.ErrCrossSlot)
}

// TestLeaseOnServerTime: under ServerTime a lease's At is the server's
// instant, which refunds then find.
func TestLeaseOnServerTime(t *testing.T) {
	cfg := topologies[0].cfg(t)
	cfg.Time = redis.ServerTime
	s := newStore(t, cfg)
	limits := []domain.Limit{{Key: "res:{" + tag(t) + "}:w", Window: sliding(10, time.Minute), Cost: 5}}
	before := time.Now()
	r, lease, err := s.Reserve(t.Context(), time.Unix(0, 0), limits, time.Minute)
	after := time.Now()
	require.NoError(t, err)
	require.True(t, r.Allowed)
	// The machine's clock and the server's are one here; a second of
	// slack only for a loaded machine.
	assert.WithinRange(t, lease.At, before.Add(-time.Second), after.Add(time.Second))
	got, err := s.Settle(t.Context(), time.Unix(0, 0), lease, limits, 1)
	require.NoError(t, err)
	require.Equal(t, domain.Settled, got)
	p, err := s.Peek(t.Context(), time.Time{}, []domain.Limit{{Key: limits[0].Key, Window: limits[0].Window, Cost: 1}})
	require.NoError(t, err)
	assert.Equal(t, int64(9), p.Remaining, "the refund found the units stamped at the server's instant")
}

// TestReserveAheadOnServerTime: under ServerTime the script adds ahead
// to the server's instant (docs/adr/019): the lease's At is TIME + ahead,
// the units recorded then, and a refund at the allotment's end finds
// them there.
func TestReserveAheadOnServerTime(t *testing.T) {
	cfg := topologies[0].cfg(t)
	cfg.Time = redis.ServerTime
	s := newStore(t, cfg)
	const ahead = 5 * time.Second
	w := sliding(10, time.Minute)
	aw, ok := domain.AllotWindow(w, ahead)
	require.True(t, ok)
	key := "res:{" + tag(t) + "}:w"
	before := time.Now()
	r, lease, err := s.ReserveAhead(t.Context(), time.Unix(0, 0), ahead, []domain.Limit{{Key: key, Window: aw, Cost: 6}}, time.Minute)
	after := time.Now()
	require.NoError(t, err)
	require.True(t, r.Allowed)
	// The machine's clock and the server's are one here; a second of
	// slack only for a loaded machine.
	assert.WithinRange(t, lease.At, before.Add(ahead-time.Second), after.Add(ahead+time.Second))
	got, err := s.Settle(t.Context(), time.Unix(0, 0), lease, []domain.Limit{{Key: key, Window: aw, Cost: 6}}, 2)
	require.NoError(t, err)
	require.Equal(t, domain.Settled, got)
	p, err := s.Peek(t.Context(), time.Time{}, []domain.Limit{{Key: key, Window: w, Cost: 1}})
	require.NoError(t, err)
	assert.Equal(t, int64(8), p.Remaining, "2 spent stay counted, 4 came back")
	_, _, err = s.ReserveAhead(t.Context(), time.Unix(0, 0), domain.MaxAllotmentHold+time.Microsecond, []domain.Limit{{Key: key, Window: aw, Cost: 1}}, time.Minute)
	var le *domain.LimitError
	assert.ErrorAs(t, err, &le, "ahead past MaxAllotmentHold")
}

// TestPartition: a cluster store names the key's slot; a standalone one
// has one partition.
func TestPartition(t *testing.T) {
	stores := reserveStores(t)
	var _ ports.Partitioned = stores["cluster"]
	for _, key := range []string{"rl:{tenant}:ip:1", "x", "rl:{other}"} {
		p, ok := stores["cluster"].Partition(key)
		assert.True(t, ok)
		assert.Equal(t, int(redis.Slot(key)), p)
		p, ok = stores["standalone"].Partition(key)
		assert.False(t, ok)
		assert.Zero(t, p)
	}
}

// TestReservationKeysAndTTLs, on a dedicated server: a reservation writes
// its keys and one lease record in their slot, nothing else (a refused
// one and a Peek nothing at all); the concurrency key lives until its
// latest expiry plus the grace, the record for its TTL plus the margin;
// Settle keeps the record's TTL; Renew extends both.
func TestReservationKeysAndTTLs(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{Grace: 2 * time.Second})
	now := time.Now()
	limits := []domain.Limit{
		{Key: "res:{k}:conc", Window: concurrency(1, 30*time.Second), Cost: 1},
		{Key: "res:{k}:rate", Window: sliding(5, time.Minute), Cost: 1},
	}
	_, err := s.Peek(t.Context(), now, limits)
	require.NoError(t, err)
	r, lease, err := s.Reserve(t.Context(), now, limits, 30*time.Second)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, _, err = s.Reserve(t.Context(), now, limits, 30*time.Second)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	record := "res:{k}:conc:lease:" + lease.ID
	keys := do(t, srv.Addr(), "KEYS", "*").([]any)
	var got []string
	for _, k := range keys {
		got = append(got, k.(string))
	}
	slices.Sort(got)
	require.Equal(t, []string{"res:{k}:conc", record, "res:{k}:rate"}, got)
	assert.Equal(t, redis.Slot("res:{k}:conc"), redis.Slot(record))

	pttl := func(k string) int64 { return do(t, srv.Addr(), "PTTL", k).(int64) }
	assert.InDelta(t, 32_000, pttl("res:{k}:conc"), 1000, "latest expiry plus the grace")
	assert.InDelta(t, 60_000, pttl(record), 1000, "TTL plus min(TTL, 1 min)")
	members := do(t, srv.Addr(), "ZRANGE", "res:{k}:conc", "0", "-1", "WITHSCORES").([]any)
	require.Equal(t, []any{lease.ID + ":1", strconv.FormatInt(lease.At.UnixMicro()+30_000_000, 10)}, members)

	_, err = s.Renew(t.Context(), now.Add(10*time.Second), lease, limits, 50*time.Second)
	require.NoError(t, err)
	assert.InDelta(t, 52_000, pttl("res:{k}:conc"), 1000, "renewed: 50 s from the renewal, plus the grace")
	assert.InDelta(t, 100_000, pttl(record), 1000, "renewed: 50 s plus the margin")

	before := pttl(record)
	got2, err := s.Settle(t.Context(), now.Add(11*time.Second), lease, limits, 1)
	require.NoError(t, err)
	require.Equal(t, domain.Settled, got2)
	assert.InDelta(t, before, pttl(record), 1000, "Settle keeps the record's TTL")
	assert.Equal(t, int64(0), do(t, srv.Addr(), "ZCARD", "res:{k}:conc"), "the slot is back")
}

// TestReservationForeignValues: a concurrency key holding a string or a
// LIST, and a lease record sluice did not write, fail that call with a
// *domain.StoreValueError naming the key, and nothing is written.
func TestReservationForeignValues(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{})
	now := time.Now()
	conc := domain.Limit{Key: "fv:{f}:conc", Window: concurrency(2, time.Minute), Cost: 1}
	rate := domain.Limit{Key: "fv:{f}:rate", Window: sliding(5, time.Minute), Cost: 1}
	for _, set := range [][]string{{"SET", conc.Key, "x"}, {"RPUSH", conc.Key, "x"}, {"ZADD", conc.Key, "inf", "m"}} {
		t.Run(set[0], func(t *testing.T) {
			do(t, srv.Addr(), "DEL", conc.Key, rate.Key)
			do(t, srv.Addr(), set...)
			for name, call := range map[string]func() error{
				"reserve": func() error {
					_, _, err := s.Reserve(t.Context(), now, []domain.Limit{rate, conc}, time.Minute)
					return err
				},
				"peek": func() error { _, err := s.Peek(t.Context(), now, []domain.Limit{rate, conc}); return err },
			} {
				err := call()
				var ve *domain.StoreValueError
				require.ErrorAs(t, err, &ve, name)
				assert.Equal(t, 1, ve.Index, name)
				assert.Equal(t, conc.Key, ve.Key, name)
				assert.Equal(t, int64(0), do(t, srv.Addr(), "EXISTS", rate.Key), "%s wrote the rate key", name)
			}
		})
	}
	t.Run("LeaseRecord", func(t *testing.T) {
		do(t, srv.Addr(), "DEL", conc.Key, rate.Key)
		limits := []domain.Limit{rate, conc}
		_, lease, err := s.Reserve(t.Context(), now, limits, time.Minute)
		require.NoError(t, err)
		record := rate.Key + ":lease:" + lease.ID
		do(t, srv.Addr(), "SET", record, "not a record")
		_, err = s.Settle(t.Context(), now, lease, limits, 0)
		var ve *domain.StoreValueError
		require.ErrorAs(t, err, &ve)
		assert.Equal(t, -1, ve.Index)
		assert.Equal(t, record, ve.Key)
		p, err := s.Peek(t.Context(), now, limits)
		require.NoError(t, err)
		assert.Equal(t, int64(4), p.Status(0).Remaining, "nothing refunded")
		assert.Equal(t, int64(1), p.Status(1).Remaining, "the slot still held")
	})
}

// TestReservationsUnderTheRunbooksACL: under the least-privilege ACL user
// the runbook gives ("~rl:*"), a reservation's lease record lies among
// the keys the user may touch: it extends the request's first key, so
// Reserve, Renew and Settle work wherever Evaluate does.
func TestReservationsUnderTheRunbooksACL(t *testing.T) {
	srv := redistest.NewServerWith(t, redistest.Config{Users: []redistest.User{{Name: "sluice", Password: "Acl-Lease-5e2d",
		Rules: []string{"~rl:*", "+@all", "-@dangerous", "+info"}}}})
	s := newStore(t, redis.Config{URL: srv.URLWith("sluice", "Acl-Lease-5e2d"), Timeout: testTimeout, Time: redis.CallerTime})
	now := time.Now()
	limits := []domain.Limit{
		{Key: "rl:{t}:user:u:r:w", Window: sliding(5, time.Minute), Cost: 2},
		{Key: "rl:{t}:user:u:r:c", Window: concurrency(1, time.Minute), Cost: 1},
	}
	r, lease, err := s.Reserve(t.Context(), now, limits, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	_, err = s.Renew(t.Context(), now, lease, limits, time.Minute)
	require.NoError(t, err)
	got, err := s.Settle(t.Context(), now, lease, limits, 1)
	require.NoError(t, err)
	assert.Equal(t, domain.Settled, got)
	p, err := s.Peek(t.Context(), now, limits)
	require.NoError(t, err)
	assert.Equal(t, int64(4), p.Status(0).Remaining)
	assert.Equal(t, int64(1), p.Status(1).Remaining)
}

package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestEncodingChanges: a key found in another encoding than its window
// wants is counted for what it holds, never as empty, and rewritten in the
// wanted encoding on the next admitted request, whether the change comes
// from a limit crossing CompactLogMaxLimit, an algorithm change, or a
// store that keeps every log a ZSET (Config.Log = LogZSet).
func TestEncodingChanges(t *testing.T) {
	addr := redistest.Standalone(t)
	cfg := topologies[0].cfg(t)
	s := newStore(t, cfg)
	cfg.Log = redis.LogZSet
	zs := newStore(t, cfg)
	now := time.Now().Truncate(time.Second)
	key := func(t *testing.T) string {
		k := "enc:{" + tag(t) + "}"
		t.Cleanup(func() { _ = s.Reset(context.Background(), k) })
		return k
	}
	eval := func(t *testing.T, st *redis.Store, at time.Time, k string, w domain.Window, cost int64) domain.Result {
		t.Helper()
		r, err := st.Evaluate(t.Context(), at, []domain.Limit{{Key: k, Window: w, Cost: cost}})
		require.NoError(t, err)
		return r
	}
	peek := func(t *testing.T, st *redis.Store, at time.Time, k string, w domain.Window) domain.Result {
		t.Helper()
		r, err := st.Peek(t.Context(), at, []domain.Limit{{Key: k, Window: w, Cost: 1}})
		require.NoError(t, err)
		return r
	}
	typeOf := func(k string) string { return do(t, addr, "TYPE", k).(string) }

	t.Run("CompactLogUnderLogZSet", func(t *testing.T) {
		k, w := key(t), sliding(4, time.Minute)
		require.True(t, eval(t, s, now, k, w, 2).Allowed)
		require.Equal(t, "string", typeOf(k))
		require.True(t, eval(t, zs, now, k, w, 1).Allowed, "LogZSet reads the compact log")
		require.Equal(t, "zset", typeOf(k), "and rewrites it as a ZSET")
		assert.Equal(t, int64(3), do(t, addr, "ZCARD", k))
		assert.True(t, eval(t, s, now, k, w, 1).Allowed, "the compact store sees 3 of 4")
		assert.False(t, eval(t, zs, now, k, w, 1).Allowed, "and then 4 of 4")
	})
	t.Run("LimitRaisedPastTheBound", func(t *testing.T) {
		k := key(t)
		small, large := sliding(redis.CompactLogMaxLimit, time.Minute), sliding(2*redis.CompactLogMaxLimit, time.Minute)
		require.True(t, eval(t, s, now, k, small, 600).Allowed)
		require.Equal(t, "string", typeOf(k))
		assert.Equal(t, large.Limit-600, peek(t, s, now, k, large).Remaining)
		require.True(t, eval(t, s, now.Add(time.Second), k, large, large.Limit-600).Allowed)
		require.Equal(t, "zset", typeOf(k))
		assert.Equal(t, large.Limit, do(t, addr, "ZCARD", k))
		assert.False(t, eval(t, s, now.Add(2*time.Second), k, large, 1).Allowed)
	})
	// zsetLog makes k a ZSET log of units at at, as a log that once held
	// more than the compact bound stays (a ZSET stays a ZSET).
	zsetLog := func(k string, units int, at time.Time) {
		args := []string{"ZADD", k}
		for i := range units {
			args = append(args, strconv.FormatInt(at.UnixMicro(), 10), "seed:"+strconv.Itoa(i))
		}
		do(t, addr, args...)
		do(t, addr, "PEXPIRE", k, "120000")
	}
	t.Run("LimitLoweredUnderTheBound", func(t *testing.T) {
		k := key(t)
		large, small := sliding(2*redis.CompactLogMaxLimit, time.Minute), sliding(redis.CompactLogMaxLimit, time.Minute)
		zsetLog(k, 900, now)
		assert.Equal(t, large.Limit-900, peek(t, s, now, k, large).Remaining)
		assert.Equal(t, small.Limit-900, peek(t, s, now, k, small).Remaining)
		assert.False(t, eval(t, s, now, k, small, small.Limit-899).Allowed)
		require.True(t, eval(t, s, now.Add(time.Second), k, small, small.Limit-900).Allowed)
		require.Equal(t, "string", typeOf(k))
		assert.Len(t, compactUnits(t, do(t, addr, "GET", k).(string)), int(small.Limit))
		assert.False(t, eval(t, s, now.Add(2*time.Second), k, small, 1).Allowed)
	})
	t.Run("GCRAKeyUnderASlidingLog", func(t *testing.T) {
		// S3: the units a GCRA state holds (ceil((TAT - now) / T_w)),
		// stamped at the instant of the change; v2 counted the log full
		// until the TAT, which let 11 through a limit of 10 after one unit.
		k := key(t)
		require.True(t, eval(t, s, now, k, gcra(2, time.Minute), 1).Allowed) // TAT = now + 30 s
		w := sliding(10, time.Minute)
		r := peek(t, s, now.Add(10*time.Second), k, w)
		assert.True(t, r.Allowed)
		assert.Equal(t, int64(9), r.Remaining, "one unit outstanding")
		require.True(t, eval(t, s, now.Add(10*time.Second), k, w, 9).Allowed)
		assert.False(t, eval(t, s, now.Add(11*time.Second), k, w, 1).Allowed, "10 of 10")
		assert.Len(t, compactUnits(t, do(t, addr, "GET", k).(string)), 10)
		r = peek(t, s, now.Add(70*time.Second-time.Microsecond), k, w)
		assert.False(t, r.Allowed, "the units stamped at the change leave a period later")
		assert.True(t, peek(t, s, now.Add(70*time.Second), k, w).Allowed)
	})
	t.Run("GCRAKeyUnderALargeLog", func(t *testing.T) {
		// A key found missing by MGET under a window above the compact
		// bound is read as a ZSET log; a GCRA string there is read as the
		// units it holds (S3), and a log of more units than the bound is
		// written as a ZSET.
		k := key(t)
		require.True(t, eval(t, s, now, k, gcra(2, time.Minute), 1).Allowed) // TAT = now + 30 s
		w := sliding(2*redis.CompactLogMaxLimit, time.Minute)
		r := peek(t, s, now.Add(10*time.Second), k, w)
		assert.Equal(t, w.Limit-1, r.Remaining, "one unit outstanding")
		require.True(t, eval(t, s, now.Add(10*time.Second), k, w, w.Limit-2).Allowed)
		require.Equal(t, "zset", typeOf(k))
		assert.Equal(t, w.Limit-1, do(t, addr, "ZCARD", k))
		assert.False(t, eval(t, s, now.Add(10*time.Second), k, w, 2).Allowed)
		assert.True(t, eval(t, s, now.Add(10*time.Second), k, w, 1).Allowed)
	})
	t.Run("ALargeLogIsTrimmedAFewTimesAPeriod", func(t *testing.T) {
		// The forgotten units of a ZSET log are trimmed by the first write
		// in each eighth of the period, not by every write: after three
		// periods of one unit every 10 ms, the key holds the period's 100
		// units and at most an eighth of a period's (13) more.
		cfg := topologies[0].cfg(t)
		cfg.Grace = -1
		ng := newStore(t, cfg)
		k := key(t)
		w := sliding(2*redis.CompactLogMaxLimit, time.Second)
		zsetLog(k, 1, now.Add(-time.Hour)) // a ZSET log, long forgotten
		at := now
		for range 300 {
			require.True(t, eval(t, ng, at, k, w, 1).Allowed)
			at = at.Add(10 * time.Millisecond)
		}
		at = at.Add(-10 * time.Millisecond)
		assert.Equal(t, w.Limit-100, peek(t, ng, at, k, w).Remaining)
		n := do(t, addr, "ZCARD", k).(int64)
		assert.GreaterOrEqual(t, n, int64(100))
		assert.LessOrEqual(t, n, int64(113))
	})
	t.Run("SlidingLogUnderGCRA", func(t *testing.T) {
		for _, st := range []*redis.Store{s, zs} { // compact and ZSET logs
			k := key(t)
			require.True(t, eval(t, st, now, k, sliding(4, time.Minute), 3).Allowed)
			w := gcra(4, time.Minute) // T = 15 s: 3 units make TAT = now + 45 s
			r := peek(t, st, now, k, w)
			assert.Equal(t, int64(1), r.Remaining)
			require.True(t, eval(t, st, now, k, w, 1).Allowed)
			assert.False(t, eval(t, st, now, k, w, 1).Allowed)
			tat, tw := gcraValue(t, do(t, addr, "GET", k).(string))
			assert.Equal(t, now.Add(time.Minute).UnixMicro(), tat)
			assert.Equal(t, w.EmissionMicros(), tw)
		}
	})
}

// spend evaluates cost-1 requests on key under w at now until one is
// refused (at most max) and returns how many passed and the first one's
// remaining count.
func spend(t *testing.T, s *redis.Store, now time.Time, key string, w domain.Window, max int) (passed int, firstRemaining int64) {
	t.Helper()
	firstRemaining = -1
	for range max {
		r, err := s.Evaluate(t.Context(), now, []domain.Limit{{Key: key, Window: w, Cost: 1}})
		require.NoError(t, err)
		if !r.Allowed {
			break
		}
		if passed == 0 {
			firstRemaining = r.Remaining
		}
		passed++
	}
	return passed, firstRemaining
}

// TestWindowChangesKeepTheUnitsConsumed: the units a key holds survive a
// change of its window's limit, period or algorithm, in both directions
// (rules S1-S4 of docs/adr/009): issue 15's plan changes, issue 20's
// change of algorithm, a change mid-window, a v2 GCRA value, and a fresh
// GCRA key before 1970. v2 fails every case but the v2 value's.
func TestWindowChangesKeepTheUnitsConsumed(t *testing.T) {
	s := newStore(t, topologies[0].cfg(t))
	t0 := time.Now().Truncate(time.Second)
	cases := []struct {
		name      string
		before    domain.Window
		spent     int64 // units consumed at t0 under before, cost 2 when even and a log
		after     domain.Window
		at        time.Duration // when after is first used, from t0
		more      int           // how many more cost-1 requests pass then
		remaining int64         // the first of them reports (-1: none passes)
	}{
		{"GCRALimitLowered", gcra(10, 10*time.Second), 8, gcra(5, 10*time.Second), 0, 0, -1},
		{"GCRALimitRaised", gcra(5, 10*time.Second), 5, gcra(10, 10*time.Second), 0, 5, 4},
		{"GCRAPeriodLonger", gcra(10, 10*time.Second), 8, gcra(10, 20*time.Second), 0, 2, 1},
		{"GCRAPeriodShorter", gcra(10, 20*time.Second), 4, gcra(10, 10*time.Second), 0, 6, 5},
		{"GCRALimitLoweredMidWindow", gcra(10, 10*time.Second), 8, gcra(5, 10*time.Second), 5 * time.Second, 2, 1},
		{"GCRALimitLoweredPartlyDrained", gcra(10, 10*time.Second), 8, gcra(5, 10*time.Second), 4500 * time.Millisecond, 1, 0},
		{"LogLimitLowered", sliding(10, 10*time.Second), 8, sliding(5, 10*time.Second), 0, 0, -1},
		{"LogLimitRaised", sliding(5, 10*time.Second), 5, sliding(10, 10*time.Second), 0, 5, 4},
		{"LogToGCRA", sliding(10, 10*time.Second), 6, gcra(10, 10*time.Second), 0, 4, 3},
		{"LogToGCRAMidWindow", sliding(10, 10*time.Second), 6, gcra(10, 10*time.Second), 9 * time.Second, 4, 3},
		{"GCRAToLog", gcra(10, 10*time.Second), 6, sliding(10, 10*time.Second), 0, 4, 3},
		{"GCRAToLogMidWindow", gcra(10, 10*time.Second), 6, sliding(10, 10*time.Second), 2500 * time.Millisecond, 6, 5},
		{"GCRAToLargeLog", gcra(2000, 10*time.Second), 1500, sliding(2000, 10*time.Second), 0, 500, 499},
		{"LargeLogToGCRA", sliding(2000, 10*time.Second), 1500, gcra(2000, 10*time.Second), 0, 500, 499},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := "chg:{" + tag(t) + "}"
			t.Cleanup(func() { _ = s.Reset(context.Background(), k) })
			cost := int64(1)
			if c.before.Algorithm == domain.SlidingLog && c.spent%2 == 0 {
				cost = 2 // issue 20: cost > 1
			}
			r, err := s.Evaluate(t.Context(), t0, []domain.Limit{{Key: k, Window: c.before, Cost: c.spent}})
			require.NoError(t, err)
			if c.spent > 1 && cost == 1 {
				require.True(t, r.Allowed)
			} else {
				require.NoError(t, s.Reset(t.Context(), k))
				for range c.spent / cost {
					r, err := s.Evaluate(t.Context(), t0, []domain.Limit{{Key: k, Window: c.before, Cost: cost}})
					require.NoError(t, err)
					require.True(t, r.Allowed)
				}
			}
			more, first := spend(t, s, t0.Add(c.at), k, c.after, 3000)
			assert.Equal(t, c.more, more, "requests passed after the change")
			assert.Equal(t, c.remaining, first, "remaining after the first of them")
		})
	}
	t.Run("FreshGCRAKeyBefore1970", func(t *testing.T) {
		k := "chg:{" + tag(t) + "}"
		t.Cleanup(func() { _ = s.Reset(context.Background(), k) })
		early := time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC)
		more, first := spend(t, s, early, k, gcra(3, time.Hour), 10)
		assert.Equal(t, 3, more)
		assert.Equal(t, int64(2), first)
		more, _ = spend(t, s, early, k, sliding(5, time.Hour), 10)
		assert.Equal(t, 2, more, "S3 before 1970 too")
	})
}

// TestForeignValues: a key holding a value sluice did not write (issue 22
// item 4) fails that request with a *domain.StoreValueError naming the
// key, and the script writes nothing, on any key of the request: not the
// first key before the bad one is met (v2 counted units there for a
// request it then failed), not the bad key itself (v2 never gave it a
// TTL). v2 fails every case: a script error (ErrStoreUnavailable), a wrong
// decision, or a write.
func TestForeignValues(t *testing.T) {
	addr := redistest.Standalone(t)
	s := newStore(t, topologies[0].cfg(t))
	now := time.Now().Truncate(time.Second)
	future := func(d time.Duration) string {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(now.Add(d).UnixMicro()))
		return "\x01" + string(b[1:])
	}
	set := func(v string) func(k string) { return func(k string) { do(t, addr, "SET", k, v) } }
	small, large, g := sliding(5, time.Minute), sliding(2000, time.Minute), gcra(5, time.Minute)
	cases := []struct {
		name   string
		w      domain.Window
		write  func(k string)
		reason string
	}{
		{"ZSetScoredPlusInf", small, func(k string) { do(t, addr, "ZADD", k, "+inf", "m") }, "range"},
		{"ZSetScoredPlusInfLarge", large, func(k string) { do(t, addr, "ZADD", k, "1", "a", "+inf", "m") }, "range"},
		{"ZSetScoredMinusInf", large, func(k string) { do(t, addr, "ZADD", k, "-inf", "m") }, "range"},
		{"ZSetUnderGCRAScoredPlusInf", g, func(k string) { do(t, addr, "ZADD", k, "+inf", "m") }, "range"},
		{"ZSetFarAhead", small, func(k string) { do(t, addr, "ZADD", k, "1e17", "m") }, "future"},
		// A decimal TAT is no encoding of sluice's (the script before the
		// first release wrote one; nothing reads it now).
		{"GCRADecimal", g, set(strconv.FormatInt(now.UnixMicro(), 10)), "malformed"},
		{"GCRAInf", g, set("inf"), "malformed"},
		{"GCRAWords", g, set("hello"), "malformed"},
		{"GCRAEmpty", g, set(""), "malformed"},
		{"GCRAFarAhead", g, set(gcraState(now.Add(100*365*24*time.Hour), time.Second)), "future"},
		{"GCRAShort", g, set("\x02\x00\x01"), "malformed"},
		{"GCRAWrongTag", g, set("\x04" + gcraState(now, time.Second)[1:]), "malformed"},
		{"GCRAZeroInterval", g, set("\x02" + strings.Repeat("\x00", 16)), "range"},
		{"GCRAIntervalAboveMaxPeriod", g, set(gcraState(now, domain.MaxPeriod+time.Microsecond)), "range"},
		{"CompactTruncated", small, set("\x01\x00\x01\x02"), "malformed"},
		{"CompactFarAhead", small, set(future(100 * 365 * 24 * time.Hour)), "future"},
		{"CompactFarAheadUnderGCRA", g, set(future(100 * 365 * 24 * time.Hour)), "future"},
		{"CompactUnsorted", small, set(future(time.Hour) + future(0)[1:]), "malformed"},
	}
	for _, w := range []domain.Window{small, large, g} {
		for _, typ := range []struct {
			name  string
			write func(k string)
		}{
			{"List", func(k string) { do(t, addr, "RPUSH", k, "x") }},
			{"Hash", func(k string) { do(t, addr, "HSET", k, "f", "1") }},
			{"Set", func(k string) { do(t, addr, "SADD", k, "x") }},
			{"Stream", func(k string) { do(t, addr, "XADD", k, "*", "f", "1") }},
		} {
			name := fmt.Sprintf("%sUnder%s%d", typ.name, w.Algorithm, w.Limit)
			cases = append(cases, struct {
				name   string
				w      domain.Window
				write  func(k string)
				reason string
			}{name, w, typ.write, "wrongtype"})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := tag(t)
			first, bad, last := "fv:{"+tg+"}:first", "fv:{"+tg+"}:bad", "fv:{"+tg+"}:last"
			c.write(bad)
			t.Cleanup(func() {
				for _, k := range []string{first, bad, last} {
					_ = s.Reset(context.Background(), k)
				}
			})
			typ, dump := do(t, addr, "TYPE", bad), do(t, addr, "DUMP", bad)
			limits := []domain.Limit{
				{Key: first, Window: sliding(10, time.Minute), Cost: 1},
				{Key: bad, Window: c.w, Cost: 1},
				{Key: last, Window: gcra(10, time.Minute), Cost: 1},
			}
			for _, op := range []string{"evaluate", "peek"} {
				var err error
				if op == "evaluate" {
					_, err = s.Evaluate(t.Context(), now, limits)
				} else {
					_, err = s.Peek(t.Context(), now, limits)
				}
				var ve *domain.StoreValueError
				if !assert.ErrorAs(t, err, &ve, "%s", op) {
					continue
				}
				assert.ErrorIs(t, err, domain.ErrStoreValue)
				assert.NotErrorIs(t, err, domain.ErrStoreUnavailable, "a request's fault, not an outage")
				assert.Equal(t, domain.CodeStoreValue, domain.CodeOf(err))
				assert.Equal(t, 1, ve.Index)
				assert.Equal(t, bad, ve.Key)
				assert.Equal(t, c.reason, ve.Reason)
			}
			assert.Equal(t, int64(0), do(t, addr, "EXISTS", first, last), "nothing written on the other keys")
			assert.Equal(t, typ, do(t, addr, "TYPE", bad))
			assert.Equal(t, dump, do(t, addr, "DUMP", bad), "the foreign value is left as it was")
			assert.Equal(t, int64(-1), do(t, addr, "PTTL", bad))
		})
	}
}

// TestTTLsAreBounded: a value from the future inside the bound, or a log
// under a grace, never makes a TTL longer than the key needs (its newest
// unit plus the window plus the grace; a GCRA key its TAT), never NaN or
// negative.
func TestTTLsAreBounded(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{Grace: 5 * time.Second})
	now := time.Now().Truncate(time.Millisecond)
	ahead := now.Add(time.Hour)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ahead.UnixMicro()))
	do(t, srv.Addr(), "SET", "ttl:{x}:log", "\x01"+string(b[1:]))
	do(t, srv.Addr(), "ZADD", "ttl:{x}:zset", strconv.FormatInt(ahead.UnixMicro(), 10), "m")
	limits := []domain.Limit{
		{Key: "ttl:{x}:log", Window: sliding(5, time.Minute), Cost: 1},
		{Key: "ttl:{x}:zset", Window: sliding(2000, time.Minute), Cost: 1},
		{Key: "ttl:{x}:gcra", Window: gcra(5, time.Minute), Cost: 2},
	}
	r, err := s.Evaluate(t.Context(), now, limits)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	for _, c := range []struct {
		key string
		max time.Duration
	}{
		{"ttl:{x}:log", time.Hour + time.Minute + 5*time.Second},
		{"ttl:{x}:zset", time.Hour + time.Minute + 5*time.Second},
		{"ttl:{x}:gcra", 24 * time.Second},
	} {
		pttl := do(t, srv.Addr(), "PTTL", c.key).(int64)
		assert.Positive(t, pttl, c.key)
		assert.LessOrEqual(t, pttl, c.max.Milliseconds(), c.key)
		assert.Greater(t, pttl, (c.max - 2*time.Second).Milliseconds(), c.key)
	}
}

// TestRandomForeignStrings writes random strings (random bytes, and
// near-misses of each encoding: a compact log of random instants, a v3
// GCRA value of random fields, random decimal text) into the middle key
// of a request and checks what the script does with them under windows
// of both algorithms: it never fails with a script error, it either
// decides (every key then carrying a TTL no longer than its need) or
// answers a StoreValueError for that key having written nothing.
func TestRandomForeignStrings(t *testing.T) {
	addr := redistest.Standalone(t)
	s := newStore(t, topologies[0].cfg(t))
	now := time.Now().Truncate(time.Millisecond)
	rng := rand.New(rand.NewPCG(7, 11))
	be := func(v uint64, n int) string {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], v)
		return string(b[8-n:])
	}
	values := []func() string{
		func() string { // random bytes
			b := make([]byte, rng.IntN(40))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			return string(b)
		},
		func() string { // a compact log of random instants
			v := "\x01"
			for range rng.IntN(6) {
				v += be(rng.Uint64()>>uint(rng.IntN(9)*8), 7)
			}
			return v
		},
		func() string { // a compact log of plausible instants
			v := "\x01"
			at := now.Add(-time.Duration(rng.IntN(120)) * time.Second).UnixMicro()
			for range rng.IntN(6) {
				at += rng.Int64N(int64(40 * time.Second / time.Microsecond))
				v += be(uint64(at), 7)
			}
			return v
		},
		func() string { // a v3 GCRA value of random fields
			return "\x02" + be(rng.Uint64()>>uint(rng.IntN(9)*7), 8) + be(rng.Uint64()>>uint(rng.IntN(9)*7), 8)
		},
		func() string { // decimal text (malformed: no encoding of sluice's)
			return []string{"0", "-1", "1e15", "9007199254740993", "0x10", " 42", "1e308", "-1e308", "4.5e15", "+7"}[rng.IntN(10)]
		},
	}
	windows := []domain.Window{sliding(5, time.Minute), sliding(2000, time.Minute), gcra(5, time.Minute), gcra(1000, time.Hour)}
	outcomes := map[string]int{}
	for i := range 600 {
		tg := tag(t)
		first, bad, last := "rf:{"+tg+"}:a", "rf:{"+tg+"}:b", "rf:{"+tg+"}:c"
		v := values[rng.IntN(len(values))]()
		do(t, addr, "SET", bad, v)
		w := windows[rng.IntN(len(windows))]
		limits := []domain.Limit{
			{Key: first, Window: sliding(10, time.Minute), Cost: 1},
			{Key: bad, Window: w, Cost: 1 + rng.Int64N(3)},
			{Key: last, Window: gcra(10, time.Minute), Cost: 1},
		}
		r, err := s.Evaluate(t.Context(), now, limits)
		if err != nil {
			var ve *domain.StoreValueError
			require.ErrorAs(t, err, &ve, "case %d: %q under %+v", i, v, w)
			require.Equal(t, 1, ve.Index)
			require.Equal(t, int64(0), do(t, addr, "EXISTS", first, last), "case %d: written before the error", i)
			require.Equal(t, v, do(t, addr, "GET", bad))
			outcomes[ve.Reason]++
		} else if r.Allowed {
			outcomes["allowed"]++
			for j, l := range limits {
				pttl := do(t, addr, "PTTL", l.Key).(int64)
				require.Positive(t, pttl, "case %d: %q under %+v: key %d", i, v, w, j)
				require.LessOrEqual(t, pttl, (3 * domain.MaxPeriod).Milliseconds(), "case %d: %q under %+v: key %d", i, v, w, j)
			}
		} else {
			outcomes["refused"]++
		}
		for _, k := range []string{first, bad, last} {
			require.NoError(t, s.Reset(t.Context(), k))
		}
	}
	t.Logf("outcomes: %v", outcomes)
	for _, o := range []string{"allowed", "refused", "malformed", "range", "future"} {
		assert.Positive(t, outcomes[o], "no case ended %s: the generator missed a path", o)
	}
}

// gcraState is a GCRA state as the script writes it: "\x02", the TAT and
// the emission interval it was written with, in microseconds.
func gcraState(tat time.Time, interval time.Duration) string {
	var b [17]byte
	b[0] = 2
	binary.BigEndian.PutUint64(b[1:], uint64(tat.UnixMicro()))
	binary.BigEndian.PutUint64(b[9:], uint64(interval.Microseconds()))
	return string(b[:])
}

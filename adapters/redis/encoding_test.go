package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
)

// v1Evaluate runs the released rate_limit_v1.lua on key, with its own
// argument layout, as an instance of the previous release does, and says
// whether it admitted cost.
func v1Evaluate(t *testing.T, addr, key string, now time.Time, w domain.Window, cost int64) bool {
	t.Helper()
	algo := "0"
	if w.Algorithm == domain.GCRA {
		algo = "1"
	}
	v := do(t, addr, "EVAL", lua.RateLimitV1, "1", key,
		strconv.FormatInt(now.UnixMicro(), 10), "1", "0", "v1-"+tag(t), "1000",
		algo, strconv.FormatInt(w.Limit, 10), strconv.FormatInt(w.PeriodMicros(), 10), strconv.FormatInt(cost, 10)).([]any)
	return v[0].(int64) == 1
}

// TestEncodingChanges: a key found in another encoding than its window
// wants is counted for what it holds, never as empty, and rewritten in the
// wanted encoding on the next admitted request, whether the change comes
// from an upgrade from v1, a limit crossing CompactLogMaxLimit, an
// algorithm change, or a rollback to v1 (Config.Log = LogZSet).
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

	t.Run("V1ZSetAfterAnUpgrade", func(t *testing.T) {
		k, w := key(t), sliding(5, time.Minute)
		require.True(t, v1Evaluate(t, addr, k, now, w, 3))
		require.Equal(t, "zset", typeOf(k))
		assert.Equal(t, int64(2), peek(t, s, now, k, w).Remaining, "v2 counts the units v1 recorded")
		assert.False(t, eval(t, s, now, k, w, 3).Allowed, "3 more would exceed 5")
		require.True(t, eval(t, s, now.Add(time.Second), k, w, 2).Allowed)
		require.Equal(t, "string", typeOf(k), "rewritten compact on admission")
		assert.Len(t, compactUnits(t, do(t, addr, "GET", k).(string)), 5, "v1's three units and v2's two")
		assert.False(t, eval(t, s, now.Add(2*time.Second), k, w, 1).Allowed)
		r := eval(t, s, now.Add(time.Minute), k, w, 3)
		assert.True(t, r.Allowed, "v1's units left the window at now+1m: %+v", r)
	})
	t.Run("SharedWithV1UnderLogZSet", func(t *testing.T) {
		// A rolling upgrade with Log: LogZSet: v1 and v2 take turns on one
		// key and together admit exactly the limit.
		k, w := key(t), sliding(6, time.Minute)
		admitted := 0
		for i := range 5 {
			at := now.Add(time.Duration(i) * time.Millisecond)
			if v1Evaluate(t, addr, k, at, w, 2) {
				admitted += 2
			}
			if eval(t, zs, at, k, w, 1).Allowed {
				admitted++
			}
			require.Equal(t, "zset", typeOf(k))
		}
		assert.Equal(t, 6, admitted)
	})
	t.Run("RollbackToV1UnderLogZSet", func(t *testing.T) {
		k, w := key(t), sliding(4, time.Minute)
		require.True(t, eval(t, s, now, k, w, 2).Allowed)
		require.Equal(t, "string", typeOf(k))
		require.True(t, eval(t, zs, now, k, w, 1).Allowed, "LogZSet reads the compact log")
		require.Equal(t, "zset", typeOf(k), "and rewrites it as a ZSET")
		assert.Equal(t, int64(3), do(t, addr, "ZCARD", k))
		assert.True(t, v1Evaluate(t, addr, k, now, w, 1), "v1 sees 3 of 4")
		assert.False(t, v1Evaluate(t, addr, k, now, w, 1), "and then 4 of 4")
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
	t.Run("LimitLoweredUnderTheBound", func(t *testing.T) {
		k := key(t)
		large, small := sliding(2*redis.CompactLogMaxLimit, time.Minute), sliding(redis.CompactLogMaxLimit, time.Minute)
		require.True(t, eval(t, s, now, k, large, 900).Allowed)
		require.Equal(t, "zset", typeOf(k))
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

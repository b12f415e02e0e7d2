package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
)

// v3Evaluate runs rate_limit_v3 itself, as a v3 instance of a fleet
// does (one request, on the caller's clock, v3's default compact bound
// and a floor of TTLs of a minute), and returns its reply.
func v3Evaluate(t *testing.T, addr string, now time.Time, limits []domain.Limit, grace time.Duration) []int64 {
	t.Helper()
	return scriptEvaluate(t, addr, lua.RateLimitV3, "v3-", now, limits, grace)
}

// v4Evaluate runs rate_limit_v4 itself, as a v4 instance of a fleet does
// (its op 0 takes v3's arguments), and returns its reply.
func v4Evaluate(t *testing.T, addr string, now time.Time, limits []domain.Limit, grace time.Duration) []int64 {
	t.Helper()
	return scriptEvaluate(t, addr, lua.RateLimitV4, "v4-", now, limits, grace)
}

// scriptEvaluate runs src, rate_limit_v3 or a script taking its
// arguments, on one request, its ZSET members named after prefix.
func scriptEvaluate(t *testing.T, addr, src, prefix string, now time.Time, limits []domain.Limit, grace time.Duration) []int64 {
	t.Helper()
	return scriptCall(t, addr, src, prefix, 1, now, limits, grace)
}

// scriptCall runs src on one request with flags (1 consume, 0 peek; the
// caller's time).
func scriptCall(t *testing.T, addr, src, prefix string, flags byte, now time.Time, limits []domain.Limit, grace time.Duration) []int64 {
	t.Helper()
	p := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMicro()))
	p = append(p, flags)
	p = binary.BigEndian.AppendUint32(p, 60_000)
	p = binary.BigEndian.AppendUint32(p, redis.CompactLogMaxLimit)
	p = binary.BigEndian.AppendUint64(p, uint64(grace.Microseconds()))
	p = binary.BigEndian.AppendUint32(p, 1)
	args := []string{"EVAL", src, strconv.Itoa(len(limits))}
	for _, l := range limits {
		args = append(args, l.Key)
		p = append(p, byte(l.Window.Algorithm))
		p = binary.BigEndian.AppendUint32(p, uint32(l.Window.Limit))
		p = binary.BigEndian.AppendUint64(p, uint64(l.Window.PeriodMicros()))
		p = binary.BigEndian.AppendUint32(p, uint32(l.Cost))
	}
	args = append(args, string(p), prefix+tag(t))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	v, err := redistest.Do(ctx, addr, args...)
	require.NoError(t, err)
	var out []int64
	for _, x := range v.([]any) {
		out = append(out, x.(int64))
	}
	return out
}

// v3Reply is what rate_limit_v3 answers for a request whose Result is r.
func v3Reply(r domain.Result) []int64 {
	if r.Allowed {
		out := []int64{1}
		for _, st := range r.Statuses() {
			out = append(out, st.Remaining, st.ResetAfter.Microseconds())
		}
		return out
	}
	out := []int64{0}
	for _, st := range r.Statuses() {
		out = append(out, st.Remaining, st.RetryAfter.Microseconds(), st.ResetAfter.Microseconds())
	}
	return out
}

// TestRollingUpgradeFromV3: during a rolling upgrade v3 instances (the
// script itself) and instances of the store take turns at random on the
// same keys: GCRA, compact and ZSET logs, and a key whose window changes
// limit, period and algorithm; instants a little out of order, repeated
// requests. Every answer of either equals the Go reference's to the
// microsecond, so together they admit exactly each limit: the store reads
// and writes rate keys as v3 does (v4 did, and v5 does on a key of one
// window).
func TestRollingUpgradeFromV3(t *testing.T) {
	rollingUpgrade(t, "v3", v3Evaluate)
}

// TestRollingUpgradeFromV4: v4 instances (the script itself) and v5
// instances (the store) take turns on the per-window layout, as
// TestRollingUpgradeFromV3: v5 reads and writes a key of one window
// exactly as v4 does, every answer of either equal to the reference's.
func TestRollingUpgradeFromV4(t *testing.T) {
	rollingUpgrade(t, "v4", v4Evaluate)
}

// rollingUpgrade runs the turns of an older script (older, called name)
// and of the store on per-window keys against the Go reference.
func rollingUpgrade(t *testing.T, name string, older func(*testing.T, string, time.Time, []domain.Limit, time.Duration) []int64) {
	addr := redistest.Standalone(t)
	s := newStore(t, topologies[0].cfg(t)) // CallerTime, DefaultGrace
	windows := []domain.Window{
		sliding(5, 10*time.Second),
		gcra(3, 10*time.Second+7*time.Microsecond),
		sliding(redis.CompactLogMaxLimit+1, 20*time.Second),
		gcra(7, time.Minute),
	}
	morph := []domain.Window{sliding(10, 10*time.Second), gcra(10, 10*time.Second), sliding(5, 10*time.Second), gcra(20, 15*time.Second)}
	for seq := range 4 {
		rng := rand.New(rand.NewPCG(uint64(seq), 3))
		ref := newRefStore(redis.DefaultGrace)
		tg := tag(t)
		keys := make([]string, len(windows)+1)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s:{%s}:%d", name, tg, i)
		}
		now := time.Now().Truncate(time.Second)
		admitted := map[string]int{}
		for step := range 300 {
			switch p := rng.IntN(100); {
			case p < 10:
				now = now.Add(-time.Duration(rng.Int64N(int64(200 * time.Millisecond))).Truncate(time.Microsecond))
			case p < 30:
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))).Truncate(time.Microsecond))
			}
			idx := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
			limits := make([]domain.Limit, len(idx))
			for j, k := range idx {
				w := morph[rng.IntN(len(morph))]
				if k < len(windows) {
					w = windows[k]
				}
				cost := int64(1)
				if rng.IntN(4) == 0 {
					cost = 1 + rng.Int64N(min(w.Limit, 3))
				}
				limits[j] = domain.Limit{Key: keys[k], Window: w, Cost: cost}
			}
			where := fmt.Sprintf("sequence %d step %d at %s: %+v", seq, step, now.Format(time.StampMicro), limits)
			switch op := rng.IntN(10); {
			case op < 4:
				want := ref.run(now, limits, true)
				require.Equal(t, v3Reply(want), older(t, addr, now, limits, redis.DefaultGrace), "%s %s", name, where)
				if want.Allowed {
					admitted[name]++
				}
			case op < 6:
				n := 1 + rng.IntN(4)
				want := ref.repeated(now, limits, n)
				got, err := s.EvaluateRepeated(t.Context(), now, limits, n)
				require.NoError(t, err)
				require.Equal(t, want, got, "store repeated %d %s", n, where)
				admitted["store"] += got.Admitted
			default:
				want := ref.run(now, limits, true)
				got, err := s.Evaluate(t.Context(), now, limits)
				require.NoError(t, err)
				require.Equal(t, want, got, "store %s", where)
				if got.Allowed {
					admitted["store"]++
				}
			}
		}
		require.NotZero(t, admitted[name])
		require.NotZero(t, admitted["store"])
		t.Logf("sequence %d: admitted by %s %d, by the store %d", seq, name, admitted[name], admitted["store"])
	}
}

// TestUpgradeToSharedLogFromV4: a v4 fleet wrote each principal's windows
// on keys of their own; v5 then runs the shared layout, which reuses the
// key of each principal's longest window (docs/adr/015) for all its
// windows. Two identical per-window key sets are written by v4 (X and Y);
// then v5 decides on the shared layout over X (the short windows count
// the units the long key holds) and on the per-window layout over Y, and
// every answer of one equals the other's: no count is lost or doubled by
// the change of layout.
func TestUpgradeToSharedLogFromV4(t *testing.T) {
	addr := redistest.Standalone(t)
	s := newStore(t, topologies[0].cfg(t)) // CallerTime, DefaultGrace
	type pair struct{ long, short domain.Window }
	pairs := []pair{
		{sliding(9, 5*time.Second), sliding(4, time.Second)},
		{sliding(redis.CompactLogMaxLimit+76, 6*time.Second), sliding(5, 1500*time.Millisecond)}, // a ZSET long key
	}
	for seq := range 3 {
		rng := rand.New(rand.NewPCG(uint64(seq), 5))
		tg := tag(t)
		key := func(set string, p int, w string) string { return fmt.Sprintf("up:{%s}:%s:%d:%s", tg, set, p, w) }
		// The per-window layout of set: each pair's short window, then its
		// long one; shared, the short window on the long window's key.
		perWindow := func(set string, cost int64, shared bool) []domain.Limit {
			var out []domain.Limit
			for p, pr := range pairs {
				short := key(set, p, "short")
				if shared {
					short = key(set, p, "long")
				}
				out = append(out, domain.Limit{Key: short, Window: pr.short, Cost: cost}, domain.Limit{Key: key(set, p, "long"), Window: pr.long, Cost: cost})
			}
			return out
		}
		now := time.Now().Truncate(time.Second)
		step := func() {
			if rng.IntN(10) == 0 {
				now = now.Add(-time.Duration(rng.Int64N(int64(redis.DefaultGrace))).Truncate(time.Microsecond))
			} else {
				now = now.Add(time.Duration(rng.Int64N(int64(600 * time.Millisecond))).Truncate(time.Microsecond))
			}
		}
		refused := 0
		for i := range 40 {
			step()
			cost := 1 + rng.Int64N(3)
			x := v4Evaluate(t, addr, now, perWindow("x", cost, false), redis.DefaultGrace)
			y := v4Evaluate(t, addr, now, perWindow("y", cost, false), redis.DefaultGrace)
			require.Equal(t, x, y, "sequence %d v4 step %d", seq, i)
		}
		for i := range 120 {
			step()
			cost := 1 + rng.Int64N(3)
			where := fmt.Sprintf("sequence %d v5 step %d at %s cost %d", seq, i, now.Format(time.StampMicro), cost)
			if rng.IntN(4) == 0 {
				a, err := s.Peek(t.Context(), now, perWindow("x", cost, true))
				require.NoError(t, err)
				b, err := s.Peek(t.Context(), now, perWindow("y", cost, false))
				require.NoError(t, err)
				require.Equal(t, b, a, "Peek %s", where)
				continue
			}
			a, err := s.Evaluate(t.Context(), now, perWindow("x", cost, true))
			require.NoError(t, err)
			b, err := s.Evaluate(t.Context(), now, perWindow("y", cost, false))
			require.NoError(t, err)
			require.Equal(t, b, a, "Evaluate %s", where)
			if !a.Allowed {
				refused++
			}
		}
		require.NotZero(t, refused, "sequence %d: the shared layout never refused", seq)
		// The short windows' old keys are left to expire: nothing reads them.
	}
}

// TestV4ReadsASharedCompactLogUnderALargeWindow: during the rollout of
// docs/adr/015 a v4 instance runs the per-window layout, whose longest
// window's key is the shared key v5 writes; v5 writes it compact while it
// holds few units, though that window is above the compact bound
// (docs/adr/016, "A log's encoding by its content"). v4 (the script
// itself) and v5's per-window path read it through WRONGTYPE and GET:
// each reading the long window on the shared key answers exactly what it
// answers on a per-window key holding the same units as a ZSET.
func TestV4ReadsASharedCompactLogUnderALargeWindow(t *testing.T) {
	addr := redistest.Standalone(t)
	s := newStore(t, topologies[0].cfg(t)) // CallerTime, DefaultGrace
	long, short := sliding(redis.CompactLogMaxLimit+76, 6*time.Second), sliding(5, 1500*time.Millisecond)
	tg := tag(t)
	x := fmt.Sprintf("v4r:{%s}:x", tg)
	ylong, yshort := fmt.Sprintf("v4r:{%s}:y:long", tg), fmt.Sprintf("v4r:{%s}:y:short", tg)
	rng := rand.New(rand.NewPCG(7, 7))
	now := time.Now().Truncate(time.Second)
	refused, nonzero := 0, 0
	for i := range 150 {
		if rng.IntN(10) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(int64(redis.DefaultGrace))).Truncate(time.Microsecond))
		} else {
			now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))).Truncate(time.Microsecond))
		}
		cost := 1 + rng.Int64N(3)
		where := fmt.Sprintf("step %d at %s cost %d", i, now.Format(time.StampMicro), cost)
		a, err := s.Evaluate(t.Context(), now, []domain.Limit{{Key: x, Window: short, Cost: cost}, {Key: x, Window: long, Cost: cost}})
		require.NoError(t, err)
		b, err := s.Evaluate(t.Context(), now, []domain.Limit{{Key: yshort, Window: short, Cost: cost}, {Key: ylong, Window: long, Cost: cost}})
		require.NoError(t, err)
		require.Equal(t, b, a, "v5 %s", where)
		if !a.Allowed {
			refused++
		}
		require.Equal(t, "string", do(t, addr, "TYPE", x), where)
		require.Equal(t, "zset", do(t, addr, "TYPE", ylong), where)
		// v4, peeking at the long window alone on either key.
		vx := scriptCall(t, addr, lua.RateLimitV4, "v4-", 0, now, []domain.Limit{{Key: x, Window: long, Cost: cost}}, redis.DefaultGrace)
		vy := scriptCall(t, addr, lua.RateLimitV4, "v4-", 0, now, []domain.Limit{{Key: ylong, Window: long, Cost: cost}}, redis.DefaultGrace)
		require.Equal(t, vy, vx, "v4 %s", where)
		if vx[1] < long.Limit {
			nonzero++
		}
		// v5's per-window path, the same.
		px, err := s.Peek(t.Context(), now, []domain.Limit{{Key: x, Window: long, Cost: cost}})
		require.NoError(t, err)
		py, err := s.Peek(t.Context(), now, []domain.Limit{{Key: ylong, Window: long, Cost: cost}})
		require.NoError(t, err)
		require.Equal(t, py, px, "v5 per-window %s", where)
	}
	require.NotZero(t, refused, "the short window never refused")
	require.NotZero(t, nonzero, "the long window never counted a unit")
}

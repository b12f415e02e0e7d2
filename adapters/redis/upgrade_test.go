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
	p := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMicro()))
	p = append(p, 1) // consume, caller time
	p = binary.BigEndian.AppendUint32(p, 60_000)
	p = binary.BigEndian.AppendUint32(p, redis.CompactLogMaxLimit)
	p = binary.BigEndian.AppendUint64(p, uint64(grace.Microseconds()))
	p = binary.BigEndian.AppendUint32(p, 1)
	args := []string{"EVAL", lua.RateLimitV3, strconv.Itoa(len(limits))}
	for _, l := range limits {
		args = append(args, l.Key)
		p = append(p, byte(l.Window.Algorithm))
		p = binary.BigEndian.AppendUint32(p, uint32(l.Window.Limit))
		p = binary.BigEndian.AppendUint64(p, uint64(l.Window.PeriodMicros()))
		p = binary.BigEndian.AppendUint32(p, uint32(l.Cost))
	}
	args = append(args, string(p), "v3-"+tag(t))
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
// script itself) and v4 instances (the store) take turns at random on the
// same keys: GCRA, compact and ZSET logs, and a key whose window changes
// limit, period and algorithm; instants a little out of order, repeated
// requests. Every answer of either equals the Go reference's to the
// microsecond, so together they admit exactly each limit: v4 reads and
// writes rate keys as v3 does.
func TestRollingUpgradeFromV3(t *testing.T) {
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
			keys[i] = fmt.Sprintf("v3v4:{%s}:%d", tg, i)
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
				require.Equal(t, v3Reply(want), v3Evaluate(t, addr, now, limits, redis.DefaultGrace), "v3 %s", where)
				if want.Allowed {
					admitted["v3"]++
				}
			case op < 6:
				n := 1 + rng.IntN(4)
				want := ref.repeated(now, limits, n)
				got, err := s.EvaluateRepeated(t.Context(), now, limits, n)
				require.NoError(t, err)
				require.Equal(t, want, got, "v4 repeated %d %s", n, where)
				admitted["v4"] += got.Admitted
			default:
				want := ref.run(now, limits, true)
				got, err := s.Evaluate(t.Context(), now, limits)
				require.NoError(t, err)
				require.Equal(t, want, got, "v4 %s", where)
				if got.Allowed {
					admitted["v4"]++
				}
			}
		}
		require.NotZero(t, admitted["v3"])
		require.NotZero(t, admitted["v4"])
		t.Logf("sequence %d: admitted by v3 %d, by v4 %d", seq, admitted["v3"], admitted["v4"])
	}
}

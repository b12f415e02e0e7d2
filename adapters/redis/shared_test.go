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

// principal is one principal's windows of a request: on the shared
// layout one key (one log, docs/adr/015) serves them all; on the
// per-window layout each has a key of its own.
type principal struct {
	name    string
	windows []domain.Window
}

// padded returns shared on keys of its own (prefix "gp") with one more
// limit: a GCRA window that never refuses. A window of another algorithm
// beside the shared logs must change nothing the logs answer: the
// statuses of shared's limits must be the same with it and without.
func padded(tg string, ps []principal, cost int64) []domain.Limit {
	sh, _ := layouts(tg, ps, cost)
	for i := range sh {
		sh[i].Key = "gp" + sh[i].Key[2:]
	}
	return append(sh, domain.Limit{Key: fmt.Sprintf("gp:{%s}:pad", tg), Window: gcra(domain.MaxLimit, time.Hour), Cost: cost})
}

// samePrefix checks that got, the answer to a padded request, says for
// the request's own limits what want says.
func samePrefix(t *testing.T, want, got domain.Result, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, want.Allowed, got.Allowed, msgAndArgs...)
	n := len(want.Statuses())
	if n > 0 {
		require.Equal(t, want.Statuses(), got.Statuses()[:n], msgAndArgs...)
	}
}

// layouts returns the limits of one request over principals ps at cost,
// on the shared layout and on the per-window layout, in the same order;
// the two use disjoint keys under one hash tag.
func layouts(tg string, ps []principal, cost int64) (shared, perWindow []domain.Limit) {
	for _, p := range ps {
		for j, w := range p.windows {
			shared = append(shared, domain.Limit{Key: fmt.Sprintf("sh:{%s}:%s", tg, p.name), Window: w, Cost: cost})
			perWindow = append(perWindow, domain.Limit{Key: fmt.Sprintf("pw:{%s}:%s:%d", tg, p.name, j), Window: w, Cost: cost})
		}
	}
	return shared, perWindow
}

// sharedPrincipals are the differential's principals: two and three
// sliding-log windows on one key (longest first, and shortest first),
// a window alone, a GCRA window alone, and a principal whose largest
// window is above the compact bound (its shared key a compact log of a
// few units, docs/adr/016 "A log's encoding by its content"; its
// per-window keys one compact log and one ZSET).
var sharedPrincipals = []principal{
	{"ip", []domain.Window{sliding(4, time.Second), sliding(9, 5*time.Second)}},
	{"user", []domain.Window{sliding(12, 6*time.Second), sliding(5, 1500*time.Millisecond), sliding(3, 400*time.Millisecond)}},
	{"tenant", []domain.Window{gcra(10, 3*time.Second)}},
	{"global", []domain.Window{sliding(15, 4*time.Second)}},
	{"big", []domain.Window{sliding(redis.CompactLogMaxLimit+6, 3*time.Second), sliding(8, time.Second)}},
}

// crossingPrincipals are TestSharedLogCrossesTheBound's: "huge" has both
// its windows above the compact bound, beside a compact pair (alone
// often enough for a repeated request to fill it past the bound).
var crossingPrincipals = []principal{
	sharedPrincipals[0],
	{"huge", []domain.Window{sliding(4*redis.CompactLogMaxLimit, 2*time.Second), sliding(3*redis.CompactLogMaxLimit, time.Second)}},
}

// TestSharedLogDifferential: random timelines (seeded, fixed instants on
// the caller's clock, a few slightly out of order within the grace,
// random costs 1..3, refusals included) of requests on the shared layout
// and of the same requests on the per-window layout, on one server:
// Evaluate, Peek, EvaluateRepeated, Reserve and Settle (refunds and
// charges). Every answer of the shared layout equals the per-window
// layout's (Allowed, Limiting and every window's Remaining, RetryAfter
// and ResetAfter, to the microsecond): only the storage is shared. A
// third copy of each request, padded with a GCRA window that never
// refuses, says the same for their limits. With
// compact logs (the default) and with every log a ZSET (LogZSet), on a
// standalone server and on a cluster.
func TestSharedLogDifferential(t *testing.T) {
	onEachStore(t, func(t *testing.T, _ string, _ redis.LogEncoding, s *redis.Store) {
		for seq := range 3 {
			sharedTimeline(t, s, rand.New(rand.NewPCG(uint64(seq), 17)), fmt.Sprintf("sequence %d", seq), sharedPrincipals, nil)
		}
	})
}

// onEachStore runs f on a store of each topology (standalone, cluster)
// with each log encoding (compact, every log a ZSET), as subtests.
func onEachStore(t *testing.T, f func(t *testing.T, topology string, log redis.LogEncoding, s *redis.Store)) {
	for _, top := range topologies {
		for _, enc := range []struct {
			name string
			log  redis.LogEncoding
		}{{"compact", redis.LogCompact}, {"zset", redis.LogZSet}} {
			t.Run(top.name+"/"+enc.name, func(t *testing.T) {
				cfg := top.cfg(t)
				cfg.Log = enc.log
				f(t, top.name, enc.log, newStore(t, cfg))
			})
		}
	}
}

// TestSharedLogCrossesTheBound: the differential of
// TestSharedLogDifferential on crossingPrincipals. The "huge" principal's
// shared log holds few units: a compact log under windows above the
// bound, reserved, refunded and charged at the lease's instant; its
// per-window keys follow their own content. Every answer equals the
// per-window layout's and the padded request's. (The random
// timelines seldom fill it past the bound: TestSharedLogEncodingFollowsItsContent
// crosses it on purpose.)
func TestSharedLogCrossesTheBound(t *testing.T) {
	onEachStore(t, func(t *testing.T, topology string, log redis.LogEncoding, s *redis.Store) {
		// On the standalone server the timelines also watch the "huge"
		// principal's shared key: it must be seen compact when a
		// reservation on it settles.
		var typ func(string) string
		if topology == "standalone" {
			addr := redistest.Standalone(t)
			typ = func(key string) string { return do(t, addr, "TYPE", key).(string) }
		}
		seen := map[string]int{}
		for seq := range 3 {
			for k, v := range sharedTimeline(t, s, rand.New(rand.NewPCG(uint64(seq), 17)), fmt.Sprintf("sequence %d", seq), crossingPrincipals, typ) {
				seen[k] += v
			}
		}
		if typ != nil && log == redis.LogCompact {
			require.NotZero(t, seen["huge: settled on a compact log"], "%v", seen)
		}
	})
}

// sharedTimeline runs one random timeline of the differential on s and
// returns what it saw; typ, when not nil, reads a key's type.
func sharedTimeline(t *testing.T, s *redis.Store, rng *rand.Rand, name string, principals []principal, typ func(string) string) map[string]int {
	t.Helper()
	ctx := t.Context()
	tg := tag(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	type pending struct {
		sh, pw, gp   []domain.Limit
		shL, pwL, gL domain.Lease
		reservedCost int64
	}
	var lease *pending
	counts := map[string]int{}
	for step := range 400 {
		switch p := rng.IntN(100); {
		case p < 8:
			// Out of order by less than the grace.
			now = now.Add(-time.Duration(rng.Int64N(int64(redis.DefaultGrace))).Truncate(time.Microsecond))
		case p < 25:
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(700 * time.Millisecond))).Truncate(time.Microsecond))
		}
		// A random subset of the principals, each with all its windows
		// (the Limiter always sends every window of a principal).
		var ps []principal
		for _, i := range rng.Perm(len(principals))[:1+rng.IntN(len(principals))] {
			ps = append(ps, principals[i])
		}
		cost := 1 + rng.Int64N(3)
		sh, pw := layouts(tg, ps, cost)
		gp := padded(tg, ps, cost)
		where := fmt.Sprintf("%s step %d at %s, cost %d, %v", name, step, now.Format(time.StampMicro), cost, ps)
		huge := fmt.Sprintf("sh:{%s}:huge", tg)
		before := ""
		if typ != nil {
			before = typ(huge)
		}
		switch op := rng.IntN(100); {
		case op < 40:
			a, err := s.Evaluate(ctx, now, sh)
			require.NoError(t, err, where)
			b, err := s.Evaluate(ctx, now, pw)
			require.NoError(t, err, where)
			require.Equal(t, b, a, "Evaluate %s", where)
			g, err := s.Evaluate(ctx, now, gp)
			require.NoError(t, err, where)
			samePrefix(t, a, g, "Evaluate, padded %s", where)
			counts[fmt.Sprint("evaluate allowed=", a.Allowed)]++
		case op < 55:
			a, err := s.Peek(ctx, now, sh)
			require.NoError(t, err, where)
			b, err := s.Peek(ctx, now, pw)
			require.NoError(t, err, where)
			require.Equal(t, b, a, "Peek %s", where)
			g, err := s.Peek(ctx, now, gp)
			require.NoError(t, err, where)
			samePrefix(t, a, g, "Peek, padded %s", where)
			counts["peek"]++
		case op < 70:
			n := 2 + rng.IntN(5)
			if rng.IntN(5) == 0 {
				n = 50 + rng.IntN(400)
			}
			a, err := s.EvaluateRepeated(ctx, now, sh, n)
			require.NoError(t, err, where)
			b, err := s.EvaluateRepeated(ctx, now, pw, n)
			require.NoError(t, err, where)
			require.Equal(t, b, a, "EvaluateRepeated %d %s", n, where)
			g, err := s.EvaluateRepeated(ctx, now, gp, n)
			require.NoError(t, err, where)
			require.Equal(t, a.Admitted, g.Admitted, "EvaluateRepeated %d, padded %s", n, where)
			if a.Admitted > 0 {
				samePrefix(t, a.Last, g.Last, "EvaluateRepeated %d, padded %s", n, where)
			}
			if a.Admitted < n {
				samePrefix(t, a.Refused, g.Refused, "EvaluateRepeated %d, padded %s", n, where)
			}
			counts[fmt.Sprint("repeated admitted<n=", a.Admitted < n)]++
		case op < 85 && lease == nil:
			a, la, err := s.Reserve(ctx, now, sh, time.Minute)
			require.NoError(t, err, where)
			b, lb, err := s.Reserve(ctx, now, pw, time.Minute)
			require.NoError(t, err, where)
			require.Equal(t, b, a, "Reserve %s", where)
			require.Equal(t, lb.At, la.At, "Reserve %s", where)
			g, lg, err := s.Reserve(ctx, now, gp, time.Minute)
			require.NoError(t, err, where)
			samePrefix(t, a, g, "Reserve, padded %s", where)
			if a.Allowed {
				lease = &pending{sh: sh, pw: pw, gp: gp, shL: la, pwL: lb, gL: lg, reservedCost: cost}
			}
			counts[fmt.Sprint("reserve allowed=", a.Allowed)]++
		case lease != nil:
			// Refund (actual below the cost), charge (above) or neither.
			actual := rng.Int64N(2*lease.reservedCost + 3)
			a, err := s.Settle(ctx, now, lease.shL, lease.sh, actual)
			require.NoError(t, err, where)
			b, err := s.Settle(ctx, now, lease.pwL, lease.pw, actual)
			require.NoError(t, err, where)
			require.Equal(t, b, a, "Settle %d of %d %s", actual, lease.reservedCost, where)
			g, err := s.Settle(ctx, now, lease.gL, lease.gp, actual)
			require.NoError(t, err, where)
			require.Equal(t, a, g, "Settle %d of %d, padded %s", actual, lease.reservedCost, where)
			counts[fmt.Sprint("settle ", actual-lease.reservedCost < 0, actual-lease.reservedCost > 0)]++
			if before == "string" && lease.sh[0].Key == huge {
				counts["huge: settled on a compact log"]++
			}
			lease = nil
		}
	}
	t.Logf("%s: %v", name, counts)
	// The timelines must reach both answers, or the check proves little.
	require.NotZero(t, counts["evaluate allowed=true"], name)
	require.NotZero(t, counts["evaluate allowed=false"], name)
	require.NotZero(t, counts["reserve allowed=true"], name)
	return counts
}

// TestSharedLogWritesOneKeyPerPrincipal: the nine windows of docs/adr/005
// on the shared layout (ip, user, api key and tenant: burst and sustained
// on one key each; the tenant-global window alone) create 5 keys, the
// per-window layout 9; and a shared ZSET log holds each admitted unit
// once, not once per window.
func TestSharedLogWritesOneKeyPerPrincipal(t *testing.T) {
	pair := func(name string, limit int64) principal {
		return principal{name, []domain.Window{sliding(limit, 10*time.Second), sliding(limit/10, time.Second)}}
	}
	for _, tc := range []struct {
		name  string
		limit int64 // the sustained window's; every encoding's key count is the same
		typ   string
		log   redis.LogEncoding
	}{{"compact", 1000, "string", redis.LogCompact}, {"large limits, few units", 20_000, "string", redis.LogCompact}, {"zset", 20_000, "zset", redis.LogZSet}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, s := newDedicated(t, redis.Config{Log: tc.log})
			ps := []principal{pair("ip", tc.limit), pair("user", tc.limit), pair("key", tc.limit), pair("tenant", tc.limit),
				{"global", []domain.Window{sliding(tc.limit, 2*time.Second)}}}
			sh, pw := layouts("t", ps, 1)
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			for i := range 3 {
				r, err := s.Evaluate(t.Context(), now.Add(time.Duration(i)*time.Millisecond), sh)
				require.NoError(t, err)
				require.True(t, r.Allowed)
			}
			require.Equal(t, int64(5), do(t, srv.Addr(), "DBSIZE"), "keys on the shared layout")
			require.Equal(t, tc.typ, do(t, srv.Addr(), "TYPE", sh[0].Key))
			if tc.typ == "zset" {
				require.Equal(t, int64(3), do(t, srv.Addr(), "ZCARD", sh[0].Key), "units in one shared log")
			} else {
				require.Len(t, compactUnits(t, do(t, srv.Addr(), "GET", sh[0].Key).(string)), 3, "units in one shared log")
			}
			r, err := s.Evaluate(t.Context(), now, pw)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			require.Equal(t, int64(5+9), do(t, srv.Addr(), "DBSIZE"), "keys after the per-window layout's request")
		})
	}
}

// TestSharedLogEncodingFollowsItsContent: on the shared layout a log is
// written compact while it holds at most the compact bound of units,
// whatever its windows' limits, and as a ZSET beyond it
// (docs/adr/017-the-redis-script.md). A key holding a compact log of its
// one window stays compact when a window above the bound joins it; a
// log under windows above the bound is reserved, refunded at the
// lease's instant and charged while compact, crosses the bound in one
// EvaluateRepeated (a ZSET, every unit kept), stays a ZSET when its units
// have aged out (no flapping) and is compact again after a Reset. Every
// answer equals the per-window layout's.
func TestSharedLogEncodingFollowsItsContent(t *testing.T) {
	srv, s := newDedicated(t, redis.Config{Grace: -1})
	ctx := t.Context()
	key := "sh:{t}:user"
	small := sliding(5, time.Second)
	large := sliding(redis.CompactLogMaxLimit+10, 10*time.Second)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	typ := func(k string) string { return do(t, srv.Addr(), "TYPE", k).(string) }
	for _, ms := range []int{0, 100, 200} {
		r, err := s.Evaluate(ctx, at(ms), []domain.Limit{{Key: key, Window: small, Cost: 1}})
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	require.Equal(t, "string", typ(key))
	both := []domain.Limit{{Key: key, Window: small, Cost: 1}, {Key: key, Window: large, Cost: 1}}
	r, err := s.Evaluate(ctx, at(300), both)
	require.NoError(t, err)
	require.Equal(t, []domain.LimitStatus{
		{Allowed: true, Remaining: 1, ResetAfter: time.Second},
		{Allowed: true, Remaining: large.Limit - 4, ResetAfter: 10 * time.Second},
	}, r.Statuses())
	require.Equal(t, "string", typ(key), "4 units under a window above the bound")
	require.Len(t, compactUnits(t, do(t, srv.Addr(), "GET", key).(string)), 4)
	require.Greater(t, do(t, srv.Addr(), "PTTL", key).(int64), int64(9*time.Second/time.Millisecond), "the TTL of the longest window")

	// Both windows above the bound: shared (sh) against per-window (pw).
	wa, wb := sliding(3*redis.CompactLogMaxLimit, time.Second), sliding(4*redis.CompactLogMaxLimit, 2*time.Second)
	big := "sh:{t}:big"
	lim := func(cost int64) (sh, pw []domain.Limit) {
		return []domain.Limit{{Key: big, Window: wb, Cost: cost}, {Key: big, Window: wa, Cost: cost}},
			[]domain.Limit{{Key: "pw:{t}:big:0", Window: wb, Cost: cost}, {Key: "pw:{t}:big:1", Window: wa, Cost: cost}}
	}
	sh, pw := lim(1)
	repeated := func(ms, n int) {
		t.Helper()
		a, err := s.EvaluateRepeated(ctx, at(ms), sh, n)
		require.NoError(t, err)
		b, err := s.EvaluateRepeated(ctx, at(ms), pw, n)
		require.NoError(t, err)
		require.Equal(t, b, a, "EvaluateRepeated %d at %d ms", n, ms)
		require.Equal(t, n, a.Admitted)
	}
	evaluate := func(ms int) {
		t.Helper()
		a, err := s.Evaluate(ctx, at(ms), sh)
		require.NoError(t, err)
		b, err := s.Evaluate(ctx, at(ms), pw)
		require.NoError(t, err)
		require.Equal(t, b, a, "Evaluate at %d ms", ms)
	}
	repeated(1000, 1000)
	require.Equal(t, "string", typ(big), "1 000 units")
	rsh, rpw := lim(3)
	a, la, err := s.Reserve(ctx, at(1010), rsh, time.Minute)
	require.NoError(t, err)
	b, lb, err := s.Reserve(ctx, at(1010), rpw, time.Minute)
	require.NoError(t, err)
	require.Equal(t, b, a, "Reserve")
	require.True(t, a.Allowed)
	require.Equal(t, "string", typ(big), "1 003 units")
	for _, actual := range []int64{1} {
		x, err := s.Settle(ctx, at(1020), la, rsh, actual)
		require.NoError(t, err)
		y, err := s.Settle(ctx, at(1020), lb, rpw, actual)
		require.NoError(t, err)
		require.Equal(t, y, x, "Settle, a refund")
	}
	require.Len(t, compactUnits(t, do(t, srv.Addr(), "GET", big).(string)), 1001, "the refund at the lease's instant")
	a, la, err = s.Reserve(ctx, at(1030), rsh, time.Minute)
	require.NoError(t, err)
	b, lb, err = s.Reserve(ctx, at(1030), rpw, time.Minute)
	require.NoError(t, err)
	require.Equal(t, b, a, "Reserve")
	x, err := s.Settle(ctx, at(1040), la, rsh, 10)
	require.NoError(t, err)
	y, err := s.Settle(ctx, at(1040), lb, rpw, 10)
	require.NoError(t, err)
	require.Equal(t, y, x, "Settle, a charge")
	require.Equal(t, "string", typ(big), "1 011 units")
	repeated(1050, 200)
	require.Equal(t, "zset", typ(big), "past the bound in one call")
	require.Equal(t, int64(1211), do(t, srv.Addr(), "ZCARD", big), "every unit kept")
	for _, ms := range []int{1500, 2200, 2900} {
		p1, err := s.Peek(ctx, at(ms), sh)
		require.NoError(t, err)
		p2, err := s.Peek(ctx, at(ms), pw)
		require.NoError(t, err)
		require.Equal(t, p2, p1, "Peek at %d ms", ms)
		evaluate(ms)
	}
	evaluate(6000)
	require.Equal(t, "zset", typ(big), "a ZSET stays a ZSET")
	require.Equal(t, int64(1), do(t, srv.Addr(), "ZCARD", big), "its old units trimmed")
	require.NoError(t, s.Reset(ctx, big))
	for _, k := range []string{"pw:{t}:big:0", "pw:{t}:big:1"} {
		require.NoError(t, s.Reset(ctx, k))
	}
	evaluate(6100)
	require.Equal(t, "string", typ(big), "compact again after a Reset")
}

// TestSharedLogReservesOnACluster: a reservation whose principals'
// windows share keys, with a concurrency window beside them, on a
// cluster: the shared keys, the concurrency key and the lease record are
// one slot; the reservation takes one slot and records its units once in
// each shared log (a second reservation sees them in every window), and
// a full refund gives every window its whole quota back and the slot.
func TestSharedLogReservesOnACluster(t *testing.T) {
	s := newStore(t, topologies[1].cfg(t))
	tg := tag(t)
	sh, _ := layouts(tg, sharedPrincipals[:2], 2)
	sh = append(sh, domain.Limit{Key: fmt.Sprintf("sh:{%s}:conc", tg), Window: concurrency(1, time.Minute), Cost: 1})
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r, lease, err := s.Reserve(t.Context(), now, sh, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	for i, st := range r.Statuses()[:len(sh)-1] {
		require.Equal(t, sh[i].Window.Limit-2, st.Remaining, "limit %d: the reservation's 2 units, once", i)
	}
	r, _, err = s.Reserve(t.Context(), now, sh, time.Minute)
	require.NoError(t, err)
	require.False(t, r.Allowed, "the concurrency slot is held")
	require.Equal(t, len(sh)-1, r.Limiting)
	got, err := s.Settle(t.Context(), now.Add(time.Millisecond), lease, sh, 0)
	require.NoError(t, err)
	require.Equal(t, domain.Settled, got)
	r, err = s.Peek(t.Context(), now.Add(time.Millisecond), sh)
	require.NoError(t, err)
	for i, st := range r.Statuses() {
		require.Equal(t, sh[i].Window.Limit, st.Remaining, "limit %d after the refund", i)
	}
}

// TestScriptV5RefusesABadLayout: rate_limit_v5 itself refuses, before
// writing anything, a layout the store never sends: a key index out of
// order, a KEYS entry no limit names, limits sharing a key with different
// costs or with a window that is not a sliding log.
func TestScriptV5RefusesABadLayout(t *testing.T) {
	addr := redistest.Standalone(t)
	type lim struct {
		alg, key byte
		limit    uint32
		cost     uint32
	}
	call := func(keys []string, limits []lim) error {
		p := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixMicro()))
		p = append(p, 1) // consume, caller time
		p = binary.BigEndian.AppendUint32(p, 1000)
		p = binary.BigEndian.AppendUint32(p, redis.CompactLogMaxLimit)
		p = binary.BigEndian.AppendUint64(p, 0)
		p = binary.BigEndian.AppendUint32(p, 1)
		for _, l := range limits {
			p = append(p, l.alg+4*l.key)
			p = binary.BigEndian.AppendUint32(p, l.limit)
			p = binary.BigEndian.AppendUint64(p, uint64(time.Second/time.Microsecond))
			p = binary.BigEndian.AppendUint32(p, l.cost)
		}
		args := append([]string{"EVAL", lua.RateLimitV5, strconv.Itoa(len(keys))}, keys...)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := redistest.Do(ctx, addr, append(args, string(p), "n")...)
		return err
	}
	tg := tag(t)
	k1, k2, k3 := "bad:{"+tg+"}:1", "bad:{"+tg+"}:2", "bad:{"+tg+"}:3"
	for _, big := range []uint32{10, redis.CompactLogMaxLimit + 1} {
		for _, tc := range []struct {
			name   string
			keys   []string
			limits []lim
			want   string
		}{
			{"index out of order", []string{k1, k2}, []lim{{0, 2, big, 1}, {0, 1, big, 1}}, "keys are named 1 to u"},
			{"index out of order, a key shared", []string{k1, k2}, []lim{{0, 2, big, 1}, {0, 1, big, 1}, {0, 1, big + 1, 1}}, "keys are named 1 to u"},
			{"a key no limit names, a key shared", []string{k1, k2, k3}, []lim{{0, 1, big, 1}, {0, 1, big + 1, 1}, {0, 2, big, 1}, {0, 2, big + 1, 1}}, "every key must be named"},
			{"index zero", []string{k1}, []lim{{0, 0, big, 1}}, "keys are named 1 to u"},
			{"a key no limit names", []string{k1, k2}, []lim{{0, 1, big, 1}, {0, 1, big + 1, 1}}, "every key must be named"},
			{"costs differ", []string{k1}, []lim{{0, 1, big, 1}, {0, 1, big + 1, 2}}, "sliding logs of one cost"},
			{"a GCRA window shares", []string{k1}, []lim{{0, 1, big, 1}, {1, 1, big, 1}}, "sliding logs of one cost"},
		} {
			err := call(tc.keys, tc.limits)
			require.ErrorContains(t, err, tc.want, "%s, limit %d", tc.name, big)
			require.Equal(t, int64(0), do(t, addr, "EXISTS", k1, k2, k3), "%s: nothing written", tc.name)
		}
	}
}

package suite

import (
	"context"
	_ "embed" // for go:embed
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
)

// redisRate is go-redis/redis_rate v10: GCRA on one key per call, on a
// go-redis client: each request's first key of sets, with a rate and a
// burst of its window's limit per its period (1000 a second in most
// shapes, the hot key's 50, the hot tenant-global key's).
func redisRate(sets keyset) Contender {
	return Contender{Name: "redis_rate", Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
		all, err := sets(env)
		if err != nil {
			return nil, nil, err
		}
		rdb := goredis.NewClient(&goredis.Options{
			Addr:         env.Addr,
			PoolSize:     env.GoRedisPool,
			ReadTimeout:  callTimeout,
			WriteTimeout: callTimeout,
			PoolTimeout:  callTimeout,
		})
		lim := redis_rate.NewLimiter(rdb)
		keys := make([]string, len(all))
		rates := make([]redis_rate.Limit, len(all))
		for i, set := range all {
			w := set[0].Window
			keys[i], rates[i] = set[0].Key, redis_rate.Limit{Rate: int(w.Limit), Burst: int(w.Limit), Period: w.Period}
		}
		worker := func(wk, c int) load.Op {
			cur := NewCursor(wk, c, len(keys))
			return func(ctx context.Context) (load.Outcome, error) {
				i := cur.Next()
				res, err := lim.Allow(ctx, keys[i], rates[i])
				if err != nil {
					return 0, err
				}
				if res.Allowed == 0 {
					return load.Refused, nil
				}
				return load.Allowed, nil
			}
		}
		return worker, rdb.Close, nil
	}}
}

//go:embed plain.lua
var plainLua string

// plainScript is plain.lua on the very client sluice's store uses (built
// by redis.New with the same options), so that only the script differs.
func plainScript(sets keyset) Contender {
	return Contender{Name: "plain script", Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
		st, err := newStore(env)
		if err != nil {
			return nil, nil, err
		}
		client, script := st.Client(), rueidis.NewLuaScript(plainLua)
		all, err := sets(env)
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		keys := make([][]string, len(all))
		windows := make([][]string, len(all)) // limit, period (ms) per key
		for i, set := range all {
			for _, l := range set {
				keys[i] = append(keys[i], l.Key)
				windows[i] = append(windows[i], strconv.FormatInt(l.Window.Limit, 10), strconv.FormatInt(l.Window.Period.Milliseconds(), 10))
			}
		}
		worker := func(w, c int) load.Op {
			cur := NewCursor(w, c, len(all))
			prefix := "w" + strconv.Itoa(w) + ":"
			var calls int64
			args := make([]string, 0, 2+2*domain.MaxLimits)
			return func(ctx context.Context) (load.Outcome, error) {
				i := cur.Next()
				calls++
				args = append(args[:0], strconv.FormatInt(time.Now().UnixMilli(), 10), prefix+strconv.FormatInt(calls, 10))
				args = append(args, windows[i]...)
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				defer cancel()
				reply, err := script.Exec(cctx, client, keys[i], args).AsIntSlice()
				if err != nil {
					return 0, err
				}
				if reply[0] == 0 {
					return load.Refused, nil
				}
				return load.Allowed, nil
			}
		}
		return worker, st.Close, nil
	}}
}

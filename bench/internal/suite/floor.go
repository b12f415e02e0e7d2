package suite

import (
	"context"
	_ "embed" // for go:embed
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
)

//go:embed floor.lua
var floorLua string

// FloorName names the floor contender in tables.
const FloorName = "floor script"

// floorValue is what the floor writes in every string key: as long as a
// GCRA TAT in decimal. The floor does not follow a compact log as it
// grows: SET's cost grows little with a value's length (docs/BENCHMARKS.md,
// "Contenders": 0.20 µs for 16 bytes, 0.26 µs for 1.1 KB).
const floorValue = "1764590000000000"

// stringKey tells the keys sluice keeps as one string (GCRA, and sliding
// logs up to the compact bound, with redis.Config's default encoding) from
// those it keeps as a ZSET.
func stringKey(w domain.Window) bool {
	return w.Algorithm == domain.GCRA || w.Limit <= redis.CompactLogMaxLimit
}

// floorScript is floor.lua on the keys of sets, on the very client
// sluice's store uses (built by redis.New), so that only the script
// differs. With write false it reads only, as sluice's store does when it
// refuses (the hot-key shape).
func floorScript(sets keyset, write bool) Contender {
	return Contender{Name: FloorName, Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
		st, err := newStore(env)
		if err != nil {
			return nil, nil, err
		}
		client, script := st.Client(), rueidis.NewLuaScript(floorLua)
		all, err := sets(env)
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		keys := make([][]string, len(all))
		args := make([][]string, len(all)) // from ARGV[5]: TTL and period per key
		nStrings := make([]string, len(all))
		for i, set := range all {
			keys[i], args[i], nStrings[i] = floorArgs(set)
		}
		flag := "0"
		if write {
			flag = "1"
		}
		worker := func(w, c int) load.Op {
			cur := NewCursor(w, c, len(all))
			prefix := "w" + strconv.Itoa(w) + ":"
			var calls int64
			argv := make([]string, 0, 4+2*domain.MaxLimits)
			return func(ctx context.Context) (load.Outcome, error) {
				i := cur.Next()
				calls++
				argv = append(argv[:0], nStrings[i], flag, prefix+strconv.FormatInt(calls, 10), floorValue)
				argv = append(argv, args[i]...)
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				defer cancel()
				if err := script.Exec(cctx, client, keys[i], argv).Error(); err != nil {
					return 0, err
				}
				if !write {
					return load.Refused, nil
				}
				return load.Allowed, nil
			}
		}
		return worker, st.Close, nil
	}}
}

// floorArgs orders one request's keys for floor.lua, string keys first,
// and returns them, each key's TTL (its period, in whole milliseconds)
// and period (microseconds), and the number of string keys.
func floorArgs(set []domain.Limit) (keys, args []string, nStrings string) {
	s := 0
	for pass := range 2 {
		for _, l := range set {
			if stringKey(l.Window) != (pass == 0) {
				continue
			}
			if pass == 0 {
				s++
			}
			ms := (l.Window.PeriodMicros() + 999) / 1000
			keys = append(keys, l.Key)
			args = append(args, strconv.FormatInt(ms, 10), strconv.FormatInt(l.Window.PeriodMicros(), 10))
		}
	}
	return keys, args, strconv.Itoa(s)
}

package suite

import (
	"cmp"
	"context"
	_ "embed" // for go:embed
	"slices"
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
// those it keeps as a ZSET, by the windows naming the key: a log shared by
// several windows is compact only when the largest of their limits is
// within the bound (docs/adr/015).
func stringKey(windows ...domain.Window) bool {
	for _, w := range windows {
		if w.Algorithm != domain.GCRA && w.Limit > redis.CompactLogMaxLimit {
			return false
		}
	}
	return true
}

// floorScript is floor.lua on the keys of sets, on the very client
// sluice's store uses (built by redis.New), so that only the script
// differs. With write false it reads only, as sluice's store does when it
// refuses (the hot-key shape). Its keys follow the layout sets are in: a
// key several windows name is read and written once (floorArgs).
func floorScript(sets keyset, write bool) Contender {
	return floorContender(FloorName, sets, write)
}

// FloorPerWindowName names the floor of the per-window layout in tables:
// the floor script on one key per window, the plain script's layout and
// sluice's before docs/adr/015.
const FloorPerWindowName = "floor script, one key per window"

// floorPerWindow is the floor script on sets in the per-window layout
// (perWindow), beside the floor of the layout sluice runs: what sharing
// the logs saves in commands alone, and the floor the plain script's keys
// are read against.
func floorPerWindow(sets keyset) Contender {
	return floorContender(FloorPerWindowName, perWindowSets(sets), true)
}

// floorContender is floor.lua on the keys of sets, named name.
func floorContender(name string, sets keyset, write bool) Contender {
	return Contender{Name: name, Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
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
		args := make([][]string, len(all)) // from ARGV[5]: TTLs, then ZSET windows
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
			argv := make([]string, 0, 4+3*domain.MaxLimits)
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

// floorArgs orders one request's keys for floor.lua, each key once,
// string keys first, and returns them, the arguments from floor.lua's
// ARGV[5] (each key's TTL, its longest period in whole milliseconds; then
// for each ZSET key the number of windows naming it and their periods in
// microseconds, the longest first) and the number of string keys.
func floorArgs(set []domain.Limit) (keys, args []string, nStrings string) {
	type logKey struct {
		key     string
		windows []domain.Window
	}
	var all []logKey
	for i, l := range set {
		if _, shared := domain.SharesLog(set, i); !shared {
			all = append(all, logKey{key: l.Key, windows: []domain.Window{l.Window}})
			continue
		}
		k := slices.IndexFunc(all, func(k logKey) bool { return k.key == l.Key })
		all[k].windows = append(all[k].windows, l.Window)
	}
	for k := range all {
		slices.SortStableFunc(all[k].windows, func(a, b domain.Window) int { return cmp.Compare(b.Period, a.Period) })
	}
	var zsets []string
	s := 0
	for pass := range 2 { // string keys first, each pass in request order
		for _, k := range all {
			str := stringKey(k.windows...)
			if str != (pass == 0) {
				continue
			}
			keys = append(keys, k.key)
			args = append(args, strconv.FormatInt((k.windows[0].PeriodMicros()+999)/1000, 10))
			if str {
				s++
				continue
			}
			zsets = append(zsets, strconv.Itoa(len(k.windows)))
			for _, w := range k.windows {
				zsets = append(zsets, strconv.FormatInt(w.PeriodMicros(), 10))
			}
		}
	}
	return keys, append(args, zsets...), strconv.Itoa(s)
}

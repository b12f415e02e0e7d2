package suite

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newEnv(t *testing.T, clients int) *Env {
	t.Helper()
	pop, err := NewPopulation(clients)
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	demo, err := os.ReadFile(filepath.Join(root, DemoConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Population: pop, DemoConfig: demo}
}

func shape(t *testing.T, name string) Shape {
	t.Helper()
	for _, s := range Shapes() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no shape %q", name)
	return Shape{}
}

// TestShapesKeysAndWindows checks what each new shape claims: the large
// shape's windows are all ZSET windows and its big tenant's keys are the
// same for every client; the demo shape checks the demo's six windows,
// GCRA and sliding log, one of them a ZSET, on the keys its Keys field
// counts; every request's keys but its ip windows share one hash tag.
func TestShapesKeysAndWindows(t *testing.T) {
	env := newEnv(t, 3)
	for _, layout := range []struct {
		name string
		pick func(*Identity) []string
		// bigTenant is how many keys at the end of a request are the big
		// tenant's: its burst, sustained and tenant-global windows'.
		bigTenant int
	}{
		{"large, one key per window", func(id *Identity) []string { return id.BigTenant }, 3},
		{"large, shared logs", func(id *Identity) []string { return id.BigTenantShared }, 3},
	} {
		large, err := perClient(layout.pick, largeWindows()...)(env)
		if err != nil {
			t.Fatal(err)
		}
		for i, set := range large {
			for j, l := range set {
				if err := l.Window.Validate(); err != nil || stringKey(l.Window) {
					t.Errorf("%s, client %d, limit %d: window %+v (%v) is not a valid ZSET window", layout.name, i, j, l.Window, err)
				}
				if shared := j >= len(set)-layout.bigTenant; i > 0 && shared != (l.Key == large[0][j].Key) {
					t.Errorf("%s, client %d, limit %d %q: shared with client 0 %t, want %t", layout.name, i, j, l.Key, !shared, shared)
				}
			}
		}
	}
	demoShape := shape(t, "demo")
	demo, err := limiterLimits(func(env *Env) (app.Config, error) { return DemoConfig(env.DemoConfig) }, demoRequest)(env)
	if err != nil {
		t.Fatal(err)
	}
	for i, set := range demo {
		var gcra, zset int
		for _, l := range set {
			if l.Window.Algorithm == domain.GCRA {
				gcra++
			}
			if !stringKey(l.Window) {
				zset++
			}
		}
		if len(set) != demoShape.Windows || distinct(set) != demoShape.Keys || gcra != 1 || zset != 1 {
			t.Errorf("demo, client %d: %d windows on %d keys, %d GCRA, %d ZSET; want %d on %d, 1, 1: %+v",
				i, len(set), distinct(set), gcra, zset, demoShape.Windows, demoShape.Keys, set)
		}
	}
	large, err := perClient(func(id *Identity) []string { return id.BigTenantShared }, largeWindows()...)(env)
	if err != nil {
		t.Fatal(err)
	}
	for name, sets := range map[string][][]domain.Limit{"large": large, "demo": demo} {
		for i, set := range sets {
			// ip windows carry the ip's own tag (docs/adr/013); the
			// others share the principal's.
			var principal string
			for _, l := range set {
				if strings.Contains(l.Key, ":ip:") {
					continue
				}
				if principal == "" {
					principal = l.Key
				}
				if redis.Slot(l.Key) != redis.Slot(principal) {
					t.Errorf("%s, client %d: keys %q and %q in two slots", name, i, principal, l.Key)
				}
			}
		}
	}
}

// distinct counts the keys of a request.
func distinct(set []domain.Limit) int {
	seen := map[string]bool{}
	for _, l := range set {
		seen[l.Key] = true
	}
	return len(seen)
}

// TestSharedLayout checks the keys of the nine-window sliding-log shapes
// against docs/adr/015: 9 windows on 5 keys, a request the store contract
// accepts, each principal's burst and sustained windows on the key of the
// one with the longer period (the key the per-window layout gave that
// window, so that nothing is lost on an upgrade), the tenant-global window
// alone; and the per-window keys the plain script is given are perWindow
// of the shared ones, 9 distinct keys.
func TestSharedLayout(t *testing.T) {
	env := newEnv(t, 3)
	for _, tc := range []struct {
		shape             string
		shared, perWindow keyset
	}{
		{"log-9", perClient(func(id *Identity) []string { return id.NineShared }, NineWindows(burstLog, sustainedLog)...),
			perClient(func(id *Identity) []string { return id.Nine }, NineWindows(burstLog, sustainedLog)...)},
		{"log-9-large", perClient(func(id *Identity) []string { return id.BigTenantShared }, largeWindows()...),
			perClient(func(id *Identity) []string { return id.BigTenant }, largeWindows()...)},
	} {
		sh := shape(t, tc.shape)
		if sh.Keys != 5 || sh.Windows != 9 {
			t.Errorf("%s: %d windows on %d keys, want 9 on 5", tc.shape, sh.Windows, sh.Keys)
		}
		shared, err := tc.shared(env)
		if err != nil {
			t.Fatal(err)
		}
		per, err := tc.perWindow(env)
		if err != nil {
			t.Fatal(err)
		}
		for i := range shared {
			s, p := shared[i], per[i]
			if err := domain.ValidateLimits(s); err != nil {
				t.Errorf("%s, client %d: the shared request is refused: %v", tc.shape, i, err)
			}
			if len(s) != sh.Windows || distinct(s) != sh.Keys || distinct(p) != sh.Windows {
				t.Errorf("%s, client %d: shared %d windows on %d keys, per window %d keys; want %d on %d, %d",
					tc.shape, i, len(s), distinct(s), distinct(p), sh.Windows, sh.Keys, sh.Windows)
			}
			if got := perWindow(s); !slices.Equal(got, p) {
				t.Errorf("%s, client %d: perWindow of the shared request\n%+v\nwant the per-window request\n%+v", tc.shape, i, got, p)
			}
			for j := range s {
				// The window naming s[j]'s log: the longest period among
				// those on its key, the first on a tie.
				name := j
				for k := range s {
					if s[k].Key == s[j].Key && s[k].Window.Period > s[name].Window.Period {
						name = k
					}
				}
				if s[j].Key != p[name].Key {
					t.Errorf("%s, client %d, window %d: key %q, want %q, the per-window key of the longest window on its log", tc.shape, i, j, s[j].Key, p[name].Key)
				}
			}
			if last := len(s) - 1; !strings.Contains(s[last].Key, ":"+domain.GlobalRouteKey+":") || distinct(s[:last]) != sh.Keys-1 {
				t.Errorf("%s, client %d: the tenant-global window %q does not have a key of its own", tc.shape, i, s[last].Key)
			}
		}
	}
}

func TestPerWindowLeavesUnsharedKeys(t *testing.T) {
	w := func(name string, period time.Duration) domain.Window {
		return domain.Window{Name: name, Limit: 10, Period: period}
	}
	set := []domain.Limit{
		{Key: "rl:{t}:user:u:p:long", Window: w("short", time.Second), Cost: 1},
		{Key: "rl:{t}:ip:i:p:burst", Window: w("burst", time.Second), Cost: 1},
		{Key: "rl:{t}:user:u:p:long", Window: w("long", time.Minute), Cost: 1},
		{Key: "rl:{t}", Window: w("burst", time.Second), Cost: 1},
	}
	want := slices.Clone(set)
	want[0].Key = "rl:{t}:user:u:p:short"
	if got := perWindow(set); !slices.Equal(got, want) {
		t.Errorf("perWindow\n%+v\nwant\n%+v", got, want)
	}
	if set[0].Key != "rl:{t}:user:u:p:long" {
		t.Error("perWindow changed the request it was given")
	}
}

func TestFloorArgs(t *testing.T) {
	gcra := domain.Window{Name: "g", Limit: 10, Period: 1500 * time.Microsecond, Algorithm: domain.GCRA}
	compact := domain.Window{Name: "c", Limit: redis.CompactLogMaxLimit, Period: time.Second}
	compactLong := domain.Window{Name: "cl", Limit: 10, Period: 3 * time.Second}
	zset := domain.Window{Name: "z", Limit: redis.CompactLogMaxLimit + 1, Period: time.Minute}
	zsetShort := domain.Window{Name: "zs", Limit: redis.CompactLogMaxLimit + 1, Period: 2 * time.Second}
	for _, tc := range []struct {
		name     string
		set      []domain.Limit
		keys     []string
		nStrings string
		args     []string
	}{
		{"one key per window, string keys first",
			[]domain.Limit{{Key: "z1", Window: zset}, {Key: "g", Window: gcra}, {Key: "z2", Window: zset}, {Key: "c", Window: compact}},
			[]string{"g", "c", "z1", "z2"}, "2",
			[]string{"2", "1000", "60000", "60000", "1", "60000000", "1", "60000000"}},
		{"a compact log shared by two windows: one key, the longest period's TTL",
			[]domain.Limit{{Key: "s", Window: compact}, {Key: "g", Window: gcra}, {Key: "s", Window: compactLong}},
			[]string{"s", "g"}, "2",
			[]string{"3000", "2"}},
		{"a log with one window above the compact bound is a ZSET",
			[]domain.Limit{{Key: "s", Window: compact}, {Key: "s", Window: zset}, {Key: "c", Window: compact}},
			[]string{"c", "s"}, "1",
			[]string{"1000", "60000", "2", "60000000", "1000000"}},
		{"ZSET keys: the windows of each, the longest first",
			[]domain.Limit{{Key: "a", Window: zsetShort}, {Key: "b", Window: zsetShort}, {Key: "a", Window: zset}, {Key: "b", Window: compact}, {Key: "a", Window: compactLong}},
			[]string{"a", "b"}, "0",
			[]string{"60000", "2000", "3", "60000000", "3000000", "2000000", "2", "2000000", "1000000"}},
	} {
		keys, args, n := floorArgs(tc.set)
		if !slices.Equal(keys, tc.keys) || n != tc.nStrings || !slices.Equal(args, tc.args) {
			t.Errorf("%s: keys %q, %s string keys, args %q; want %q, %s, %q", tc.name, keys, n, args, tc.keys, tc.nStrings, tc.args)
		}
	}
}

// TestFloorScriptWritesTheLayout runs the floor once on client 1's keys
// of the demo (the Limiter's layout) and of the shared nine-window shapes
// and reads what it left: each key once, a string or a ZSET holding the
// call's member as the windows naming it say, with the TTL of the longest
// of them (above a shorter window's period where a key is shared); with
// write off, nothing.
func TestFloorScriptWritesTheLayout(t *testing.T) {
	env := newEnv(t, 2)
	env.Addr = redistest.NewServer(t).Addr()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		sets keyset
	}{
		{"demo", limiterLimits(func(env *Env) (app.Config, error) { return DemoConfig(env.DemoConfig) }, demoRequest)},
		{"log-9", perClient(func(id *Identity) []string { return id.NineShared }, NineWindows(burstLog, sustainedLog)...)},
		{"log-9-large", perClient(func(id *Identity) []string { return id.BigTenantShared }, largeWindows()...)},
	} {
		all, err := tc.sets(env)
		if err != nil {
			t.Fatal(err)
		}
		set := all[1]
		for _, write := range []bool{false, true} {
			if _, err := redistest.Do(ctx, env.Addr, "FLUSHALL", "SYNC"); err != nil {
				t.Fatal(err)
			}
			runOnce(t, env, floorScript(tc.sets, write))
			for j, l := range set {
				if _, shared := domain.SharesLog(set, j); shared {
					continue
				}
				var windows []domain.Window
				shortest, longest := l.Window.Period, l.Window.Period
				for _, o := range set {
					if o.Key == l.Key {
						windows = append(windows, o.Window)
						shortest, longest = min(shortest, o.Window.Period), max(longest, o.Window.Period)
					}
				}
				typ, err := redistest.Do(ctx, env.Addr, "TYPE", l.Key)
				if err != nil {
					t.Fatal(err)
				}
				want := "none"
				if write && stringKey(windows...) {
					want = "string"
				} else if write {
					want = "zset"
				}
				if typ != want {
					t.Errorf("%s, write %t: key %q of windows %+v is a %v, want a %s", tc.name, write, l.Key, windows, typ, want)
				}
				if !write {
					continue
				}
				ttl, err := redistest.Do(ctx, env.Addr, "PTTL", l.Key)
				n, _ := ttl.(int64)
				if err != nil || n <= 0 || n > longest.Milliseconds() || len(windows) > 1 && n <= shortest.Milliseconds() {
					t.Errorf("%s: key %q of windows %+v: PTTL %v (%v), want within the longest period %s", tc.name, l.Key, windows, ttl, err, longest)
				}
				if typ == "zset" {
					n, err := redistest.Do(ctx, env.Addr, "ZCARD", l.Key)
					if err != nil || n != int64(1) {
						t.Errorf("%s: key %q: ZCARD %v (%v), want the call's 1 member", tc.name, l.Key, n, err)
					}
				}
			}
		}
		if tc.name == "demo" && len(set) != 6 {
			t.Errorf("the demo's search decided %d windows, want 6", len(set))
		}
	}
}

// runOnce opens ct at concurrency 1 and sends one request, client 1's
// (worker 1 of 2 visits client 1 first).
func runOnce(t *testing.T, env *Env, ct Contender) {
	t.Helper()
	ctx := context.Background()
	worker, closeClient, err := ct.Open(ctx, env, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = worker(1, 2)(ctx)
	if cerr := closeClient(); err != nil || cerr != nil {
		t.Fatalf("%s: %v, %v", ct.Name, err, cerr)
	}
}

// commandStats returns INFO commandstats' calls per command.
func commandStats(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	reply, err := redistest.Do(context.Background(), addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(fmt.Sprint(reply), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestShapesSendTheirLayout sends one admitted request of client 1 with
// each bare contender of the nine-window shapes and reads what Redis ran:
// the floor script's commands, one each per key of the layout it runs
// (and one ZCOUNT per window a ZSET log serves beyond its longest), and
// the keys each contender wrote: sluice's store and the floor on 5 keys
// in the sliding-log shapes, the plain script and the per-window floor
// on 9.
func TestShapesSendTheirLayout(t *testing.T) {
	env := newEnv(t, 2)
	env.Addr = redistest.NewServer(t).Addr()
	ctx := context.Background()
	type cmds map[string]int64
	for _, tc := range []struct {
		shape, contender string
		keys             int64
		// commands is what the floor runs, but for EVALSHA/EVAL and
		// SCRIPT; nil for a contender whose commands are its own.
		commands cmds
	}{
		{"log-9", "sluice store", 5, nil},
		{"log-9", plainScript(nil).Name, 9, nil},
		{"log-9", FloorName, 5, cmds{"time": 1, "mget": 1, "set": 5}},
		{"log-9", FloorPerWindowName, 9, cmds{"time": 1, "mget": 1, "set": 9}},
		{"log-9-large", "sluice store", 5, nil},
		{"log-9-large", plainScript(nil).Name, 9, nil},
		{"log-9-large", FloorName, 5, cmds{"time": 1, "zremrangebyscore": 5, "zcard": 5, "zcount": 4, "zadd": 5, "pexpire": 5}},
		{"log-9-large", FloorPerWindowName, 9, cmds{"time": 1, "zremrangebyscore": 9, "zcard": 9, "zadd": 9, "pexpire": 9}},
		{"gcra-9", "sluice store", 9, nil},
		{"gcra-9", FloorName, 9, cmds{"time": 1, "mget": 1, "set": 9}},
	} {
		var ct *Contender
		for _, c := range shape(t, tc.shape).Contenders {
			if c.Name == tc.contender {
				ct = &c
			}
		}
		if ct == nil {
			t.Fatalf("%s: no contender %q", tc.shape, tc.contender)
		}
		for _, cmd := range [][]string{{"FLUSHALL", "SYNC"}, {"SCRIPT", "FLUSH", "SYNC"}} {
			if _, err := redistest.Do(ctx, env.Addr, cmd...); err != nil {
				t.Fatal(err)
			}
		}
		// The script is loaded (or found) outside the measured call.
		runOnce(t, env, *ct)
		if _, err := redistest.Do(ctx, env.Addr, "FLUSHALL", "SYNC"); err != nil {
			t.Fatal(err)
		}
		if _, err := redistest.Do(ctx, env.Addr, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		runOnce(t, env, *ct)
		stats := commandStats(t, env.Addr)
		n, err := redistest.Do(ctx, env.Addr, "DBSIZE")
		if err != nil || n != tc.keys {
			t.Errorf("%s, %s: %v keys (%v), want %d", tc.shape, tc.contender, n, err, tc.keys)
		}
		if tc.commands == nil {
			continue
		}
		// Left out: the script call itself, and the client's and the
		// test's own connection and administration commands (HELLO,
		// PING, CLUSTER SLOTS, CONFIG RESETSTAT...).
		got := cmds{}
		for name, calls := range stats {
			switch {
			case name == "evalsha", name == "eval", name == "hello", name == "ping", strings.Contains(name, "|"):
			default:
				got[name] = calls
			}
		}
		if !maps.Equal(got, tc.commands) {
			t.Errorf("%s, %s: Redis ran %v, want %v", tc.shape, tc.contender, got, tc.commands)
		}
	}
}

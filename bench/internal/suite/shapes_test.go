package suite

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
// shape's keys are all ZSETs and its big tenant's three windows are the
// same keys for every client; the demo shape checks the demo's six
// windows, GCRA and sliding log, one of them a ZSET; every request's keys
// but its ip windows share one hash tag.
func TestShapesKeysAndWindows(t *testing.T) {
	env := newEnv(t, 3)
	large, err := perClient(func(id *Identity) []string { return id.BigTenant }, largeWindows()...)(env)
	if err != nil {
		t.Fatal(err)
	}
	for i, set := range large {
		for j, l := range set {
			if err := l.Window.Validate(); err != nil || stringKey(l.Window) {
				t.Errorf("large, client %d, key %d: window %+v (%v) is not a valid ZSET window", i, j, l.Window, err)
			}
			// The big tenant's burst, sustained and tenant-global keys
			// (the last three) are every client's.
			if shared := j >= 6; i > 0 && shared != (l.Key == large[0][j].Key) {
				t.Errorf("large, client %d, key %d %q: shared with client 0 %t, want %t", i, j, l.Key, !shared, shared)
			}
		}
	}
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
		if len(set) != shape(t, "demo").Keys || gcra != 1 || zset != 1 {
			t.Errorf("demo, client %d: %d keys, %d GCRA, %d ZSET; want %d, 1, 1: %+v", i, len(set), gcra, zset, shape(t, "demo").Keys, set)
		}
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

func TestFloorArgsPutStringKeysFirst(t *testing.T) {
	gcra := domain.Window{Name: "g", Limit: 10, Period: 1500 * time.Microsecond, Algorithm: domain.GCRA}
	compact := domain.Window{Name: "c", Limit: redis.CompactLogMaxLimit, Period: time.Second}
	zset := domain.Window{Name: "z", Limit: redis.CompactLogMaxLimit + 1, Period: time.Minute}
	keys, args, n := floorArgs([]domain.Limit{
		{Key: "z1", Window: zset}, {Key: "g", Window: gcra}, {Key: "z2", Window: zset}, {Key: "c", Window: compact},
	})
	if want := []string{"g", "c", "z1", "z2"}; !slices.Equal(keys, want) || n != "2" {
		t.Errorf("keys %q, %s string keys; want %q, 2", keys, n, want)
	}
	if want := []string{"2", "1500", "1000", "1000000", "60000", "60000000", "60000", "60000000"}; !slices.Equal(args, want) {
		t.Errorf("TTL and period per key %q, want %q", args, want)
	}
}

// TestFloorScriptWritesTheLayout runs the floor once on the demo's keys
// and reads what it left: the string keys set with a TTL, the ZSET key
// holding the call's member with a TTL; with write off, nothing.
func TestFloorScriptWritesTheLayout(t *testing.T) {
	env := newEnv(t, 2)
	env.Addr = redistest.Standalone(t)
	ctx := context.Background()
	if _, err := redistest.Do(ctx, env.Addr, "FLUSHALL", "SYNC"); err != nil {
		t.Fatal(err)
	}
	sets := limiterLimits(func(env *Env) (app.Config, error) { return DemoConfig(env.DemoConfig) }, demoRequest)
	all, err := sets(env)
	if err != nil {
		t.Fatal(err)
	}
	for _, write := range []bool{false, true} {
		worker, closeClient, err := floorScript(sets, write).Open(ctx, env, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Worker 1 of 2 visits client 1 first.
		_, err = worker(1, 2)(ctx)
		if cerr := closeClient(); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
		for _, l := range all[1] {
			typ, err := redistest.Do(ctx, env.Addr, "TYPE", l.Key)
			if err != nil {
				t.Fatal(err)
			}
			want := "none"
			if write && stringKey(l.Window) {
				want = "string"
			} else if write {
				want = "zset"
			}
			if typ != want {
				t.Errorf("write %t: key %q of window %+v is a %v, want a %s", write, l.Key, l.Window, typ, want)
			}
			if !write {
				continue
			}
			ttl, err := redistest.Do(ctx, env.Addr, "PTTL", l.Key)
			if n, _ := ttl.(int64); err != nil || n <= 0 || n > l.Window.Period.Milliseconds() {
				t.Errorf("key %q: PTTL %v (%v), want within its period %s", l.Key, ttl, err, l.Window.Period)
			}
			if typ == "zset" {
				n, err := redistest.Do(ctx, env.Addr, "ZCARD", l.Key)
				if err != nil || n != int64(1) {
					t.Errorf("key %q: ZCARD %v (%v), want the call's 1 member", l.Key, n, err)
				}
			}
		}
	}
	if len(all[1]) != 6 {
		t.Errorf("the demo's search decided %d windows, want 6", len(all[1]))
	}
}

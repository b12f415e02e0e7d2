package boot

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports/recordertest"
)

func TestMain(m *testing.M) { redistest.MainLeakFree(m) }

// TestWiringOnRedisIsComplete is issue 27 item 3 for the repository's
// binaries: the stores and Limiter that the demo and sluice-rls build
// get the Redis store's capabilities without naming them. The memory
// budget is checked against Redis (no "no memory check wired" warning),
// and the store is probed per node (the node is named by its address).
func TestWiringOnRedisIsComplete(t *testing.T) {
	url := redistest.StandaloneURL(t)
	cfg, err := app.ParseConfig([]byte("redis_memory_budget_mb: 16\n"), func(k string) (string, bool) {
		switch k {
		case app.EnvHMACSecret:
			return secret, true
		case app.EnvRedisURL:
			return url, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	primary, fallback, _, closeAll, err := Stores(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	var out bytes.Buffer
	lim, err := Limiter(cfg, primary, fallback, recordertest.Discard{}, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for _, w := range lim.Warnings() {
		if bytes.Contains([]byte(w), []byte("no memory check wired")) {
			t.Errorf("boot warning %q: the Redis store's memory check was not used", w)
		}
	}
	if _, err := lim.ProbeOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	states := lim.NodeStates()
	if _, unnamed := states[""]; unnamed || len(states) != 1 {
		t.Errorf("node states %v: want the one Redis node, named by its address", states)
	}
}

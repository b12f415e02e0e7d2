package httpload

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/suite"
)

// TestConfigIsTheDemosWithNineWindowsOnSearch parses the configuration the
// load test gives the demo as the demo does: the search profile checks
// the nine windows, every other profile and setting is the demo's own.
func TestConfigIsTheDemosWithNineWindowsOnSearch(t *testing.T) {
	root, err := suite.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	path, err := writeConfig(root, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	demo, err := os.ReadFile(root + "/" + suite.DemoConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(data []byte) app.Config {
		cfg, err := suite.DemoConfig(data)
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		return cfg
	}
	cfg, orig := parse(got), parse(demo)
	if len(cfg.Profiles) != len(orig.Profiles) || len(cfg.Plans) != len(orig.Plans) || cfg.Degraded != orig.Degraded || cfg.BreakerFailures != orig.BreakerFailures {
		t.Errorf("the configuration lost some of the demo's: %d profiles, %d plans, %+v", len(cfg.Profiles), len(cfg.Plans), cfg.Degraded)
	}
	for i, p := range cfg.Profiles {
		w := p.Windows
		n := len(w.IP) + len(w.User) + len(w.APIKey) + len(w.Tenant) + len(w.TenantGlobal)
		switch {
		case p.Name == searchProfile && n != 9:
			t.Errorf("search checks %d windows, want 9", n)
		case p.Name != searchProfile && !reflect.DeepEqual(p, orig.Profiles[i]):
			t.Errorf("profile %s changed:\n%+v\nwant\n%+v", p.Name, p, orig.Profiles[i])
		}
	}
}

func TestDecisionsReadsTheDemosCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP sluice_decisions_total Decisions.
# TYPE sluice_decisions_total counter
sluice_decisions_total{cause="none",decision_state="ALLOWED",instance_id="demo-1",route_family="read",route_profile="search"} 120
sluice_decisions_total{cause="limit_exceeded",decision_state="THROTTLED",instance_id="demo-1",route_family="read",route_profile="search"} 3
sluice_decisions_total{cause="store_timeout",decision_state="BYPASS_DEGRADED",instance_id="demo-1",route_family="read",route_profile="search"} 2
sluice_decisions_total{cause="none",decision_state="ALLOWED",instance_id="demo-1",route_family="auth",route_profile="login"} 1e+06
sluice_store_latency_seconds_count 9
`)
	}))
	defer srv.Close()
	got, err := decisions(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := map[decisionKey]int64{
		{"ALLOWED", "none"}: 1_000_120, {"THROTTLED", "limit_exceeded"}: 3, {"BYPASS_DEGRADED", "store_timeout"}: 2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decisions = %v, want %v", got, want)
	}
	for k := range want {
		if shared := k.state != "BYPASS_DEGRADED"; k.shared() != shared {
			t.Errorf("%+v: shared %t, want %t", k, k.shared(), shared)
		}
	}
}

func TestWindowsCountsThePolicies(t *testing.T) {
	for policy, want := range map[string]int{
		"":                      0,
		`"ip-burst";q=1000;w=1`: 1,
		`"ip-burst";q=1000;w=1, "ip-sustained";q=1000;w=10, "tenant_global-sustained";q=1000;w=10`: 3,
	} {
		if got := windows(policy); got != want {
			t.Errorf("windows(%q) = %d, want %d", policy, got, want)
		}
	}
}

func TestConfigTakesAnotherStoreDeadline(t *testing.T) {
	root, err := suite.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	path, err := writeConfig(root, t.TempDir(), 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := app.ParseConfig(data, func(k string) (string, bool) { return suite.Secret, k == app.EnvHMACSecret })
	if err != nil || cfg.StoreTimeout != 1500*time.Millisecond {
		t.Errorf("store_timeout %s (%v), want 1.5s", cfg.StoreTimeout, err)
	}
}

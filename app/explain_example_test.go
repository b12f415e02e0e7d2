package app_test

import (
	"fmt"
	"net/netip"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// ExampleLimiter_Explain shows what a request counts, without a store:
// its profile and each window with its key, pseudonymised (what `sluice
// explain` prints). The user's two sliding logs
// share one key.
func ExampleLimiter_Explain() {
	cfg, err := app.ParseConfig([]byte(`
profiles:
  - name: search
    family: read
    routes: ["GET /api/v1/search"]
    windows:
      user: [{name: burst, limit: 5, period: 1s}, {name: sustained, limit: 100, period: 1m}]
`), func(k string) (string, bool) {
		if k == app.EnvHMACSecret {
			return exampleSecret, true
		}
		return "", false
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	primary, fallback := newExampleStores()
	defer primary.Close()
	defer fallback.Close()
	l, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	x, err := l.Explain(app.Request{Route: "GET /api/v1/search", ClientIP: netip.MustParseAddr("203.0.113.7"), User: "alice@example.org"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(x.Profile, x.Family)
	for _, w := range x.Windows {
		fmt.Println(w.Dimension, w.Window.Name, w.Window.Limit, w.Key)
	}
	// Output:
	// search read
	// user burst 5 rl:{d2757a32236b0af64c908e8e2650a6d6}:user:d2757a32236b0af64c908e8e2650a6d6:search:sustained
	// user sustained 100 rl:{d2757a32236b0af64c908e8e2650a6d6}:user:d2757a32236b0af64c908e8e2650a6d6:search:sustained
}

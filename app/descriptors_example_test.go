package app_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// ExampleLimiter_EvaluateWindows decides two windows all or nothing: the
// user's refusal leaves the tenant's count untouched.
func ExampleLimiter_EvaluateWindows() {
	primary, fallback := newExampleStores()
	defer primary.Close()
	defer fallback.Close()
	lim, err := app.New(app.Config{HMACSecret: exampleSecret},
		app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	req := app.WindowsRequest{
		RouteKey: "edge", Scope: "acme", Action: domain.ActionDeny,
		Windows: []app.CountedWindow{
			{Subject: "tenant=acme", Window: domain.Window{Name: "tenant", Limit: 100, Period: time.Minute}, Cost: 1},
			{Subject: "user=alice", Window: domain.Window{Name: "user", Limit: 1, Period: time.Minute}, Cost: 1},
		},
	}
	for range 2 {
		d, _ := lim.EvaluateWindows(context.Background(), req)
		w := d.Windows.All()
		fmt.Println(d.State, "tenant", w[0].Remaining, "user", w[1].Remaining)
	}
	// Output:
	// ALLOWED tenant 99 user 0
	// THROTTLED tenant 99 user 0
}

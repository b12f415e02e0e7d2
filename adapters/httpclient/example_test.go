package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/adapters/httpclient"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// A client whose calls to a partner share one quota of 2 a minute: the
// first two go at once; the third would have to wait about a minute, past
// its context's deadline, so it fails at once without being sent. A
// service builds the Limiter from its YAML file, on Redis, so that every
// replica shares the quota.
func Example() {
	primary, _ := local.New(local.Config{})
	fallback, _ := local.New(local.Config{})
	defer primary.Close()
	defer fallback.Close()
	lim, err := app.New(app.Config{
		HMACSecret: app.Secret(strings.Repeat("5e", 32)), // example only: never hard-code a secret
		Profiles: []app.ProfileConfig{{
			Name: "partner", Family: domain.FamilyCostly, Routes: []string{"/outbound/partner"},
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "quota", Limit: 2, Period: time.Minute}}},
		}},
	}, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	defer partner.Close()

	tr, err := httpclient.New(lim, httpclient.Config{Route: "/outbound/partner"})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
		resp, err := client.Do(req)
		cancel()
		var we *httpclient.WaitError
		switch {
		case errors.As(err, &we):
			fmt.Println("not sent:", we.Decision.State, errors.Is(err, context.DeadlineExceeded))
		case err != nil:
			fmt.Println("error:", err)
		default:
			resp.Body.Close()
			fmt.Println("sent:", resp.StatusCode)
		}
	}
	// Output:
	// sent: 200
	// sent: 200
	// not sent: THROTTLED true
}

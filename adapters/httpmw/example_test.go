package httpmw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/adapters/httpmw"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// exampleLimiter builds a Limiter on the in-process store: one profile,
// "users", limiting GET /api/v1/users/{id} to 2 requests a minute per
// client address. A service builds it from its YAML file (app.LoadConfig)
// and RATE_LIMIT_HMAC_SECRET, on Redis (adapters/redis).
func exampleLimiter() (lim *app.Limiter, stop func()) {
	primary, _ := local.New(local.Config{})
	fallback, _ := local.New(local.Config{})
	stop = func() {
		lim.Close()
		primary.Close()
		fallback.Close()
	}
	var err error
	lim, err = app.New(app.Config{
		HMACSecret: app.Secret(strings.Repeat("5e", 32)), // example only: never hard-code a secret
		Profiles: []app.ProfileConfig{{
			Name: "users", Family: domain.FamilyRead, Routes: []string{"GET /api/v1/users/{id}"},
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "burst", Limit: 2, Period: time.Minute}}},
		}},
	}, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	return lim, stop
}

// get requests url and prints the status and the RateLimit field.
func get(url string) {
	resp, err := http.Get(url)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
}

// The README's ServeMux example: the middleware wraps the whole mux, the
// boot check makes sure every pattern has a profile.
func Example() {
	lim, stop := exampleLimiter()
	defer stop()

	mux := httpmw.NewServeMux()
	mux.HandleFunc("GET /api/v1/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "user", r.PathValue("id"))
	})
	if err := lim.CheckRoutes(mux.Patterns()); err != nil {
		panic(err) // a route without a profile: refuse to boot
	}
	limit, err := httpmw.New(lim, httpmw.Config{Route: mux.Route()})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(limit(mux)) // http.ListenAndServe(addr, limit(mux))
	defer srv.Close()

	for range 3 {
		get(srv.URL + "/api/v1/users/42")
	}
	get(srv.URL + "/api/v1/nowhere") // no route: invalid context
	// Output:
	// 200 "ip-burst";r=1;t=60
	// 200 "ip-burst";r=0;t=60
	// 429 "ip-burst";r=0;t=60
	// 400
}

// Another router: chi. Its route pattern is known once chi has routed the
// request, so the middleware goes on the route (With), and a RouteFunc
// reads the pattern from chi's routing context. chi.Walk lists the routes
// for the boot check.
func Example_chi() {
	lim, stop := exampleLimiter()
	defer stop()

	limit, err := httpmw.New(lim, httpmw.Config{
		Route: func(r *http.Request) string {
			return r.Method + " " + chi.RouteContext(r.Context()).RoutePattern()
		},
	})
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.With(limit).Get("/api/v1/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "user", chi.URLParam(r, "id"))
	})

	var routes []string
	_ = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, method+" "+route)
		return nil
	})
	if err := lim.CheckRoutes(routes); err != nil {
		panic(err)
	}
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 3 {
		get(srv.URL + "/api/v1/users/7")
	}
	// Output:
	// 200 "ip-burst";r=1;t=60
	// 200 "ip-burst";r=0;t=60
	// 429 "ip-burst";r=0;t=60
}

// A route charged by what it served: WithCost makes the middleware
// reserve the profile's cost (100 tokens of the address's 1000 an hour)
// and settle, once the handler has returned, at the tokens the handler
// reports; the next decision sees what was really spent.
func ExampleWithCost() {
	primary, _ := local.New(local.Config{})
	fallback, _ := local.New(local.Config{})
	defer primary.Close()
	defer fallback.Close()
	lim, err := app.New(app.Config{
		HMACSecret: app.Secret(strings.Repeat("5e", 32)), // example only: never hard-code a secret
		Profiles: []app.ProfileConfig{{
			Name: "completions", Family: domain.FamilyCostly, Routes: []string{"POST /api/v1/complete"}, Cost: 100,
			Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "tokens", Limit: 1000, Period: time.Hour}}},
		}},
	}, app.Deps{Store: primary, Fallback: fallback, Recorder: recordertest.Discard{}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	mux := httpmw.NewServeMux()
	mux.HandleFunc("POST /api/v1/complete", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Tokens-Used", "37") // what this completion cost
		fmt.Fprintln(w, "done")
	})
	limit, err := httpmw.New(lim, httpmw.Config{Route: mux.Route()},
		httpmw.WithCost(func(_ *http.Request, _ int, h http.Header) (int64, bool) {
			n, err := strconv.ParseInt(h.Get("X-Tokens-Used"), 10, 64)
			return n, err == nil
		}))
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(limit(mux))
	defer srv.Close()

	for range 3 {
		resp, err := http.Post(srv.URL+"/api/v1/complete", "text/plain", nil)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "ip-tokens";r=900;t=3600
	// 200 "ip-tokens";r=863;t=3600
	// 200 "ip-tokens";r=826;t=3600
}

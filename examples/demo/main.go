// Command demo runs sluice's decision pipeline on the embedded local store
// and walks through what it does: per-user bursts, a tenant quota shared by
// its users (all or nothing), a login brute force per ip, the ADR-002
// façades, and a store outage handled by the degraded matrix.
//
//	RATE_LIMIT_HMAC_SECRET=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n') go run ./examples/demo
//
// `make demo` does exactly that.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

//go:embed sluice.yaml
var defaultConfig []byte

func main() {
	configPath := flag.String("config", "", "YAML configuration (default: the embedded examples/demo/sluice.yaml)")
	flag.Parse()
	if err := run(os.Stdout, *configPath); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, configPath string) error {
	var cfg app.Config
	var err error
	if configPath != "" {
		cfg, err = app.LoadConfig(configPath, nil)
	} else {
		cfg, err = app.ParseConfig(defaultConfig, nil)
	}
	if err != nil {
		if errors.Is(err, app.ErrSecretMissing) {
			return fmt.Errorf("%w\n(set RATE_LIMIT_HMAC_SECRET to 64 hex characters, or run `make demo`)", err)
		}
		return err
	}

	// The primary store would be Redis in production; here it is a local
	// store behind a switch that the outage scene turns off.
	primaryStore, err := local.New(local.Config{})
	if err != nil {
		return err
	}
	defer primaryStore.Close()
	fallback, err := local.New(local.Config{})
	if err != nil {
		return err
	}
	defer fallback.Close()
	primary := &switchable{Store: primaryStore}
	rec := &tally{}

	lim, err := app.New(cfg, app.Deps{
		Store:    primary,
		Fallback: fallback,
		Prober:   primary,
		Recorder: rec,
	})
	if err != nil {
		return err
	}
	defer lim.Close()
	if err := lim.CheckRoutes([]string{"GET /api/v1/search", "POST /api/v1/login", "POST /api/v1/exports"}); err != nil {
		return err
	}

	ctx := context.Background()
	out := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer out.Flush()
	scene := func(title string) {
		out.Flush()
		fmt.Fprintf(w, "\n== %s\n", title)
		fmt.Fprintln(out, "#\trequest\tstate\tremaining\tretry-after\tlimited by\tcause")
	}
	show := func(i int, label string, d domain.Decision) {
		by := "-"
		if d.LimitingWindow != "" {
			by = d.LimitingDimension.String() + "/" + d.LimitingWindow
		}
		retry := "-"
		if d.RetryAfter > 0 {
			retry = d.RetryAfter.Round(time.Millisecond).String()
		}
		fmt.Fprintf(out, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", i, label, d.State, d.Remaining, retry, by, d.Cause)
	}
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }

	scene("1. one user bursts on a read route (user burst: 5/s)")
	for i := 1; i <= 7; i++ {
		d, err := lim.Evaluate(ctx, app.Request{Route: "GET /api/v1/search", ClientIP: ip("198.51.100.7"), User: "alice@example.org", Tenant: "acme"})
		if err != nil {
			return err
		}
		show(i, "alice  GET /api/v1/search", d)
	}

	scene("2. the tenant's burst (8/s) is shared: bob gets what alice left")
	for i := 1; i <= 5; i++ {
		d, err := lim.Evaluate(ctx, app.Request{Route: "GET /api/v1/search", ClientIP: ip("198.51.100.8"), User: "bob@example.org", Tenant: "acme"})
		if err != nil {
			return err
		}
		show(i, "bob    GET /api/v1/search", d)
	}

	scene("3. login brute force from one address (ip burst: 3 per 10 s)")
	for i := 1; i <= 5; i++ {
		d, err := lim.Evaluate(ctx, app.Request{Route: "POST /api/v1/login", ClientIP: ip("203.0.113.50")})
		if err != nil {
			return err
		}
		show(i, "anon   POST /api/v1/login", d)
	}

	scene("4. invalid context: one uniform answer, the cause kept for logs")
	for i, r := range []app.Request{
		{Route: "GET /api/v1/search?q=<script>", ClientIP: ip("198.51.100.9")},
		{Route: "GET /api/v1/unknown", ClientIP: ip("198.51.100.9")},
		{Route: "GET /api/v1/search"},
	} {
		d, err := lim.Evaluate(ctx, r)
		if err != nil {
			return err
		}
		show(i+1, "client "+r.Route, d)
	}

	out.Flush()
	fmt.Fprintf(w, "\n== 5. ADR-002 façade: AllowDual(tenant 3/min, user 2/min)\n")
	for i := 1; i <= 4; i++ {
		user := "carol"
		if i == 4 {
			user = "dave"
		}
		ok, tRem, uRem, err := lim.AllowDual("globex", 3, user, 2)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%d  AllowDual(globex, 3, %-5s, 2) = allowed %-5v tenant remaining %d, user remaining %d\n", i, user, ok, tRem, uRem)
	}

	scene("6. the store goes down: the breaker opens, the degraded matrix decides")
	primary.down.Store(true)
	st, err := lim.ProbeOnce(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\tprobe fails\t%s\t\t\t\t\n", st)
	for i, r := range []struct{ label, route, user string }{
		{"erin   GET /api/v1/search (read: bypass)", "GET /api/v1/search", "erin@example.org"},
		{"anon   POST /api/v1/login (auth: deny)", "POST /api/v1/login", ""},
		{"erin   POST /api/v1/exports (costly: local)", "POST /api/v1/exports", "erin@example.org"},
		{"erin   POST /api/v1/exports (costly: local)", "POST /api/v1/exports", "erin@example.org"},
		{"erin   POST /api/v1/exports (costly: local)", "POST /api/v1/exports", "erin@example.org"},
	} {
		d, err := lim.Evaluate(ctx, app.Request{Route: r.route, ClientIP: ip("198.51.100.20"), User: r.user, Tenant: "initech"})
		if err != nil {
			return err
		}
		show(i+1, r.label, d)
	}

	scene("7. the store is back: RECOVERING, then HEALTHY after 3 good probes")
	primary.down.Store(false)
	for i := 1; i <= 3; i++ {
		st, err := lim.ProbeOnce(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%d\tprobe ok\t%s\t\t\t\t\n", i, st)
	}
	d, err := lim.Evaluate(ctx, app.Request{Route: "GET /api/v1/search", ClientIP: ip("198.51.100.20"), User: "erin@example.org", Tenant: "initech"})
	if err != nil {
		return err
	}
	show(4, "erin   GET /api/v1/search", d)
	out.Flush()

	fmt.Fprintf(w, "\n== recorded: %s\n", rec.summary())
	return nil
}

// switchable is the demo's stand-in for a Redis outage: a real local store
// that answers ErrStoreUnavailable while down is set. It is also the
// demo's Prober.
type switchable struct {
	ports.Store
	down atomic.Bool
}

func (s *switchable) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, fmt.Errorf("demo outage: %w", domain.ErrStoreUnavailable)
	}
	return s.Store.Evaluate(ctx, now, limits)
}

func (s *switchable) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	if s.down.Load() {
		return domain.Result{}, fmt.Errorf("demo outage: %w", domain.ErrStoreUnavailable)
	}
	return s.Store.Peek(ctx, now, limits)
}

func (s *switchable) Probe(context.Context) error {
	if s.down.Load() {
		return fmt.Errorf("demo outage: %w", domain.ErrStoreUnavailable)
	}
	return nil
}

// tally is the demo's Recorder: it counts decisions per state and keeps
// the transitions. The real one (OpenTelemetry metrics and the two log
// channels) lives in adapters/otel.
type tally struct {
	mu          sync.Mutex
	states      map[domain.State]int
	transitions []string
}

func (t *tally) RecordDecision(_ context.Context, rec ports.DecisionRecord) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.states == nil {
		t.states = map[domain.State]int{}
	}
	t.states[rec.Decision.State]++
	return nil
}

func (t *tally) RecordTransition(_ context.Context, c domain.StateChange, _ time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.transitions = append(t.transitions, c.From.String()+"→"+c.To.String())
	return nil
}

func (t *tally) RecordStoreCall(context.Context, ports.StoreCall) {}

func (t *tally) RecordReset(context.Context, ports.ResetRecord) error { return nil }

func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, s := range []domain.State{domain.Allowed, domain.Throttled, domain.BypassDegraded, domain.DeniedDegraded, domain.RejectedInvalidContext} {
		parts = append(parts, fmt.Sprintf("%s=%d", s, t.states[s]))
	}
	return strings.Join(parts, " ") + "; transitions: " + strings.Join(t.transitions, ", ")
}

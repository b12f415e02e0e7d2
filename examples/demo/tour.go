package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tourMain is the scripted tour: a client that drives the running service
// over HTTP and gRPC and prints the real status codes and headers.
func tourMain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tour", flag.ContinueOnError)
	base := fs.String("http", "http://127.0.0.1:8080", "the demo's HTTP base URL")
	grpcAddr := fs.String("grpc", "127.0.0.1:9090", "the demo's gRPC address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t := &tour{ctx: ctx, base: strings.TrimRight(*base, "/"), client: &http.Client{Timeout: 10 * time.Second}, out: stdout}
	t.grpcAddr = *grpcAddr
	scenes := []func() error{t.burst, t.sharedTenant, t.plans, t.bruteForce, t.invalidContext, t.grpc, t.exports, t.reports, t.rotatingIdentities, t.outage}
	for _, scene := range scenes {
		if err := scene(); err != nil {
			return err
		}
	}
	return nil
}

type tour struct {
	ctx      context.Context
	base     string
	grpcAddr string
	client   *http.Client
	out      io.Writer
	tw       *tabwriter.Writer
}

// scene starts a table.
func (t *tour) scene(title string) {
	t.flush()
	fmt.Fprintf(t.out, "\n== %s\n", title)
	t.tw = tabwriter.NewWriter(t.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(t.tw, "#\trequest\tstatus\tX-RateLimit-Remaining\tRateLimit\tRetry-After")
}

func (t *tour) flush() {
	if t.tw != nil {
		t.tw.Flush()
		t.tw = nil
	}
}

// do sends one request and prints a row; it returns the status.
func (t *tour) do(n int, label, method, path string, header map[string]string) (int, error) {
	resp, err := t.open(n, label, method, path, header)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// open sends one request and prints a row as soon as the response's
// headers arrive; the caller reads and closes the body.
func (t *tour) open(n int, label, method, path string, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(t.ctx, method, t.base+path, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	status := resp.Status
	if resp.StatusCode == http.StatusBadRequest || strings.HasPrefix(path, "/demo/") {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		status += " " + strings.TrimSpace(string(body))
	}
	h := resp.Header
	fmt.Fprintf(t.tw, "%d\t%s\t%s\t%s\t%s\t%s\n", n, label, status, dash(h.Get("X-RateLimit-Remaining")), dash(h.Get("RateLimit")), dash(h.Get("Retry-After")))
	return resp, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func user(name, tenant string) map[string]string {
	return map[string]string{HeaderUser: name, HeaderTenant: tenant}
}

func (t *tour) burst() error {
	t.scene("1. one user bursts on a read route (user burst: 5/s)")
	for i := 1; i <= 7; i++ {
		if _, err := t.do(i, "alice  GET /api/v1/search", "GET", "/api/v1/search?q=sluice", user("alice@example.org", "acme")); err != nil {
			return err
		}
	}
	return nil
}

func (t *tour) sharedTenant() error {
	t.scene("2. the tenant's burst (8/s) is shared: bob gets what alice left")
	for i := 1; i <= 5; i++ {
		if _, err := t.do(i, "bob    GET /api/v1/search", "GET", "/api/v1/search", user("bob@example.org", "acme")); err != nil {
			return err
		}
	}
	return nil
}

func (t *tour) plans() error {
	t.scene("3. plans: a first request from a tenant of each plan (user burst: umbrella, on no plan, 5/s; globex on pro 50/s; initech on free 2/s)")
	for i, tenant := range []string{"umbrella", "globex", "initech"} {
		if _, err := t.do(i+1, "carol  GET /api/v1/search  "+tenant, "GET", "/api/v1/search", user("carol@"+tenant+".example", tenant)); err != nil {
			return err
		}
	}
	return nil
}

func (t *tour) bruteForce() error {
	t.scene("4. login brute force from one address (ip burst: 3 per 10 s)")
	for i := 1; i <= 5; i++ {
		if _, err := t.do(i, "anon   POST /api/v1/login", "POST", "/api/v1/login", nil); err != nil {
			return err
		}
	}
	return nil
}

func (t *tour) invalidContext() error {
	t.scene("5. invalid context: one uniform answer, whatever the cause")
	rows := []struct {
		label, method, path string
		header              map[string]string
	}{
		{"no such route", "GET", "/api/v1/unknown", nil},
		{"method not routed", "DELETE", "/api/v1/search", nil},
		{"identity too long", "GET", "/api/v1/search", user(strings.Repeat("x", 300), "acme")},
	}
	for i, r := range rows {
		if _, err := t.do(i+1, r.label, r.method, r.path, r.header); err != nil {
			return err
		}
	}
	return nil
}

// grpc calls the health service's Check until it is refused.
func (t *tour) grpc() error {
	t.flush()
	fmt.Fprintf(t.out, "\n== 6. gRPC: grpc.health.v1.Health/Check (ip burst: 5 per 10 s)\n")
	for i := 1; i <= 6; i++ {
		if err := t.call(i, "Check"); err != nil {
			return err
		}
	}
	return nil
}

// call makes one call of the health service (Check, or Watch up to its
// first message) and prints its code, ratelimit metadata and retry delay.
func (t *tour) call(n int, method string) error {
	conn, err := grpc.NewClient(t.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	var md metadata.MD
	if method == "Watch" {
		var stream grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
		if stream, err = client.Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			_, err = stream.Recv()
			md, _ = stream.Header()
		}
	} else {
		_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	}
	st := status.Convert(err)
	line := fmt.Sprintf("%d  gRPC %s: %s", n, method, st.Code())
	if rl := md.Get("ratelimit"); len(rl) > 0 {
		line += "  ratelimit: " + rl[0]
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			line += "  retry in " + ri.GetRetryDelay().AsDuration().String()
		}
	}
	fmt.Fprintln(t.out, line)
	return nil
}

// exports shows a reservation that settles at the cost the handler
// reports: each export reserves 10 rows, the handler reports what it
// exported, and a failed export costs nothing.
func (t *tour) exports() error {
	t.scene("7. exports are charged by what they return (10 rows reserved of dave's 100 per minute, settled at the handler's X-Export-Rows; a 5xx costs nothing)")
	dave := user("dave@example.org", "acme")
	rows := []struct{ label, query string }{
		{"dave   POST /api/v1/exports?rows=3", "?rows=3"},
		{"dave   POST /api/v1/exports?rows=3", "?rows=3"},
		{"dave   POST /api/v1/exports?fail=1   (500: refunded)", "?fail=1"},
		{"dave   POST /api/v1/exports?rows=40  (charged past the 10 reserved)", "?rows=40"},
		{"dave   POST /api/v1/exports?rows=1", "?rows=1"},
	}
	for i, r := range rows {
		if _, err := t.do(i+1, r.label, "POST", "/api/v1/exports"+r.query, dave); err != nil {
			return err
		}
	}
	return nil
}

// reports shows a concurrency window: two slow reports hold frank's two
// slots until their handlers return; a third is refused meanwhile, and
// passes once they are done.
func (t *tour) reports() error {
	t.scene("8. reports: at most 2 in flight per user, each slot held until its handler returns")
	frank := user("frank@example.org", "acme")
	var slow []*http.Response
	defer func() {
		for _, resp := range slow {
			_ = resp.Body.Close()
		}
	}()
	for i := 1; i <= 2; i++ {
		// The handler sends its headers at once and its body 2 s later:
		// once the headers are here, the report holds its slot.
		resp, err := t.open(i, "frank  GET /api/v1/reports (a 2 s report)", "GET", "/api/v1/reports?ms=2000", frank)
		if err != nil {
			return err
		}
		slow = append(slow, resp)
	}
	if _, err := t.do(3, "frank  GET /api/v1/reports (while 1 and 2 run)", "GET", "/api/v1/reports?ms=0", frank); err != nil {
		return err
	}
	// A body read to its end: the handler has returned and its slot is
	// back (the middleware settles before the response ends).
	for _, resp := range slow {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
	}
	_, err := t.do(4, "frank  GET /api/v1/reports (1 and 2 done)", "GET", "/api/v1/reports?ms=0", frank)
	return err
}

// rotatingIdentities shows an ip window bounding an address across every
// identity behind it (docs/adr/013): one address that names a new user and
// tenant on each search passes the search's ip burst (20 per second) and
// no more, though no user or tenant window is anywhere near its limit.
func (t *tour) rotatingIdentities() error {
	t.scene("9. one address rotating its user and tenant on every search: the ip burst (20/s) still bounds it")
	// The searches of the first scenes leave the ip's one-second window.
	select {
	case <-time.After(1100 * time.Millisecond):
	case <-t.ctx.Done():
		return t.ctx.Err()
	}
	for i := 1; i <= 22; i++ {
		name := fmt.Sprintf("rotor%02d", i)
		if _, err := t.do(i, name+"  GET /api/v1/search  tenant "+name, "GET", "/api/v1/search", user(name+"@example.org", name)); err != nil {
			return err
		}
	}
	return nil
}

// outage drives /demo/outage (served with -dev): the degraded matrix per
// route family, then the recovery.
func (t *tour) outage() error {
	t.scene("10. the store goes down (-dev's /demo/outage): each route family answers its way")
	code, err := t.do(0, "POST /demo/outage", "POST", "/demo/outage", nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		t.flush()
		fmt.Fprintln(t.out, "(the service runs without -dev: no simulated outage; stop Redis to see one)")
		return nil
	}
	rows := []struct {
		label, method, path string
		header              map[string]string
	}{
		{"erin   GET /api/v1/search (read: bypass)", "GET", "/api/v1/search", user("erin@example.org", "initech")},
		{"erin   POST /api/v1/exports (costly: local)", "POST", "/api/v1/exports", user("erin@example.org", "initech")},
		{"erin   POST /api/v1/exports (costly: local)", "POST", "/api/v1/exports", user("erin@example.org", "initech")},
		{"erin   POST /api/v1/exports (costly: local)", "POST", "/api/v1/exports", user("erin@example.org", "initech")},
	}
	for i, r := range rows {
		if _, err := t.do(i+1, r.label, r.method, r.path, r.header); err != nil {
			return err
		}
	}
	// An auth method not yet used by the tour: scene 4's login refusal is
	// still running, and a refusal known to last is repeated as it is.
	t.flush()
	if err := t.call(len(rows)+1, "Watch"); err != nil {
		return err
	}
	fmt.Fprintln(t.out, "   (Watch is an auth method: it fails closed while the store is down)")
	t.scene("11. the store is back: RECOVERING, then HEALTHY after 3 good probes")
	if _, err := t.do(0, "DELETE /demo/outage", "DELETE", "/demo/outage", nil); err != nil {
		return err
	}
	if _, err := t.do(1, "erin   GET /api/v1/search", "GET", "/api/v1/search", user("erin@example.org", "initech")); err != nil {
		return err
	}
	t.flush()
	return nil
}

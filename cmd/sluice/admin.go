package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// newFlagSet is a subcommand's flag set whose --help ends with the exit
// codes.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice %s\n\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nEnvironment: %s, %s, %s, read as the services read them.\n\n%s", app.EnvRedisURL, EnvClusterAddrs, app.EnvHMACSecret, exitCodesHelp)
	}
	return fs
}

// parse parses args, a usage error on failure (and none for --help).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: exitUsage, err: err, printed: true}
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	return nil
}

const explainSynopsis = `explain -config FILE -route ROUTE [-user U] [-tenant T] [-ip A] [-apikey K] [-json]
       sluice explain -envoy-config PATH -domain D -descriptor k=v[,k=v]... [-json]

Which profile and plan a request resolves to, and each window it counts:
algorithm, limit, period, its store key (pseudonymised with the HMAC
secret: never the raw id) and the key's Redis Cluster hash slot. Reads
nothing from the store; needs RATE_LIMIT_HMAC_SECRET, as keys depend on it.`

func runExplain(args []string, io ioSet) error {
	var t target
	fs := newFlagSet("explain", explainSynopsis, io.err)
	t.addFlags(fs, false)
	fs.StringVar(&t.route, "route", "", "the route template, e.g. 'GET /api/v1/search' or '/pkg.Service/Method'")
	fs.Int64Var(&t.cost, "cost", 0, "the request's cost (0: the profile's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	if !t.envoy() && t.route == "" {
		return usageErr("explain needs -route")
	}
	s, err := open(&t, false, io.err, io.err)
	if err != nil {
		return err
	}
	defer s.close()
	var out decisionOut
	if t.envoy() {
		wr, err := s.windowsRequest(&t)
		if err != nil {
			return err
		}
		x, err := s.lim.ExplainWindows(wr)
		if err != nil {
			return err
		}
		out = explainedOut(x, true)
		out.Domain = t.domain
	} else {
		req, ipGiven, err := t.request(t.route)
		if err != nil {
			return err
		}
		x, err := s.lim.Explain(req)
		if err != nil {
			return fmt.Errorf("route %q: %w", t.route, err)
		}
		out = explainedOut(x, ipGiven)
		out.Route = t.route
	}
	if t.json {
		return printJSON(io.out, out)
	}
	printDecision(io.out, out, false)
	return nil
}

const peekSynopsis = `peek -config FILE [-route ROUTE] [-user U] [-tenant T] [-ip A] [-apikey K] [-json]
       sluice peek -envoy-config PATH -domain D -descriptor k=v[,k=v]... [-json]

What each window of an identity has left, when one more request would
pass (RETRY IN) and when the window is whole again (RESETS IN), read from
the shared store (REDIS_URL or REDIS_CLUSTER_ADDRS), consuming nothing
(app.Limiter.Peek). Without -route, every profile that counts these
identities. Exit status 0 whether or not the identity is blocked (the
output says BLOCKED). -json prints one object, or with several profiles
(no -route) an array of them.`

func runPeek(ctx context.Context, args []string, io ioSet) error {
	var t target
	fs := newFlagSet("peek", peekSynopsis, io.err)
	t.addFlags(fs, true)
	fs.StringVar(&t.route, "route", "", "the route template; empty: every profile")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	if !t.envoy() && !t.hasIdentity() {
		return usageErr("peek needs an identity: -user, -tenant, -ip or -apikey")
	}
	s, err := open(&t, true, io.err, io.err)
	if err != nil {
		return err
	}
	defer s.close()
	var outs []decisionOut
	if t.envoy() {
		wr, err := s.windowsRequest(&t)
		if err != nil {
			return err
		}
		x, err := s.lim.ExplainWindows(wr)
		if err != nil {
			return err
		}
		d, err := s.lim.PeekWindows(ctx, wr)
		if err != nil {
			return err
		}
		out := explainedOut(x, true)
		out.Domain = t.domain
		if withPeek(&out, x, d, true) {
			out.Notes = append(out.Notes, untouchedNote)
		}
		outs = append(outs, out)
	} else {
		routes := []string{t.route}
		if t.route == "" {
			routes = firstRoutes(s.cfg)
		}
		untouched := true
		for _, route := range routes {
			out, ok, err := peekRoute(ctx, s, &t, route)
			if err != nil {
				return err
			}
			if ok || t.route != "" {
				outs = append(outs, out)
			}
			untouched = untouched && (!ok || out.untouched)
		}
		if len(outs) == 0 {
			return fail(exitUnknown, errors.New("no profile counts these identities"))
		}
		if untouched {
			last := &outs[len(outs)-1]
			last.Notes = append(last.Notes, untouchedNote)
		}
	}
	if t.json {
		if t.envoy() || t.route != "" {
			return printJSON(io.out, outs[0])
		}
		return printJSON(io.out, outs)
	}
	for i, o := range outs {
		if i > 0 {
			fmt.Fprintln(io.out)
		}
		printDecision(io.out, o, true)
	}
	return nil
}

// peekRoute peeks one route; ok is false when no window of its profile
// counts the identities.
func peekRoute(ctx context.Context, s *session, t *target, route string) (decisionOut, bool, error) {
	req, ipGiven, err := t.request(route)
	if err != nil {
		return decisionOut{}, false, err
	}
	x, err := s.lim.Explain(req)
	if err != nil {
		return decisionOut{}, false, fmt.Errorf("route %q: %w", route, err)
	}
	out := explainedOut(x, ipGiven)
	out.Route = route
	if len(out.Windows) == 0 {
		return out, false, nil
	}
	d, err := s.lim.Peek(ctx, req)
	if err != nil {
		return out, false, err
	}
	out.untouched = withPeek(&out, x, d, ipGiven)
	return out, true, nil
}

// firstRoutes is one route of each profile, in the file's order.
func firstRoutes(cfg app.Config) []string {
	var routes []string
	for _, p := range cfg.Profiles {
		if len(p.Routes) > 0 {
			routes = append(routes, p.Routes[0])
		}
	}
	return routes
}

const resetSynopsis = `reset -config FILE IDENTITY... -actor WHO [-dimension D] [-profile P]... [-route R]... [-yes] [-json]
       sluice reset -envoy-config PATH -domain D -descriptor k=v[,k=v]... -actor WHO [-yes] [-json]

Forgets the counts of an identity on the shared store (app.Limiter.Reset:
every window of -dimension, on every profile unless -profile or -route
narrow it, and the ADR-002 facades), or of descriptors
(app.Limiter.ResetWindows), and records who asked (-actor, required) on
the security-audit channel (stderr, or -audit-log FILE), as the services'
own Reset does: once before any key is deleted (phase=begun), once with
the outcome (phase=done, deleted=N). If the first record cannot be
written, nothing is deleted.

-dimension defaults to the most specific identity given: user, else
apikey, else ip, else tenant. The tenant scopes a user's and an api key's
windows (a user's windows within -tenant are not the same user's without
one), and without a tenant the user scopes an api key's. An ip is not
scoped: its windows count per ip whoever sends, so an ip reset forgets
them in every tenant, and an IPv6 address stands for its /64, as it
counts (docs/adr/013). The confirmation, asked on stdin unless -yes,
shows that scope.

It prints how many keys the store held and deleted, of the keys the reset
names. None deleted exits 8 with a warning: nothing was counted under
these keys, because nothing was counted yet, or because they are not the
service's (another RATE_LIMIT_HMAC_SECRET, a missing -tenant, another
configuration file).`

func runReset(ctx context.Context, args []string, io ioSet) error {
	var t target
	var actor, dim, auditLog string
	var yes bool
	var profiles, routes multiFlag
	fs := newFlagSet("reset", resetSynopsis, io.err)
	t.addFlags(fs, true)
	fs.StringVar(&actor, "actor", "", "who asks for the reset, for the audit record (required)")
	fs.StringVar(&dim, "dimension", "", "whose windows: user, apikey, ip or tenant (default: the most specific identity given)")
	fs.Var(&profiles, "profile", "reset only this profile's windows (repeatable; \"facade\" names the ADR-002 facades)")
	fs.Var(&routes, "route", "reset only the windows of this route's profile (repeatable)")
	fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	fs.StringVar(&auditLog, "audit-log", "", "append the log channels (the security-audit record) to this file instead of stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	if strings.TrimSpace(actor) == "" {
		return usageErr("reset needs -actor: who asks, for the audit record")
	}
	logs := io.err
	if auditLog != "" {
		f, err := os.OpenFile(auditLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return usageErr("-audit-log: %v", err)
		}
		defer f.Close()
		logs = f
	}
	var req app.ResetRequest
	if !t.envoy() {
		if !t.hasIdentity() {
			return usageErr("reset needs an identity: -user, -tenant, -ip or -apikey")
		}
		var err error
		if req, err = t.resetRequest(dim, actor); err != nil {
			return err
		}
	}
	s, err := open(&t, true, logs, io.err)
	if err != nil {
		return err
	}
	defer s.close()
	// Everything that can be refused is, before the question.
	var what string
	var wr app.WindowsRequest
	if t.envoy() {
		if wr, err = s.windowsRequest(&t); err != nil {
			return err
		}
		what = fmt.Sprintf("the windows of %d descriptor(s) of domain %q", len(t.descriptors), t.domain)
	} else {
		for _, p := range profiles {
			if p != app.DefaultFacadeProfile && !slices.ContainsFunc(s.cfg.Profiles, func(pc app.ProfileConfig) bool { return pc.Name == p }) {
				return fail(exitUnknown, fmt.Errorf("-profile %q: no profile of that name", p))
			}
		}
		for _, r := range routes {
			rr, _, err := t.request(r)
			if err != nil {
				return err
			}
			x, err := s.lim.Explain(rr)
			if err != nil {
				return fmt.Errorf("route %q: %w", r, err)
			}
			profiles = append(profiles, x.Profile)
		}
		req.Profiles = profiles
		what = t.describe(req)
	}
	if !yes {
		ok, err := confirm(io, fmt.Sprintf("Reset %s, as %q? Type yes to go on: ", what, actor))
		if err != nil || !ok {
			return fail(exitNotConfirmed, errors.New("reset not confirmed: nothing was reset"))
		}
	}
	var res app.ResetResult
	if t.envoy() {
		res, err = s.lim.ResetWindows(ctx, wr, actor)
	} else {
		res, err = s.lim.Reset(ctx, req)
	}
	if err != nil {
		return err
	}
	ttl := s.cfg.RefusalCacheTTL
	if t.envoy() {
		ttl = 0 // the Envoy door never repeats a refusal (app.Limiter.EvaluateWindows)
	}
	if t.json {
		out := map[string]any{"reset": what, "keys": res.Keys, "actor": actor, "refusal_cache_ttl_ms": ttl.Milliseconds()}
		if res.Deleted >= 0 {
			out["deleted"] = res.Deleted
		}
		if err := printJSON(io.out, out); err != nil {
			return err
		}
	} else {
		deleted := fmt.Sprintf("%d of %d keys deleted", res.Deleted, res.Keys)
		if res.Deleted < 0 {
			deleted = fmt.Sprintf("%d keys reset (the store does not say how many it held)", res.Keys)
		}
		fmt.Fprintf(io.out, "reset %s: %s, recorded on the audit channel as %q\n", what, deleted, actor)
		if ttl > 0 && s.cfg.RefusalCacheSize > 0 && res.Deleted != 0 {
			fmt.Fprintf(io.out, "an instance that refused them moments ago may repeat that refusal for up to %s (refusal_cache_ttl)\n", ttl)
		}
	}
	if res.Deleted == 0 {
		return fail(exitNothingReset, errors.New(nothingDeleted(&t)))
	}
	return nil
}

// nothingDeleted explains a reset that found no count to delete.
func nothingDeleted(t *target) string {
	why := "the -descriptor entries are not those Envoy sends, or -envoy-config is not the service's"
	if !t.envoy() {
		why = "-tenant does not name the tenant the requests carry (a user's and an api key's windows count within it), or -config is not the service's"
	}
	return fmt.Sprintf("warning: the reset deleted nothing: no key it names held a count on the store. "+
		"Nothing was counted yet, or the keys are not the service's: %s is not the service's secret (keys are pseudonymised with it), or %s", app.EnvHMACSecret, why)
}

// resetRequest builds the ResetRequest of the target's identities.
func (t *target) resetRequest(dim, actor string) (app.ResetRequest, error) {
	req := app.ResetRequest{User: t.user, Tenant: t.tenant, APIKey: t.apikey, Actor: actor}
	if t.ip != "" {
		r, _, err := t.request("")
		if err != nil {
			return req, err
		}
		req.ClientIP = r.ClientIP
	}
	if dim == "" {
		switch {
		case t.user != "":
			dim = "user"
		case t.apikey != "":
			dim = "apikey"
		case t.ip != "":
			dim = "ip"
		default:
			dim = "tenant"
		}
	}
	d, err := domain.ParseDimension(dim)
	if err != nil || d == domain.DimensionTenantGlobal || d == domain.DimensionDescriptor {
		return req, usageErr("-dimension %q: user, apikey, ip or tenant", dim)
	}
	req.Dimension = d
	return req, nil
}

// describe says what a reset will forget, for the confirmation and the
// report: the identity, and what scopes it (app.Limiter.Reset).
func (t *target) describe(req app.ResetRequest) string {
	var id string
	switch req.Dimension {
	case domain.DimensionUser:
		id = fmt.Sprintf("user %q", t.user)
	case domain.DimensionAPIKey:
		id = fmt.Sprintf("api key %q", t.apikey)
	case domain.DimensionIP:
		id = "ip " + req.ClientIP.String()
		if n, err := domain.NormaliseIP(req.ClientIP); err == nil && n != req.ClientIP.String() {
			id = fmt.Sprintf("ip %s (the /%d of %s, counted as one client)", n, domain.IPv6GroupBits, req.ClientIP)
		}
		id += " in every tenant (an ip counts whoever sends)"
	case domain.DimensionTenant:
		id = fmt.Sprintf("tenant %q", t.tenant)
	}
	switch {
	case req.Dimension == domain.DimensionIP || req.Dimension == domain.DimensionTenant:
	case t.tenant != "":
		id += fmt.Sprintf(" in tenant %q", t.tenant)
	case req.Dimension == domain.DimensionAPIKey && t.user != "":
		id += fmt.Sprintf(" with user %q, no tenant", t.user)
	default:
		id += " without a tenant"
	}
	scope := "every profile and the facades"
	if len(req.Profiles) > 0 {
		scope = "profile(s) " + joinQuoted(req.Profiles)
	}
	return fmt.Sprintf("the %s windows of %s on %s", req.Dimension, id, scope)
}

// confirm asks question on stderr and reads one line of stdin.
func confirm(io ioSet, question string) (bool, error) {
	fmt.Fprint(io.err, question)
	line, err := bufio.NewReader(io.in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(io.err)
		return false, err
	}
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "yes" || a == "y", nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

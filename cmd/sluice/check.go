package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/boot"
)

const checkSynopsis = `check -config FILE [-envoy-config PATH] [-identities N] [-expose ROUTE]... [-expose-file FILE] [-skip-secret] [-json]

Validates the configuration exactly as the services do at boot (the same
loaders, so the same messages), each error with its file, line and field;
then prints every profile's windows, plans and routes, the Redis memory
the configuration needs at -identities identities, and warnings. -expose
(or -expose-file, one route a line) lists the service's own routes: each
must have a profile, as the service's boot check (CheckRoutes) demands.
-envoy-config checks sluice-rls's files too (with -config as its
-sluice-config). Exit status 0 when valid, 1 when not: a CI step.`

// Synthetic identities check names to lay out a profile's keys: any
// identity has the same windows and as many keys.
const (
	checkUser   = "sluice-check-user"
	checkTenant = "sluice-check-tenant"
	checkAPIKey = "sluice-check-apikey"
)

var checkIP = netip.MustParseAddr("192.0.2.1")

// placeholderSecret stands in for the secret under -skip-secret: keys are
// never shown by check, only counted.
const placeholderSecret = "00000000000000000000000000000000000000000000000000000000000000aa"

type checkOut struct {
	Valid    bool        `json:"valid"`
	Errors   []located   `json:"errors,omitempty"`
	Warnings []string    `json:"warnings,omitempty"`
	Profiles []profOut   `json:"profiles,omitempty"`
	Plans    []planOut   `json:"plans,omitempty"`
	Exposed  []routeOut  `json:"exposed,omitempty"`
	Domains  []domainOut `json:"envoy_domains,omitempty"`
	Memory   *memoryOut  `json:"memory,omitempty"`
}

type profOut struct {
	Name      string       `json:"name"`
	Family    string       `json:"family"`
	Degraded  string       `json:"degraded"`
	Cost      int64        `json:"cost"`
	Reserving bool         `json:"reserving,omitempty"`
	Routes    []string     `json:"routes"`
	Windows   []windowSpec `json:"windows"`
	// Keys and BytesPerIdentity: the keys one identity of every
	// dimension writes on this profile, and their size at the limits.
	Keys             int   `json:"keys"`
	BytesPerIdentity int64 `json:"bytes_per_identity"`
}

type windowSpec struct {
	Dimension string `json:"dimension"`
	Window    string `json:"window"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Period    string `json:"period"`
	// Profile is the profile's own limit where a plan changes it.
	Profile   int64 `json:"profile_limit,omitempty"`
	SharedKey bool  `json:"shared_key,omitempty"`
}

type planOut struct {
	Name     string        `json:"name"`
	Tenants  int           `json:"tenants"`
	APIKeys  int           `json:"api_keys"`
	Profiles []planProfile `json:"profiles"`
}

type planProfile struct {
	Profile string       `json:"profile"`
	Windows []windowSpec `json:"windows"`
}

type routeOut struct {
	Route   string `json:"route"`
	Profile string `json:"profile,omitempty"`
}

type domainOut struct {
	Domain   string      `json:"domain"`
	File     string      `json:"file"`
	TagKey   string      `json:"hash_tag_key,omitempty"`
	Degraded string      `json:"degraded"`
	Limits   []envoyRule `json:"limits"`
}

type envoyRule struct {
	Descriptor string `json:"descriptor"`
	Name       string `json:"name,omitempty"`
	Limit      int64  `json:"limit"`
	Period     string `json:"period"`
	Algorithm  string `json:"algorithm"`
	Shadow     bool   `json:"shadow,omitempty"`
}

type memoryOut struct {
	Identities int64  `json:"identities"`
	Bytes      int64  `json:"bytes"`
	BudgetMB   int64  `json:"budget_mb,omitempty"`
	Model      string `json:"model"`
}

const memoryModel = "every identity of every dimension (and, for sluice-rls, every descriptor value) at the limit of every window: an upper bound. " +
	"Sizes measured on Redis 7 (docs/adr/003, docs/runbook.md): a compact sliding log about 7 B a unit + 200 B (limit up to 1024), " +
	"a ZSET log 119 B a unit, a GCRA key 136 B, a concurrency window as a ZSET of its slots"

func runCheck(args []string, io ioSet) error {
	var o struct {
		config, envoyConfig, exposeFile string
		identities                      int64
		expose                          multiFlag
		skipSecret, json                bool
	}
	fs := newFlagSet("check", checkSynopsis, io.err)
	fs.StringVar(&o.config, "config", "", "sluice's YAML configuration")
	fs.StringVar(&o.envoyConfig, "envoy-config", "", "sluice-rls's envoyproxy/ratelimit YAML: a file or a directory of *.yaml")
	fs.Int64Var(&o.identities, "identities", 10000, "size the Redis memory for this many identities of each dimension")
	fs.Var(&o.expose, "expose", "a route the service exposes, e.g. 'GET /api/v1/search' (repeatable)")
	fs.StringVar(&o.exposeFile, "expose-file", "", "a file of exposed routes, one a line (# comments)")
	load := envoyLoadFlags(fs)
	fs.BoolVar(&o.skipSecret, "skip-secret", false, "check without RATE_LIMIT_HMAC_SECRET (CI): the secret is not checked, and a warning says so")
	fs.BoolVar(&o.json, "json", false, "print JSON for scripts instead of a report")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.config == "" && o.envoyConfig == "" {
		return usageErr("check needs -config (sluice's YAML), -envoy-config (sluice-rls's), or both")
	}
	if o.identities < 1 {
		return usageErr("-identities must be at least 1")
	}
	if o.exposeFile != "" {
		routes, err := readRoutes(o.exposeFile)
		if err != nil {
			return usageErr("-expose-file: %v", err)
		}
		o.expose = append(o.expose, routes...)
	}
	out := checkOut{Valid: true}
	var memory int64
	var cfg app.Config
	if o.config != "" || o.envoyConfig == "" {
		var env app.LookupEnv
		if o.skipSecret && !secretInFile(o.config) {
			env = func(k string) (string, bool) {
				if v, ok := os.LookupEnv(k); ok && v != "" || k != app.EnvHMACSecret {
					return v, ok
				}
				return placeholderSecret, true
			}
		}
		c, data, err := loadAppConfig(o.config, env)
		if err != nil {
			if _, ok := err.(*exitError); ok {
				return err
			}
			out.Valid = false
			out.Errors = append(out.Errors, locateApp(o.config, data, err)...)
		} else if err := c.CheckRoutes(o.expose); err != nil {
			out.Valid = false
			out.Errors = append(out.Errors, locateApp(o.config, data, err)...)
		} else {
			cfg = c
			if memory, err = describeApp(&out, c, data, o.expose, o.identities); err != nil {
				return err
			}
			if o.skipSecret && string(c.HMACSecret) == placeholderSecret {
				out.Warnings = append(out.Warnings, "-skip-secret: the HMAC secret was not checked; the service refuses to boot without "+app.EnvHMACSecret)
			}
		}
	}
	if o.envoyConfig != "" {
		if _, err := envoyrls.LoadConfigWith(o.envoyConfig, *load); err != nil {
			out.Valid = false
			out.Errors = append(out.Errors, locateEnvoy(o.envoyConfig, err)...)
		} else {
			m, err := describeEnvoy(&out, o.envoyConfig, o.identities)
			if err != nil {
				return err
			}
			memory += m
		}
	}
	if out.Valid {
		out.Memory = &memoryOut{Identities: o.identities, Bytes: memory, BudgetMB: cfg.RedisMemoryBudgetMB, Model: memoryModel}
		out.Warnings = append(out.Warnings, memoryWarnings(cfg, o.config != "", memory, o.identities)...)
	}
	if o.json {
		if err := printJSON(io.out, out); err != nil {
			return err
		}
	} else {
		printCheck(io, out, o.config != "" && len(o.expose) == 0)
	}
	if !out.Valid {
		return &exitError{code: exitInvalid, err: fmt.Errorf("invalid configuration"), printed: true}
	}
	return nil
}

// secretInFile says whether the file at path writes hmac_secret: -skip-secret
// then leaves it to be checked.
func secretInFile(path string) bool {
	b, err := readBounded(path)
	return err == nil && app.FieldLine(b, "hmac_secret") > 0
}

// readRoutes reads one route a line, skipping blank lines and # comments.
func readRoutes(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var routes []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			routes = append(routes, l)
		}
	}
	return routes, sc.Err()
}

// describeApp fills out's profiles, plans and exposed routes from a valid
// configuration, laying out the keys through the Limiter itself
// (Explain), and returns the Redis memory it needs at n identities.
func describeApp(out *checkOut, cfg app.Config, data []byte, exposed []string, n int64) (int64, error) {
	primary, err := local.New(local.Config{})
	if err != nil {
		return 0, err
	}
	defer primary.Close()
	fallback, err := local.New(local.Config{})
	if err != nil {
		return 0, err
	}
	defer fallback.Close()
	rec, err := boot.Recorder(cfg, io.Discard)
	if err != nil {
		return 0, err
	}
	defer rec.Close()
	lim, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: rec})
	if err != nil {
		return 0, err
	}
	defer lim.Close()

	keys := map[string]int64{} // every key of one identity of each dimension, and its size
	base := map[string][]app.ExplainedWindow{}
	for _, pc := range cfg.Profiles {
		x, err := lim.Explain(app.Request{Route: pc.Routes[0], ClientIP: checkIP, User: checkUser, Tenant: checkTenant, APIKey: checkAPIKey, Cost: 1})
		if err != nil {
			return 0, fmt.Errorf("profile %s: %w", pc.Name, err)
		}
		base[pc.Name] = x.Windows
		p := profOut{Name: pc.Name, Family: x.Family.String(), Degraded: x.Degraded.String(), Cost: pc.Cost, Reserving: x.Reserving, Routes: pc.Routes}
		own := map[string]int64{}
		uses := map[string]int{}
		for _, w := range x.Windows {
			uses[w.Key]++
			own[w.Key] = max(own[w.Key], windowBytes(w.Window))
		}
		for _, w := range x.Windows {
			p.Windows = append(p.Windows, spec(w.Dimension, w.Window, uses[w.Key] > 1))
		}
		for k, b := range own {
			p.BytesPerIdentity += b
			keys[k] = max(keys[k], b)
		}
		p.Keys = len(own)
		out.Profiles = append(out.Profiles, p)
		if len(p.Windows) == 0 {
			out.Warnings = append(out.Warnings, fmt.Sprintf("profile %s has no window: its routes are never limited", pc.Name))
		}
	}
	for _, pl := range cfg.Plans {
		po := planOut{Name: pl.Name, Tenants: len(pl.Tenants), APIKeys: len(pl.APIKeys)}
		req := app.Request{ClientIP: checkIP, User: checkUser, Cost: 1}
		switch {
		case len(pl.APIKeys) > 0:
			req.APIKey, req.Tenant = pl.APIKeys[0], checkTenant
		case len(pl.Tenants) > 0:
			req.Tenant = pl.Tenants[0]
		default:
			out.Warnings = append(out.Warnings, fmt.Sprintf("plan %s names no tenant and no api key: it applies to no one", pl.Name))
		}
		for _, name := range slices.Sorted(maps.Keys(pl.Profiles)) {
			pp := planProfile{Profile: name}
			if req.Tenant != "" || req.APIKey != "" {
				req.Route = routeOf(cfg, name)
				x, err := lim.Explain(req)
				if err != nil {
					return 0, fmt.Errorf("plan %s, profile %s: %w", pl.Name, name, err)
				}
				uses := map[string]int{}
				for _, w := range x.Windows {
					uses[w.Key]++
				}
				for _, w := range x.Windows {
					s := spec(w.Dimension, w.Window, uses[w.Key] > 1)
					if b := baseLimit(base[name], w); b != w.Window.Limit {
						s.Profile = b
					}
					pp.Windows = append(pp.Windows, s)
				}
			}
			po.Profiles = append(po.Profiles, pp)
		}
		out.Plans = append(out.Plans, po)
	}
	used := map[string]bool{}
	for _, r := range exposed {
		x, err := lim.Explain(app.Request{Route: r, ClientIP: checkIP, Cost: 1})
		ro := routeOut{Route: r}
		if err == nil {
			ro.Profile = x.Profile
			used[x.Profile] = true
		}
		out.Exposed = append(out.Exposed, ro)
	}
	if len(exposed) > 0 {
		for _, pc := range cfg.Profiles {
			if !used[pc.Name] {
				out.Warnings = append(out.Warnings, fmt.Sprintf("profile %s limits none of the exposed routes (its routes: %s)", pc.Name, strings.Join(pc.Routes, ", ")))
			}
		}
	}
	var total int64
	for _, b := range keys {
		total += b
	}
	out.Warnings = append(out.Warnings, fileWarnings(cfg, data)...)
	return total * n, nil
}

func routeOf(cfg app.Config, profile string) string {
	for _, p := range cfg.Profiles {
		if p.Name == profile {
			return p.Routes[0]
		}
	}
	return ""
}

func baseLimit(ws []app.ExplainedWindow, w app.ExplainedWindow) int64 {
	for _, b := range ws {
		if b.Dimension == w.Dimension && b.Window.Name == w.Window.Name {
			return b.Window.Limit
		}
	}
	return w.Window.Limit
}

func spec(d domain.Dimension, w domain.Window, shared bool) windowSpec {
	return windowSpec{Dimension: d.String(), Window: w.Name, Algorithm: w.Algorithm.String(), Limit: w.Limit, Period: w.Period.String(), SharedKey: shared}
}

// windowBytes is the Redis memory of one key of w at its limit (see
// memoryModel).
func windowBytes(w domain.Window) int64 {
	switch w.Algorithm {
	case domain.GCRA:
		return 136
	case domain.Concurrency:
		return zsetBytes(w.Limit)
	}
	if w.Limit <= 1024 {
		return 7*w.Limit + 200
	}
	return zsetBytes(w.Limit)
}

func zsetBytes(n int64) int64 {
	if n <= 128 {
		return 32*n + 100
	}
	return 119 * n
}

// fileWarnings are what a valid file does that an operator may not mean.
func fileWarnings(cfg app.Config, data []byte) []string {
	var ws []string
	if cfg.ShadowMode {
		ws = append(ws, "shadow_mode is on: every decision is recorded and none refuses")
	}
	if app.FieldLine(data, "hmac_secret") > 0 {
		ws = append(ws, fmt.Sprintf("hmac_secret is written in the file (line %d): prefer %s, kept out of version control", app.FieldLine(data, "hmac_secret"), app.EnvHMACSecret))
	}
	if line := app.FieldLine(data, "redis_url"); line > 0 {
		var f struct {
			URL string `yaml:"redis_url"`
		}
		if yaml.Unmarshal(data, &f) == nil {
			if u, err := url.Parse(f.URL); err == nil && u.User != nil {
				if _, ok := u.User.Password(); ok {
					ws = append(ws, fmt.Sprintf("redis_url in the file carries a password (line %d): prefer %s", line, app.EnvRedisURL))
				}
			}
		}
	}
	return ws
}

// memoryWarnings compares the memory needed with the budget.
func memoryWarnings(cfg app.Config, app_ bool, bytes, n int64) []string {
	if !app_ {
		return nil
	}
	mb := (bytes + 1<<20 - 1) >> 20
	switch {
	case cfg.RedisMemoryBudgetMB == 0:
		return []string{fmt.Sprintf("redis_memory_budget_mb is not set: the service cannot warn at boot when Redis maxmemory is below the %d MiB this configuration needs at %d identities", mb, n)}
	case mb > cfg.RedisMemoryBudgetMB:
		return []string{fmt.Sprintf("at %d identities the configuration needs about %d MiB of Redis, above redis_memory_budget_mb (%d)", n, mb, cfg.RedisMemoryBudgetMB)}
	}
	return nil
}

// describeEnvoy fills out's domains from valid sluice-rls files and
// returns the memory their limits need at n values of each descriptor.
func describeEnvoy(out *checkOut, path string, n int64) (int64, error) {
	var total int64
	for _, f := range envoyFiles(path) {
		b, err := readBounded(f)
		if err != nil {
			return 0, err
		}
		var df envoyrls.DomainFile
		if err := yaml.Unmarshal(b, &df); err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		d := domainOut{Domain: df.Domain, File: f, TagKey: df.HashTagKey, Degraded: cmp.Or(df.Degraded, "bypass")}
		var walk func(ds []envoyrls.DescriptorConfig, prefix string)
		walk = func(ds []envoyrls.DescriptorConfig, prefix string) {
			for _, dc := range ds {
				name := dc.Key
				if dc.Value != "" {
					name += "=" + dc.Value
				}
				if prefix != "" {
					name = prefix + "," + name
				}
				if rl := dc.RateLimit; rl != nil {
					w := envoyWindow(rl)
					r := envoyRule{Descriptor: name, Name: rl.Name, Limit: w.Limit, Period: w.Period.String(), Algorithm: w.Algorithm.String(), Shadow: dc.ShadowMode}
					switch {
					case rl.Unlimited: // -accept-unlimited: not limited, counted nowhere
						r.Algorithm, r.Period = "unlimited", "-"
					case rl.RequestsPerUnit == 0: // -accept-unlimited: a block, counted nowhere
						r.Algorithm = "block"
					default:
						total += windowBytes(w) * n
					}
					d.Limits = append(d.Limits, r)
				}
				walk(dc.Descriptors, name)
			}
		}
		walk(df.Descriptors, "")
		out.Domains = append(out.Domains, d)
	}
	return total, nil
}

// envoyWindow reads a validated rate_limit as the loader does.
func envoyWindow(rl *envoyrls.RateLimitConfig) domain.Window {
	periods := map[string]time.Duration{"SECOND": time.Second, "MINUTE": time.Minute, "HOUR": time.Hour, "DAY": 24 * time.Hour,
		"WEEK": 7 * 24 * time.Hour, "MONTH": 30 * 24 * time.Hour, "YEAR": 365 * 24 * time.Hour}
	w := domain.Window{Limit: rl.RequestsPerUnit, Period: periods[strings.ToUpper(rl.Unit)] * time.Duration(max(rl.UnitMultiplier, 1))}
	if a, err := domain.ParseAlgorithm(rl.Algorithm); err == nil && rl.Algorithm != "" {
		w.Algorithm = a
	}
	return w
}

func printCheck(io ioSet, out checkOut, noExpose bool) {
	w := io.out
	if !out.Valid {
		for _, e := range out.Errors {
			fmt.Fprintln(io.err, e.String())
		}
		fmt.Fprintf(io.err, "invalid: %d error(s); the service would refuse to boot\n", len(out.Errors))
		return
	}
	for _, p := range out.Profiles {
		fmt.Fprintf(w, "profile %s (family %s, degraded: %s, cost %d", p.Name, p.Family, p.Degraded, p.Cost)
		if p.Reserving {
			fmt.Fprint(w, ", reserving")
		}
		fmt.Fprintf(w, "): %d key(s), %s per identity at the limits\n", p.Keys, size(p.BytesPerIdentity))
		fmt.Fprintf(w, "  routes: %s\n", strings.Join(p.Routes, ", "))
		printSpecs(w, p.Windows)
	}
	for _, pl := range out.Plans {
		fmt.Fprintf(w, "plan %s: %d tenant(s), %d api key(s)\n", pl.Name, pl.Tenants, pl.APIKeys)
		for _, pp := range pl.Profiles {
			fmt.Fprintf(w, "  on %s:\n", pp.Profile)
			printSpecs(w, pp.Windows)
		}
	}
	if len(out.Exposed) > 0 {
		fmt.Fprintln(w, "exposed routes:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range out.Exposed {
			fmt.Fprintf(tw, "  %s\t-> %s\n", r.Route, r.Profile)
		}
		_ = tw.Flush()
	}
	for _, d := range out.Domains {
		fmt.Fprintf(w, "envoy domain %s (%s, degraded: %s", d.Domain, d.File, d.Degraded)
		if d.TagKey != "" {
			fmt.Fprintf(w, ", hash_tag_key %s", d.TagKey)
		}
		fmt.Fprintln(w, ")")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  DESCRIPTOR\tNAME\tALGORITHM\tLIMIT\tPERIOD")
		for _, l := range d.Limits {
			name := l.Name
			if l.Shadow {
				name += " (shadow)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", l.Descriptor, name, l.Algorithm, l.Limit, l.Period)
		}
		_ = tw.Flush()
	}
	if out.Memory != nil {
		fmt.Fprintf(w, "redis memory at %d identities of each dimension: about %s\n  model: %s\n", out.Memory.Identities, size(out.Memory.Bytes), out.Memory.Model)
	}
	if noExpose {
		fmt.Fprintln(w, "note: pass -expose or -expose-file with the service's routes to check that each has a profile, as the service does at boot")
	}
	for _, warn := range out.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	fmt.Fprintln(w, "valid")
}

func printSpecs(w io.Writer, ws []windowSpec) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  DIMENSION\tWINDOW\tALGORITHM\tLIMIT\tPERIOD\tKEY")
	for _, s := range ws {
		limit := fmt.Sprint(s.Limit)
		if s.Profile != 0 {
			limit += fmt.Sprintf(" (profile: %d)", s.Profile)
		}
		key := "own"
		if s.SharedKey {
			key = "shared log"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", s.Dimension, s.Window, s.Algorithm, limit, s.Period, key)
	}
	_ = tw.Flush()
}

func size(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

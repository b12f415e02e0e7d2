package app

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// capWindowName names the window of the degraded local cap in its keys
// and in decisions.
const capWindowName = "degraded_cap"

// profile is a route profile ready for the hot path.
type profile struct {
	domain.RouteProfile
	// action is the profile's cell of the degraded matrix.
	action domain.DegradedAction
	// minLimit is the smallest limit of any window: no request may cost
	// more, or it could never pass.
	minLimit int64
	// capWindow is the degraded local cap: DegradedCapFactor × burst per
	// DegradedCapPeriod, counted with GCRA on the fallback store.
	capWindow domain.Window
	// plan names the plan this variant belongs to, "" for the profile's
	// own limits.
	plan string
	// settle is the profile's settle rules (zero without); reserving is
	// set when the profile decides through reservations: it has settle
	// rules or a concurrency window (docs/adr/012).
	settle    SettleConfig
	reserving bool
	// leaseTTL is the smallest period of its concurrency windows, 0
	// without one: the lease TTL of its reservations.
	leaseTTL time.Duration
	// keys is the key layout of each of Dimensions (docs/adr/015); nil
	// names every window's own key.
	keys []dimKeys
	// allot is set when neither the profile nor one of its windows turns
	// allotments off (docs/adr/019).
	allot bool
}

// profileSet resolves route templates to profiles.
type profileSet struct {
	byName map[string]*profile
	// routes holds every configured route twice: as written (so that the
	// common case, a request carrying exactly a configured template, costs
	// one map lookup and no allocation) and in canonical form.
	routes map[string]*profile
	// plans by name, with the raw identities assigned to them.
	plans map[string]*plan
	// globalShared says whether the tenant-global windows share a log
	// (globalLogShared).
	globalShared bool
}

// buildProfiles turns a validated Config into a profileSet, checking the
// rules that span fields: windows per dimension, costs against limits,
// tenant-global windows agreeing across profiles, routes parsing and
// belonging to one profile, plans within their bounds.
func buildProfiles(c Config) (*profileSet, error) {
	matrix, err := c.matrix()
	if err != nil {
		return nil, err
	}
	set := &profileSet{byName: map[string]*profile{}, routes: map[string]*profile{}}
	globals := globalWindows{}
	built := make([]*profile, 0, len(c.Profiles))
	for _, pc := range c.Profiles {
		p, err := buildProfile(pc, matrix, globals)
		if err != nil {
			return nil, err
		}
		if err := set.addRoutes(p, pc.Routes); err != nil {
			return nil, err
		}
		set.byName[p.Name] = p
		built = append(built, p)
	}
	set.globalShared = globalLogShared(built)
	for _, p := range built {
		if err := set.layKeys(p, "profiles["+p.Name+"]"); err != nil {
			return nil, err
		}
	}
	if err := checkFacade(c.Facade); err != nil {
		return nil, err
	}
	if set.plans, err = buildPlans(c, set); err != nil {
		return nil, err
	}
	return set, nil
}

// buildProfile converts and checks one profile.
func buildProfile(pc ProfileConfig, matrix domain.DegradedMatrix, globals globalWindows) (*profile, error) {
	path := "profiles[" + pc.Name + "]"
	if err := checkEnum(path+".family", pc.Family); err != nil {
		return nil, err
	}
	p := &profile{action: matrix.Action(pc.Family)}
	p.Name, p.Family, p.Cost = pc.Name, pc.Family, max(pc.Cost, 1)
	if pc.Settle != nil {
		p.settle, p.reserving = *pc.Settle, true
	}
	p.allot = pc.Allotments != AllotmentsOff
	for _, dw := range dimensionWindows(pc.Windows) {
		if len(dw.windows) == 0 {
			continue
		}
		ws := make([]domain.Window, 0, len(dw.windows))
		for i, wc := range dw.windows {
			p.allot = p.allot && wc.Allotments != AllotmentsOff
			wpath := fmt.Sprintf("%s.windows.%s[%d]", path, dw.dim, i)
			w, err := wc.window(wpath)
			if err != nil {
				return nil, err
			}
			if dw.dim == domain.DimensionTenantGlobal {
				if err := globals.check(w, pc.Name, wpath); err != nil {
					return nil, err
				}
			}
			ws = append(ws, w)
		}
		p.Dimensions = append(p.Dimensions, domain.DimensionWindows{Dimension: dw.dim, Windows: ws})
	}
	if err := p.finish(path); err != nil {
		return nil, err
	}
	return p, nil
}

// finish checks the windows as a whole and derives minLimit, the lease
// TTL and the degraded cap. A concurrency window takes one slot per
// request whatever its cost, so the cost is checked against the rate
// windows only.
func (p *profile) finish(path string) error {
	total := 0
	p.minLimit, p.leaseTTL = 0, 0
	for _, d := range p.Dimensions {
		for i, w := range d.Windows {
			total++
			if w.Algorithm == domain.Concurrency {
				p.reserving = true
				if p.leaseTTL == 0 || w.Period < p.leaseTTL {
					p.leaseTTL = w.Period
				}
				continue
			}
			if p.minLimit == 0 || w.Limit < p.minLimit {
				p.minLimit = w.Limit
			}
			if p.Cost > w.Limit {
				return &domain.ConfigError{Field: path + ".cost", Reason: fmt.Sprintf("%d exceeds the limit %d of %s.windows.%s[%d]: no request could ever pass", p.Cost, w.Limit, path, d.Dimension, i)}
			}
		}
	}
	switch {
	case total == 0:
		return &domain.ConfigError{Field: path + ".windows", Reason: "needs at least one window"}
	case total > domain.MaxLimits:
		return &domain.ConfigError{Field: path + ".windows", Reason: fmt.Sprintf("%d windows, at most %d", total, domain.MaxLimits)}
	case p.minLimit == 0:
		// Concurrency windows only: the cost bounds nothing they count.
		p.minLimit = domain.MaxLimit
	}
	p.capWindow = capWindow(p.rateBurstLimit())
	return nil
}

// rateBurstLimit is RouteProfile.BurstLimit over the rate windows: a
// concurrency window's limit counts requests in flight, not a burst. A
// profile of concurrency windows only takes its smallest limit.
func (p *profile) rateBurstLimit() int64 {
	rates := domain.RouteProfile{}
	for _, d := range p.Dimensions {
		dw := domain.DimensionWindows{Dimension: d.Dimension}
		for _, w := range d.Windows {
			if w.Algorithm != domain.Concurrency {
				dw.Windows = append(dw.Windows, w)
			}
		}
		rates.Dimensions = append(rates.Dimensions, dw)
	}
	if b := rates.BurstLimit(); b > 0 {
		return b
	}
	return p.BurstLimit()
}

// capWindow is the degraded local cap for a burst limit.
func capWindow(burst int64) domain.Window {
	return domain.Window{
		Name:      capWindowName,
		Limit:     min(domain.DegradedCapFactor*burst, domain.MaxLimit),
		Period:    domain.DegradedCapPeriod,
		Algorithm: domain.GCRA,
	}
}

type dimWindows struct {
	dim     domain.Dimension
	windows []WindowConfig
}

// dimensionWindows lists a profile's windows in key-building order.
func dimensionWindows(w WindowsConfig) []dimWindows {
	return []dimWindows{
		{domain.DimensionIP, w.IP},
		{domain.DimensionUser, w.User},
		{domain.DimensionAPIKey, w.APIKey},
		{domain.DimensionTenant, w.Tenant},
		{domain.DimensionTenantGlobal, w.TenantGlobal},
	}
}

// globalWindows remembers each tenant_global window by name: every profile
// counts it on the same key, so every profile must mean the same window.
type globalWindows map[string]struct {
	w       domain.Window
	profile string
}

func (g globalWindows) check(w domain.Window, profile, path string) error {
	if prev, ok := g[w.Name]; ok && prev.w != w {
		return &domain.ConfigError{Field: path, Reason: fmt.Sprintf("tenant_global window %q differs from the one in profile %q: both count on the same key", w.Name, prev.profile)}
	}
	g[w.Name] = struct {
		w       domain.Window
		profile string
	}{w, profile}
	return nil
}

// layKeys computes p's key layout (docs/adr/015).
func (s *profileSet) layKeys(p *profile, path string) error {
	return p.layKeys(func(d domain.Dimension) bool {
		return d != domain.DimensionTenantGlobal || s.globalShared
	}, path)
}

// needReserver refuses, at boot, profiles that decide through
// reservations on a primary store that cannot reserve (docs/adr/012).
func (s *profileSet) needReserver(canReserve bool) error {
	if canReserve {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(s.byName)) {
		if s.byName[name].reserving {
			return &domain.ConfigError{Field: "profiles[" + name + "]", Reason: "has a concurrency window or settle rules, which need a primary store that reserves (ports.Reserver)"}
		}
	}
	return nil
}

// addRoutes maps each of the profile's routes to it.
func (s *profileSet) addRoutes(p *profile, routes []string) error {
	for i, r := range routes {
		field := "profiles[" + p.Name + "].routes[" + strconv.Itoa(i) + "]"
		method, rpath, err := parseRoute(r)
		if err != nil {
			return &domain.ConfigError{Field: field, Reason: err.Error()}
		}
		canon := routeKey(method, rpath)
		if other, ok := s.routes[canon]; ok {
			return &domain.ConfigError{Field: field, Reason: fmt.Sprintf("route %q is already limited by profile %q", r, other.Name)}
		}
		s.routes[canon] = p
		s.routes[r] = p
	}
	return nil
}

// matrix checks and returns the degraded matrix.
func (c Config) matrix() (domain.DegradedMatrix, error) {
	m := domain.DegradedMatrix{Read: c.Degraded.Read, Auth: c.Degraded.Auth, Costly: c.Degraded.Costly}
	for field, a := range map[string]domain.DegradedAction{"degraded.read": m.Read, "degraded.auth": m.Auth, "degraded.costly": m.Costly} {
		if err := checkEnum(field, a); err != nil {
			return m, err
		}
	}
	return m, nil
}

// checkEnum refuses a value outside its closed set (possible only in a
// Config built in code: YAML names are checked when decoded).
func checkEnum(field string, v encoding.TextMarshaler) error {
	if _, err := v.MarshalText(); err != nil {
		return &domain.ConfigError{Field: field, Reason: "unknown value", Err: err}
	}
	return nil
}

// window converts and checks one window.
func (wc WindowConfig) window(path string) (domain.Window, error) {
	w := domain.Window{Name: wc.Name, Limit: wc.Limit, Period: wc.Period, Algorithm: wc.Algorithm}
	return w, windowError(path, w.Validate())
}

// windowError turns a window's validation error into a ConfigError on its
// field.
func windowError(path string, err error) error {
	if err == nil {
		return nil
	}
	ce := &domain.ConfigError{Field: path, Reason: "is not a valid window", Err: err}
	var le *domain.LimitError
	if errors.As(err, &le) {
		ce.Field, ce.Reason = path+"."+le.Field, le.Reason
	}
	return ce
}

// resolve returns the profile of a route template, or a *ContextError:
// CauseRouteInvalid for a template that fails domain.ValidateRoute,
// CauseProfileMissing for a valid one no profile lists.
func (s *profileSet) resolve(route string) (*profile, error) {
	if p, ok := s.routes[route]; ok {
		return p, nil
	}
	method, path, err := parseRoute(route)
	if err != nil {
		return nil, &domain.ContextError{Cause: domain.CauseRouteInvalid, Detail: "route template does not parse"}
	}
	if method != "" {
		if p, ok := s.routes[routeKey(method, path)]; ok {
			return p, nil
		}
	}
	// A profile route without a method covers every method.
	if p, ok := s.routes[path]; ok {
		return p, nil
	}
	return nil, &domain.ContextError{Cause: domain.CauseProfileMissing, Detail: "no profile for the route template"}
}

// parseRoute splits a route template into an optional method and a
// canonical path, and validates the path with domain.ValidateRoute.
//
// It accepts net/http ServeMux patterns ("[METHOD ][HOST]/path/{id}"),
// Express-style templates ("/path/:id") and gRPC full methods
// ("/pkg.Service/Method"). ServeMux wildcards are rewritten in the Express
// form that the route pattern of docs/adr/005 admits — the pattern has no room
// for braces: {id} → :id, {rest...} → :rest*, and {$} is dropped. A host
// is dropped too: profiles are per path.
func parseRoute(s string) (method, path string, err error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		method, s = s[:i], strings.TrimLeft(s[i:], " \t")
		if !isMethod(method) {
			return "", "", fmt.Errorf("method %q is not an upper-case HTTP method token", method)
		}
	}
	if !strings.HasPrefix(s, "/") {
		// Only a ServeMux host ("api.example.org/…", "host:8080/…") may
		// precede the path; anything else fails the route pattern.
		i := strings.IndexByte(s, '/')
		if i < 0 || !strings.ContainsAny(s[:i], ".:") {
			return "", "", fmt.Errorf("route %q does not start with a path", s)
		}
		s = s[i:]
	}
	path = canonicalPath(s)
	if err := domain.ValidateRoute(path); err != nil {
		return "", "", fmt.Errorf("route path %q does not match %s", path, domain.RoutePattern)
	}
	return method, path, nil
}

func isMethod(m string) bool {
	if m == "" || len(m) > 20 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return false
		}
	}
	return true
}

// canonicalPath rewrites ServeMux wildcards in Express form.
func canonicalPath(s string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	var b strings.Builder
	for {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			break // left as is: the brace fails validation
		}
		b.WriteString(s[:open])
		name := s[open+1 : open+end]
		switch {
		case name == "$":
		case strings.HasSuffix(name, "..."):
			b.WriteString(":" + strings.TrimSuffix(name, "...") + "*")
		default:
			b.WriteString(":" + name)
		}
		s = s[open+end+1:]
	}
	b.WriteString(s)
	return b.String()
}

func routeKey(method, path string) string {
	if method == "" {
		return path
	}
	return method + " " + path
}

// CheckRoutes is a boot check (docs/adr/005): every exposed route
// (ServeMux patterns, gRPC full methods) must resolve to a profile. It
// returns a *domain.ConfigError wrapping ErrRouteWithoutProfile that lists
// every route left without one. c must be valid.
func (c Config) CheckRoutes(exposed []string) error {
	set, err := buildProfiles(c.WithDefaults())
	if err != nil {
		return err
	}
	return set.checkRoutes(exposed)
}

func (s *profileSet) checkRoutes(exposed []string) error {
	var missing, invalid []string
	for _, r := range exposed {
		if _, err := s.resolve(r); err != nil {
			if ce, ok := err.(*domain.ContextError); ok && ce.Cause == domain.CauseRouteInvalid {
				invalid = append(invalid, strconv.Quote(r))
			} else {
				missing = append(missing, strconv.Quote(r))
			}
		}
	}
	if len(missing) == 0 && len(invalid) == 0 {
		return nil
	}
	var reasons []string
	if len(missing) > 0 {
		reasons = append(reasons, "no profile for exposed route(s) "+strings.Join(missing, ", "))
	}
	if len(invalid) > 0 {
		reasons = append(reasons, "exposed route(s) "+strings.Join(invalid, ", ")+" cannot be limited: the path does not match "+domain.RoutePattern)
	}
	return &domain.ConfigError{Field: "profiles", Reason: strings.Join(reasons, "; "), Err: ErrRouteWithoutProfile}
}

package app

import (
	"fmt"
	"strconv"
	"strings"

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
}

// profileSet resolves route templates to profiles.
type profileSet struct {
	byName map[string]*profile
	// routes holds every configured route twice: as written (so that the
	// common case, a request carrying exactly a configured template, costs
	// one map lookup and no allocation) and in canonical form.
	routes map[string]*profile
}

// buildProfiles turns a validated Config into a profileSet, checking the
// rules that span fields: windows per dimension, costs against limits,
// tenant-global windows agreeing across profiles, routes parsing and
// belonging to one profile.
func buildProfiles(c Config) (*profileSet, error) {
	matrix, err := c.matrix()
	if err != nil {
		return nil, err
	}
	set := &profileSet{byName: map[string]*profile{}, routes: map[string]*profile{}}
	type globalWindow struct {
		w       domain.Window
		profile string
	}
	globals := map[string]globalWindow{}
	for _, pc := range c.Profiles {
		path := "profiles[" + pc.Name + "]"
		fam, err := domain.ParseRouteFamily(pc.Family)
		if err != nil {
			return nil, &domain.ConfigError{Field: path + ".family", Reason: err.Error()}
		}
		p := &profile{action: matrix.Action(fam)}
		p.Name, p.Family, p.Cost = pc.Name, fam, max(pc.Cost, 1)
		total := 0
		for _, dw := range []struct {
			dim     domain.Dimension
			windows []WindowConfig
		}{
			{domain.DimensionIP, pc.Windows.IP},
			{domain.DimensionUser, pc.Windows.User},
			{domain.DimensionAPIKey, pc.Windows.APIKey},
			{domain.DimensionTenant, pc.Windows.Tenant},
			{domain.DimensionTenantGlobal, pc.Windows.TenantGlobal},
		} {
			if len(dw.windows) == 0 {
				continue
			}
			ws := make([]domain.Window, 0, len(dw.windows))
			for i, wc := range dw.windows {
				wpath := fmt.Sprintf("%s.windows.%s[%d]", path, dw.dim, i)
				w, err := wc.window(wpath)
				if err != nil {
					return nil, err
				}
				if p.Cost > w.Limit {
					return nil, &domain.ConfigError{Field: path + ".cost", Reason: fmt.Sprintf("%d exceeds the limit %d of %s: no request could ever pass", p.Cost, w.Limit, wpath)}
				}
				if dw.dim == domain.DimensionTenantGlobal {
					if g, ok := globals[w.Name]; ok && g.w != w {
						return nil, &domain.ConfigError{Field: wpath, Reason: fmt.Sprintf("tenant_global window %q differs from the one in profile %q: both count on the same key", w.Name, g.profile)}
					}
					globals[w.Name] = globalWindow{w, pc.Name}
				}
				if p.minLimit == 0 || w.Limit < p.minLimit {
					p.minLimit = w.Limit
				}
				ws = append(ws, w)
			}
			total += len(ws)
			p.Dimensions = append(p.Dimensions, domain.DimensionWindows{Dimension: dw.dim, Windows: ws})
		}
		switch {
		case total == 0:
			return nil, &domain.ConfigError{Field: path + ".windows", Reason: "needs at least one window"}
		case total > domain.MaxLimits:
			return nil, &domain.ConfigError{Field: path + ".windows", Reason: fmt.Sprintf("%d windows, at most %d", total, domain.MaxLimits)}
		}
		p.capWindow = domain.Window{
			Name:      capWindowName,
			Limit:     min(domain.DegradedCapFactor*p.BurstLimit(), domain.MaxLimit),
			Period:    domain.DegradedCapPeriod,
			Algorithm: domain.GCRA,
		}
		for i, r := range pc.Routes {
			method, rpath, err := parseRoute(r)
			if err != nil {
				return nil, &domain.ConfigError{Field: path + ".routes[" + strconv.Itoa(i) + "]", Reason: err.Error()}
			}
			canon := routeKey(method, rpath)
			if other, ok := set.routes[canon]; ok {
				return nil, &domain.ConfigError{Field: path + ".routes[" + strconv.Itoa(i) + "]", Reason: fmt.Sprintf("route %q is already limited by profile %q", r, other.Name)}
			}
			set.routes[canon] = p
			set.routes[r] = p
		}
		set.byName[p.Name] = p
	}
	return set, nil
}

// matrix parses the degraded matrix.
func (c Config) matrix() (domain.DegradedMatrix, error) {
	var m domain.DegradedMatrix
	for _, cell := range []struct {
		field string
		v     string
		dst   *domain.DegradedAction
	}{
		{"degraded.read", c.Degraded.Read, &m.Read},
		{"degraded.auth", c.Degraded.Auth, &m.Auth},
		{"degraded.costly", c.Degraded.Costly, &m.Costly},
	} {
		a, err := domain.ParseDegradedAction(cell.v)
		if err != nil {
			return m, &domain.ConfigError{Field: cell.field, Reason: err.Error()}
		}
		*cell.dst = a
	}
	return m, nil
}

// window converts and checks one window.
func (wc WindowConfig) window(path string) (domain.Window, error) {
	alg, err := domain.ParseAlgorithm(wc.Algorithm)
	if err != nil {
		return domain.Window{}, &domain.ConfigError{Field: path + ".algorithm", Reason: err.Error()}
	}
	w := domain.Window{Name: wc.Name, Limit: wc.Limit, Period: wc.Period, Algorithm: alg}
	if err := w.Validate(); err != nil {
		ce := &domain.ConfigError{Field: path, Reason: "is not a valid window", Err: err}
		if le, ok := err.(*domain.LimitError); ok {
			ce.Field, ce.Reason = path+"."+le.Field, le.Reason
			if le.Field == "limit" && w.Limit < 1 {
				ce.Err = ErrZeroLimit
			}
		}
		return domain.Window{}, ce
	}
	return w, nil
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
// form that seed PD-172's route pattern admits — the pattern has no room
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

// CheckRoutes is the boot check of seed PD-172 §2.2: every exposed route
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

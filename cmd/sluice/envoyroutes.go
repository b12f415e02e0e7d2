package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/adapters/envoyrls"
)

// check -envoy-routes reads Envoy's own configuration for what it sends
// sluice-rls: the descriptors its routes' rate_limits actions build, and
// the domain of the rate-limit filter that sends them. Each descriptor
// shape is walked through sluice-rls's files by envoyrls.Config.Reach,
// the service's own matcher; a shape that reaches no limit is the mistake
// a shipped example made (issue 38): Envoy sends it, sluice-rls answers
// OK and counts nothing.
//
// The files are read with small typed YAML structs of the fields that
// matter, not go-control-plane's generated types through protojson: a
// bootstrap holds typed_config of any extension (filters, clusters,
// access logs), and protojson refuses a file whose every Any type is not
// linked into the binary; these structs read any Envoy configuration and
// skip what they do not name.

// envoyDoc is an Envoy configuration file: a bootstrap
// (static_resources), a RouteConfiguration (virtual_hosts) or a discovery
// file (resources) of listeners and route configurations.
type envoyDoc struct {
	StaticResources struct {
		Listeners []envoyListener `yaml:"listeners"`
	} `yaml:"static_resources"`
	Resources        []yaml.Node `yaml:"resources"`
	envoyRouteConfig `yaml:",inline"`
}

type envoyListener struct {
	Name         string             `yaml:"name"`
	FilterChains []envoyFilterChain `yaml:"filter_chains"`
	Default      *envoyFilterChain  `yaml:"default_filter_chain"`
}

type envoyFilterChain struct {
	Filters []envoyFilter `yaml:"filters"`
}

// envoyFilter is a network or HTTP filter; typed_config is decoded by
// its @type.
type envoyFilter struct {
	Name        string    `yaml:"name"`
	TypedConfig yaml.Node `yaml:"typed_config"`
}

type envoyHCM struct {
	RouteConfig *envoyRouteConfig `yaml:"route_config"`
	RDS         *struct {
		RouteConfigName string `yaml:"route_config_name"`
	} `yaml:"rds"`
	HTTPFilters []envoyFilter `yaml:"http_filters"`
}

// envoyRateLimitFilter is envoy.extensions.filters.http.ratelimit.v3's
// RateLimit (the filter) and RateLimitPerRoute (a route's override).
type envoyRateLimitFilter struct {
	Domain     string           `yaml:"domain"`
	Stage      uint32           `yaml:"stage"`
	RateLimits []envoyRateLimit `yaml:"rate_limits"`
}

type envoyRouteConfig struct {
	Name         string             `yaml:"name"`
	VirtualHosts []envoyVirtualHost `yaml:"virtual_hosts"`
}

type envoyVirtualHost struct {
	Name       string               `yaml:"name"`
	RateLimits []envoyRateLimit     `yaml:"rate_limits"`
	Routes     []envoyRoute         `yaml:"routes"`
	PerFilter  map[string]yaml.Node `yaml:"typed_per_filter_config"`
}

type envoyRoute struct {
	Name  string `yaml:"name"`
	Match struct {
		Prefix string `yaml:"prefix"`
		Path   string `yaml:"path"`
		Regex  struct {
			Regex string `yaml:"regex"`
		} `yaml:"safe_regex"`
	} `yaml:"match"`
	Route *struct {
		RateLimits []envoyRateLimit `yaml:"rate_limits"`
	} `yaml:"route"`
	PerFilter map[string]yaml.Node `yaml:"typed_per_filter_config"`
}

// envoyRateLimit is one rate_limits entry: one descriptor, an entry per
// action.
type envoyRateLimit struct {
	Stage   *uint32       `yaml:"stage"`
	Actions []envoyAction `yaml:"actions"`
	line    int
}

func (r *envoyRateLimit) UnmarshalYAML(n *yaml.Node) error {
	type plain envoyRateLimit
	if err := n.Decode((*plain)(r)); err != nil {
		return err
	}
	r.line = n.Line
	return nil
}

// envoyAction is config.route.v3.RateLimit.Action: one of its fields is
// set.
type envoyAction struct {
	SourceCluster       *struct{}              `yaml:"source_cluster"`
	DestinationCluster  *struct{}              `yaml:"destination_cluster"`
	RemoteAddress       *struct{}              `yaml:"remote_address"`
	MaskedRemoteAddress *struct{}              `yaml:"masked_remote_address"`
	RequestHeaders      *valueFrom             `yaml:"request_headers"`
	QueryParameters     *valueFrom             `yaml:"query_parameters"`
	Metadata            *valueFrom             `yaml:"metadata"`
	DynamicMetadata     *valueFrom             `yaml:"dynamic_metadata"`
	GenericKey          *fixedValue            `yaml:"generic_key"`
	HeaderValueMatch    *fixedValue            `yaml:"header_value_match"`
	QueryValueMatch     *fixedValue            `yaml:"query_parameter_value_match"`
	RemoteAddressMatch  *fixedValue            `yaml:"remote_address_match"`
	Extension           *struct{ Name string } `yaml:"extension"`
}

// valueFrom is an action whose value is the request's.
type valueFrom struct {
	HeaderName    string `yaml:"header_name"`
	ParameterName string `yaml:"query_parameter_name"`
	DescriptorKey string `yaml:"descriptor_key"`
	SkipIfAbsent  bool   `yaml:"skip_if_absent"`
	DefaultValue  string `yaml:"default_value"`
}

// fixedValue is an action whose value is configured.
type fixedValue struct {
	DescriptorKey   string `yaml:"descriptor_key"`
	DescriptorValue string `yaml:"descriptor_value"`
}

// shapeEntry is one entry of a descriptor Envoy builds: what Reach walks,
// how to show it, and whether Envoy may leave it out (skip_if_absent).
type shapeEntry struct {
	envoyrls.ShapeEntry
	label    string
	optional bool
}

// entry is the descriptor entry an action adds; ok is false for an
// extension (its key is the extension's) or an action this reader does
// not know.
func (a envoyAction) entry() (shapeEntry, bool) {
	dyn := func(key, label string, optional bool) (shapeEntry, bool) {
		return shapeEntry{ShapeEntry: envoyrls.ShapeEntry{Key: key, Dynamic: true}, label: label, optional: optional}, true
	}
	fixed := func(f *fixedValue, key string) (shapeEntry, bool) {
		if f.DescriptorKey != "" {
			key = f.DescriptorKey
		}
		return shapeEntry{ShapeEntry: envoyrls.ShapeEntry{Key: key, Value: f.DescriptorValue}, label: f.DescriptorValue}, true
	}
	switch {
	case a.SourceCluster != nil:
		return dyn("source_cluster", "<source cluster>", false)
	case a.DestinationCluster != nil:
		return dyn("destination_cluster", "<route's cluster>", false)
	case a.RemoteAddress != nil:
		return dyn("remote_address", "<client address>", false)
	case a.MaskedRemoteAddress != nil:
		return dyn("masked_remote_address", "<client address, masked>", false)
	case a.RequestHeaders != nil:
		return dyn(a.RequestHeaders.DescriptorKey, "<header "+a.RequestHeaders.HeaderName+">", a.RequestHeaders.SkipIfAbsent)
	case a.QueryParameters != nil:
		return dyn(a.QueryParameters.DescriptorKey, "<query "+a.QueryParameters.ParameterName+">", a.QueryParameters.SkipIfAbsent)
	case a.Metadata != nil:
		return dyn(a.Metadata.DescriptorKey, "<metadata>", a.Metadata.SkipIfAbsent && a.Metadata.DefaultValue == "")
	case a.DynamicMetadata != nil:
		return dyn(a.DynamicMetadata.DescriptorKey, "<metadata>", false)
	case a.GenericKey != nil:
		return fixed(a.GenericKey, "generic_key")
	case a.HeaderValueMatch != nil:
		return fixed(a.HeaderValueMatch, "header_match")
	case a.QueryValueMatch != nil:
		return fixed(a.QueryValueMatch, "query_match")
	case a.RemoteAddressMatch != nil:
		return fixed(a.RemoteAddressMatch, "remote_address_match")
	}
	return shapeEntry{}, false
}

// Envoy type URLs, matched by suffix.
const (
	typeHCM          = ".http_connection_manager.v3.HttpConnectionManager"
	typeRateLimit    = "envoy.extensions.filters.http.ratelimit.v3.RateLimit"
	typePerRoute     = "envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"
	typeListener     = "envoy.config.listener.v3.Listener"
	typeRouteConfig  = "envoy.config.route.v3.RouteConfiguration"
	rateLimitFilterN = "envoy.filters.http.ratelimit"
)

// typeOf is a typed_config's or resource's @type.
func typeOf(n *yaml.Node) string {
	var t struct {
		Type string `yaml:"@type"`
	}
	_ = n.Decode(&t)
	return t.Type
}

// rateLimits is one rate_limits entry found in a file, with where it is
// and the domains Envoy sends its descriptor to.
type rateLimits struct {
	file, where string
	rl          envoyRateLimit
	// domains are those of the rate-limit filters of its stage; nil when
	// the file names none (a RouteConfiguration alone): every configured
	// domain is then checked.
	domains []string
	// unsent says why Envoy never sends it ("" when it does).
	unsent string
}

// hcmFilters are an HTTP connection manager's rate-limit filters.
type hcmFilters struct {
	filters []envoyRateLimitFilter
	names   []string
}

// routeWalk is what collecting one file gathers.
type routeWalk struct {
	file  string
	found []rateLimits
	// rds maps a route configuration's name to the filters of the
	// connection managers that load it by RDS.
	rds     map[string]*hcmFilters
	routes  []envoyRouteConfig
	listens int
}

// readEnvoyFile reads one Envoy file, its keys in Envoy's snake_case
// (protojson also accepts lowerCamelCase: it is normalised first).
func readEnvoyFile(path string) (envoyDoc, error) {
	var doc envoyDoc
	b, err := readBounded(path)
	if err != nil {
		return doc, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return doc, fmt.Errorf("%s: empty", path)
		}
		return doc, fmt.Errorf("%s: %w", path, err)
	}
	snakeKeys(&root)
	if err := root.Decode(&doc); err != nil {
		return doc, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

var camelKey = regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$`)

// snakeKeys rewrites lowerCamelCase mapping keys as snake_case, in place.
func snakeKeys(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; camelKey.MatchString(k.Value) {
				var b strings.Builder
				for _, r := range k.Value {
					if r >= 'A' && r <= 'Z' {
						b.WriteByte('_')
						r += 'a' - 'A'
					}
					b.WriteRune(r)
				}
				k.Value = b.String()
			}
		}
	}
	for _, c := range n.Content {
		snakeKeys(c)
	}
}

// collect gathers the rate_limits entries of doc.
func (w *routeWalk) collect(doc envoyDoc) error {
	for _, l := range doc.StaticResources.Listeners {
		if err := w.listener(l); err != nil {
			return err
		}
	}
	for i := range doc.Resources {
		r := &doc.Resources[i]
		switch t := typeOf(r); {
		case strings.HasSuffix(t, typeListener):
			var l envoyListener
			if err := r.Decode(&l); err != nil {
				return fmt.Errorf("%s: resource %d: %w", w.file, i, err)
			}
			if err := w.listener(l); err != nil {
				return err
			}
		case strings.HasSuffix(t, typeRouteConfig):
			var rc envoyRouteConfig
			if err := r.Decode(&rc); err != nil {
				return fmt.Errorf("%s: resource %d: %w", w.file, i, err)
			}
			w.routes = append(w.routes, rc)
		}
	}
	if len(doc.VirtualHosts) > 0 {
		w.routes = append(w.routes, doc.envoyRouteConfig)
	}
	return nil
}

func (w *routeWalk) listener(l envoyListener) error {
	w.listens++
	chains := l.FilterChains
	if l.Default != nil {
		chains = append(chains, *l.Default)
	}
	for _, fc := range chains {
		for _, f := range fc.Filters {
			if !strings.HasSuffix(typeOf(&f.TypedConfig), typeHCM) {
				continue
			}
			var hcm envoyHCM
			if err := f.TypedConfig.Decode(&hcm); err != nil {
				return fmt.Errorf("%s: listener %s: %w", w.file, l.Name, err)
			}
			hf := &hcmFilters{}
			for _, h := range hcm.HTTPFilters {
				if !strings.HasSuffix(typeOf(&h.TypedConfig), typeRateLimit) {
					continue
				}
				var rf envoyRateLimitFilter
				if err := h.TypedConfig.Decode(&rf); err != nil {
					return fmt.Errorf("%s: listener %s: filter %s: %w", w.file, l.Name, h.Name, err)
				}
				hf.filters = append(hf.filters, rf)
				hf.names = append(hf.names, h.Name)
				for _, rl := range rf.RateLimits {
					w.found = append(w.found, rateLimits{file: w.file, where: fmt.Sprintf("listener %s, filter %s", l.Name, h.Name), rl: rl, domains: []string{rf.Domain}})
				}
			}
			switch {
			case hcm.RouteConfig != nil:
				w.routeConfig(*hcm.RouteConfig, "listener "+l.Name+", ", hf)
			case hcm.RDS != nil:
				w.rds[hcm.RDS.RouteConfigName] = hf
			}
		}
	}
	return nil
}

// routeConfig gathers rc's rate_limits; hf are the rate-limit filters of
// its connection manager, nil when unknown.
func (w *routeWalk) routeConfig(rc envoyRouteConfig, where string, hf *hcmFilters) {
	for _, vh := range rc.VirtualHosts {
		at := where + "virtual host " + vh.Name
		override := perRoute(vh.PerFilter)
		w.add(at, vh.RateLimits, hf, override)
		for i, r := range vh.Routes {
			rat := fmt.Sprintf("%s, route %s", at, routeName(i, r))
			o := override
			if po := perRoute(r.PerFilter); po != nil {
				o = po
			}
			if r.Route != nil {
				w.add(rat, r.Route.RateLimits, hf, o)
			}
			if o != nil && o != override {
				w.add(rat+" (typed_per_filter_config)", o.RateLimits, hf, o)
			}
		}
		if override != nil {
			w.add(at+" (typed_per_filter_config)", override.RateLimits, hf, override)
		}
	}
}

// perRoute is the RateLimitPerRoute among a route's or a virtual host's
// typed_per_filter_config, nil without.
func perRoute(m map[string]yaml.Node) *envoyRateLimitFilter {
	for _, n := range m {
		if strings.HasSuffix(typeOf(&n), typePerRoute) {
			var o envoyRateLimitFilter
			if n.Decode(&o) == nil {
				return &o
			}
		}
	}
	return nil
}

func routeName(i int, r envoyRoute) string {
	name := fmt.Sprint(i)
	if r.Name != "" {
		name = r.Name
	}
	switch {
	case r.Match.Prefix != "":
		return name + " (prefix " + r.Match.Prefix + ")"
	case r.Match.Path != "":
		return name + " (path " + r.Match.Path + ")"
	case r.Match.Regex.Regex != "":
		return name + " (regex " + r.Match.Regex.Regex + ")"
	}
	return name
}

// add records rls as sent by the filters of hf of each one's stage, to
// the domain of override when it names one.
func (w *routeWalk) add(where string, rls []envoyRateLimit, hf *hcmFilters, override *envoyRateLimitFilter) {
	for _, rl := range rls {
		r := rateLimits{file: w.file, where: where, rl: rl}
		stage := uint32(0)
		if rl.Stage != nil {
			stage = *rl.Stage
		}
		if hf != nil {
			r.domains = []string{}
			for _, f := range hf.filters {
				if f.Stage != stage {
					continue
				}
				d := f.Domain
				if override != nil && override.Domain != "" {
					d = override.Domain
				}
				if !slices.Contains(r.domains, d) {
					r.domains = append(r.domains, d)
				}
			}
			switch {
			case len(hf.filters) == 0:
				r.unsent = "its connection manager has no " + rateLimitFilterN + " filter"
			case len(r.domains) == 0:
				r.unsent = fmt.Sprintf("no %s filter of its connection manager has stage %d", rateLimitFilterN, stage)
			}
		}
		w.found = append(w.found, r)
	}
}

// envoyLimitsOut is one descriptor a rate_limits entry sends, and what it
// reaches.
type envoyLimitsOut struct {
	File  string `json:"file"`
	Line  int    `json:"line,omitempty"`
	Where string `json:"where"`
	// Domain is "" when the entry is never sent (Note says why).
	Domain     string       `json:"domain,omitempty"`
	Descriptor string       `json:"descriptor"`
	Reaches    []envoyReach `json:"reaches"`
	Note       string       `json:"note,omitempty"`
}

// envoyReach is a limit a descriptor reaches, and the values it needs.
type envoyReach struct {
	Limit string `json:"limit"`
	Name  string `json:"name,omitempty"`
	Rate  string `json:"rate"`
	When  string `json:"when,omitempty"`
}

// checkEnvoyRoutes lists what each rate_limits entry of Envoy's files
// sends and reaches in rls, warning on a descriptor that reaches no
// limit. A route configuration on its own is sent to the domains of the
// connection managers that load it by RDS in the other files, else
// checked against every configured domain.
func checkEnvoyRoutes(out *checkOut, rls *envoyrls.Config, files []string) error {
	var walks []*routeWalk
	rds := map[string]*hcmFilters{}
	for _, f := range files {
		doc, err := readEnvoyFile(f)
		if err != nil {
			return fail(exitUsage, fmt.Errorf("-envoy-routes %w", err))
		}
		w := &routeWalk{file: f, rds: map[string]*hcmFilters{}}
		if err := w.collect(doc); err != nil {
			return fail(exitUsage, fmt.Errorf("-envoy-routes %w", err))
		}
		if w.listens == 0 && len(w.routes) == 0 {
			return usageErr("-envoy-routes %s: neither a bootstrap, a listener nor a route configuration (no static_resources, resources or virtual_hosts)", f)
		}
		maps.Copy(rds, w.rds)
		walks = append(walks, w)
	}
	var found []rateLimits
	for _, w := range walks {
		for _, rc := range w.routes {
			w.routeConfig(rc, "route configuration "+rc.Name+", ", rds[rc.Name])
		}
		found = append(found, w.found...)
	}
	if len(found) == 0 {
		out.Warnings = append(out.Warnings, "-envoy-routes: no rate_limits entry: Envoy sends sluice-rls nothing")
	}
	for _, r := range found {
		out.EnvoyLimits = append(out.EnvoyLimits, reachOf(out, rls, r)...)
	}
	return nil
}

// reachOf is what r's descriptor reaches in each of its domains; every
// configured domain when r names none.
func reachOf(out *checkOut, rls *envoyrls.Config, r rateLimits) []envoyLimitsOut {
	var shape []shapeEntry
	for _, a := range r.rl.Actions {
		e, ok := a.entry()
		if !ok {
			shape = append(shape, shapeEntry{ShapeEntry: envoyrls.ShapeEntry{Key: "?"}, label: "<extension>"})
			return []envoyLimitsOut{{File: r.file, Line: r.rl.line, Where: r.where, Descriptor: describeShape(shape),
				Note: "an action check does not know (an extension, or a newer Envoy's): not checked"}}
		}
		shape = append(shape, e)
	}
	if r.unsent != "" {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s: the rate_limits descriptor [%s] (%s) is never sent: %s", r.locus(), describeShape(shape), r.where, r.unsent))
		return []envoyLimitsOut{{File: r.file, Line: r.rl.line, Where: r.where, Descriptor: describeShape(shape), Note: "never sent: " + r.unsent}}
	}
	domains := r.domains
	if domains == nil {
		domains = rls.Domains()
	}
	var rows []envoyLimitsOut
	for _, d := range domains {
		for i, variant := range variants(shape) {
			row := envoyLimitsOut{File: r.file, Line: r.rl.line, Where: r.where, Domain: d, Descriptor: describeShape(variant), Reaches: []envoyReach{}}
			entries := make([]envoyrls.ShapeEntry, len(variant))
			for j, e := range variant {
				entries[j] = e.ShapeEntry
			}
			reached, stop, err := rls.Reach(d, entries)
			switch {
			case errors.Is(err, envoyrls.ErrUnknownDomain):
				row.Note = "domain not configured: sluice-rls answers OK to every descriptor of it"
				out.Warnings = append(out.Warnings, fmt.Sprintf("%s: %s sends domain %q, which -envoy-config does not configure: sluice-rls limits none of its requests", r.locus(), r.where, d))
			case len(reached) == 0 && i == 0:
				row.Note = "reaches no limit"
				out.Warnings = append(out.Warnings, fmt.Sprintf("%s: the rate_limits descriptor [%s] (%s) reaches no limit of domain %s: Envoy sends it, sluice-rls answers OK and counts nothing. %s",
					r.locus(), row.Descriptor, r.where, d, stopHint(rls, d, variant, stop)))
			case len(reached) == 0:
				row.Note = "reaches no limit (sent when an optional entry is absent)"
			}
			for _, x := range reached {
				row.Reaches = append(row.Reaches, reachOut(x, variant))
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func (r rateLimits) locus() string {
	if r.rl.line > 0 {
		return fmt.Sprintf("%s:%d", r.file, r.rl.line)
	}
	return r.file
}

// variants are the descriptors Envoy may send for shape: all of it
// first, then without each combination of its optional entries (at most
// four of them), never empty.
func variants(shape []shapeEntry) [][]shapeEntry {
	var opt []int
	for i, e := range shape {
		if e.optional {
			opt = append(opt, i)
		}
	}
	if len(opt) > 4 {
		opt = nil
	}
	var out [][]shapeEntry
	for mask := 0; mask < 1<<len(opt); mask++ {
		var v []shapeEntry
		for i, e := range shape {
			if j := slices.Index(opt, i); j >= 0 && mask&(1<<j) != 0 {
				continue
			}
			v = append(v, e)
		}
		if len(v) > 0 {
			out = append(out, v)
		}
	}
	return out
}

func describeShape(shape []shapeEntry) string {
	parts := make([]string, len(shape))
	for i, e := range shape {
		parts[i] = e.Key + "=" + e.label
	}
	return strings.Join(parts, ",")
}

func reachOut(x envoyrls.Reached, shape []shapeEntry) envoyReach {
	l := x.Limit
	rate := fmt.Sprintf("%d/%s", l.RequestsPerUnit, strings.ToLower(l.Unit))
	if l.UnitMultiplier > 1 {
		rate = fmt.Sprintf("%d per %d %s", l.RequestsPerUnit, l.UnitMultiplier, strings.ToLower(l.Unit))
	}
	switch {
	case l.Unlimited:
		rate = "unlimited"
	case l.Block:
		rate = "blocked"
	}
	var when []string
	for i, v := range x.Values {
		if shape[i].Dynamic && v != "" {
			when = append(when, shape[i].Key+"="+v)
		}
	}
	return envoyReach{Limit: l.Path, Name: l.Name, Rate: rate, When: strings.Join(when, ",")}
}

// stopHint says where the walk of a shape that reaches nothing stopped,
// and whether its stopping key alone would reach a limit.
func stopHint(rls *envoyrls.Config, domain string, shape []shapeEntry, stop envoyrls.Stop) string {
	if stop.Entry >= len(shape) {
		return "Every entry matches a descriptor, but the last one has no rate_limit."
	}
	e := shape[stop.Entry]
	where := "at the top level"
	if stop.Entry > 0 {
		where = "under " + describeShape(shape[:stop.Entry])
	}
	declared := "none"
	if len(stop.Declared) > 0 {
		declared = strings.Join(stop.Declared, ", ")
	}
	hint := fmt.Sprintf("%s matches no descriptor declared %s (declared there: %s).", e.Key, where, declared)
	if stop.Entry > 0 {
		if alone, _, _ := rls.Reach(domain, []envoyrls.ShapeEntry{e.ShapeEntry}); len(alone) > 0 {
			hint += fmt.Sprintf(" %s is a top-level descriptor: send it in a rate_limits entry of its own, or nest it under %s in the rate-limit file.", e.Key, shape[stop.Entry-1].Key)
		}
	}
	return hint
}

package envoyrls

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Sentinel errors wrapped by the *domain.ConfigError of the boot failures
// callers tell apart. Every one also matches domain.ErrInvalidConfig.
var (
	// ErrUnlimited: a rate_limit says unlimited: true. A limit that never
	// limits is an allow list, which sluice does not have (docs/adr/005).
	ErrUnlimited = errors.New("unlimited limits are allow lists, which sluice does not have")
	// ErrUnknownField: the YAML names a field the format does not have.
	ErrUnknownField = errors.New("unknown configuration field")
	// ErrDuplicateDomain: two files configure one domain, or two domains
	// share a route key.
	ErrDuplicateDomain = errors.New("domain configured twice")
)

// DomainFile is one configuration file: envoyproxy/ratelimit's format (one
// domain, nested descriptors) plus sluice's own fields, each optional.
type DomainFile struct {
	// Domain is the domain Envoy's requests name.
	Domain string `yaml:"domain"`
	// Descriptors are the top-level descriptors.
	Descriptors []DescriptorConfig `yaml:"descriptors"`

	// HashTagKey (sluice) names the descriptor entry whose value scopes
	// every key of a request: its Redis Cluster hash tag, so a request is
	// one slot and one store call (docs/adr/011). Empty: the domain alone.
	HashTagKey string `yaml:"hash_tag_key"`
	// UnscopedKeys (sluice) names descriptor keys counted across scopes:
	// a request descriptor whose first entry's key is listed, and which
	// does not carry the hash_tag_key entry, counts per its own entries
	// whatever the request's scope (an ip across tenants), under a hash
	// tag of its own. Other descriptors without that entry count per the
	// request's scope. Needs hash_tag_key (docs/adr/011).
	UnscopedKeys []string `yaml:"unscoped_keys"`
	// Degraded (sluice) is what the domain's requests get while the store
	// cannot answer: "bypass" (allowed under a per-instance cap, the
	// default), "deny" or "local" (docs/adr/005).
	Degraded string `yaml:"degraded"`
	// LimitOverrideCeiling (sluice) is the highest rate a descriptor's
	// limit override may ask for; an override above it is lowered to it.
	// Without it overrides are ignored and the configured limit applies.
	LimitOverrideCeiling *RateConfig `yaml:"limit_override_ceiling"`
}

// DescriptorConfig is one descriptor of the tree: a key, an optional
// value, an optional limit and nested descriptors.
type DescriptorConfig struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// RateLimit is the limit of a request descriptor that ends here.
	RateLimit *RateLimitConfig `yaml:"rate_limit"`
	// ShadowMode decides and counts but never refuses for this limit.
	ShadowMode bool `yaml:"shadow_mode"`
	// DetailedMetric is accepted for compatibility and changes nothing:
	// sluice never puts a descriptor's value in a metric label.
	DetailedMetric bool `yaml:"detailed_metric"`
	// Replaces names limits this one replaces in a request that matches
	// both: the replaced limits are not counted.
	Replaces    []ReplaceConfig    `yaml:"replaces"`
	Descriptors []DescriptorConfig `yaml:"descriptors"`
}

// ReplaceConfig names a replaced limit.
type ReplaceConfig struct {
	Name string `yaml:"name"`
}

// RateConfig is a rate: requests per unit (times unit_multiplier).
type RateConfig struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit int64  `yaml:"requests_per_unit"`
	UnitMultiplier  int64  `yaml:"unit_multiplier"`
}

// RateLimitConfig is a descriptor's limit.
type RateLimitConfig struct {
	RateConfig `yaml:",inline"`
	// Name names the limit for replaces, the response's current_limit and
	// the window (made to fit [a-z0-9_-]{1,32}; default: the descriptor's
	// key).
	Name string `yaml:"name"`
	// Unlimited is refused (ErrUnlimited).
	Unlimited bool `yaml:"unlimited"`
	// Algorithm (sluice) is "sliding_log" (the default: exact) or "gcra".
	Algorithm string `yaml:"algorithm"`
}

// Config is the loaded, validated configuration: every domain's rules.
type Config struct {
	domains map[string]*domainRules
}

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// domainRules is one domain, compiled.
type domainRules struct {
	name     string
	routeKey string
	tagKey   string
	unscoped map[string]bool
	action   domain.DegradedAction
	ceiling  *rate
	root     *node
}

// node is one level of the descriptor tree. A request entry matches the
// exact key_value first, then a value ending in '*' as a prefix, then the
// key alone (any value), as envoyproxy/ratelimit does.
type node struct {
	exact    map[string]*node
	prefixes []prefixNode
	any      map[string]*node
	rule     *rule
}

type prefixNode struct {
	key, prefix string
	next        *node
}

// rate is requests per period, with the unit Envoy is told.
type rate struct {
	limit  int64
	period time.Duration
	unit   string // "SECOND", "MINUTE"...
	mult   uint32
}

// rule is a configured limit.
type rule struct {
	name     string // as configured, for replaces and current_limit
	window   domain.Window
	unit     string
	mult     uint32
	shadow   bool
	replaces []string
}

// units are the periods of Envoy's RateLimitUnit. A month counts 30 days
// and a year 365: a sliding window has no calendar.
var units = map[string]time.Duration{
	"SECOND": time.Second, "MINUTE": time.Minute, "HOUR": time.Hour, "DAY": 24 * time.Hour,
	"WEEK": 7 * 24 * time.Hour, "MONTH": 30 * 24 * time.Hour, "YEAR": 365 * 24 * time.Hour,
}

var (
	nameUnsafe    = regexp.MustCompile(`[^a-z0-9_-]+`)
	unknownFieldR = regexp.MustCompile(`field (\S+) not found`)
)

// LoadConfig reads path: one YAML file, or every *.yaml and *.yml file of
// a directory (envoyproxy/ratelimit's layout, one domain per file).
func LoadConfig(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &domain.ConfigError{Field: "(file)", Reason: "cannot be read", Err: err}
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(path, pat))
			files = append(files, m...)
		}
		slices.Sort(files)
		if len(files) == 0 {
			return nil, &domain.ConfigError{Field: "(file)", Reason: "no *.yaml or *.yml file in " + path}
		}
	}
	docs := make([][]byte, 0, len(files))
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			return nil, &domain.ConfigError{Field: "(file)", Reason: "cannot be read: " + filepath.Base(f), Err: err}
		}
		docs = append(docs, b)
	}
	return ParseConfig(docs...)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, app.MaxConfigBytes+1))
	if err == nil && len(b) > app.MaxConfigBytes {
		err = fmt.Errorf("larger than %d bytes", app.MaxConfigBytes)
	}
	return b, err
}

// ParseConfig reads one YAML document per domain and validates them all:
// every failure is a *domain.ConfigError naming the field (e.g.
// "mongo_cps.descriptors[0].rate_limit.unit"), unknown fields included.
func ParseConfig(docs ...[]byte) (*Config, error) {
	c := &Config{domains: map[string]*domainRules{}}
	routeKeys := map[string]string{}
	for _, data := range docs {
		var f DomainFile
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			if m := unknownFieldR.FindStringSubmatch(err.Error()); m != nil {
				return nil, &domain.ConfigError{Field: m[1], Reason: "unknown field", Err: fmt.Errorf("%w: %w", ErrUnknownField, err)}
			}
			return nil, &domain.ConfigError{Field: "(document)", Reason: "not valid YAML for this format", Err: err}
		}
		d, err := compileDomain(&f)
		if err != nil {
			return nil, err
		}
		if _, dup := c.domains[d.name]; dup {
			return nil, &domain.ConfigError{Field: "domain", Reason: d.name, Err: ErrDuplicateDomain}
		}
		if other, dup := routeKeys[d.routeKey]; dup {
			return nil, &domain.ConfigError{Field: "domain", Reason: fmt.Sprintf("%s and %s share the route key %s", other, d.name, d.routeKey), Err: ErrDuplicateDomain}
		}
		c.domains[d.name], routeKeys[d.routeKey] = d, d.name
	}
	return c, nil
}

// compileDomain validates one file and builds its tree.
func compileDomain(f *DomainFile) (*domainRules, error) {
	if f.Domain == "" {
		return nil, &domain.ConfigError{Field: "domain", Reason: "required"}
	}
	d := &domainRules{name: f.Domain, routeKey: sanitise(f.Domain, 64), tagKey: f.HashTagKey, action: domain.ActionBypass}
	field := func(s string) string { return f.Domain + "." + s }
	for i, k := range f.UnscopedKeys {
		at := fmt.Sprintf("%s[%d]", field("unscoped_keys"), i)
		switch {
		case f.HashTagKey == "":
			return nil, &domain.ConfigError{Field: at, Reason: "needs hash_tag_key: without it every descriptor counts across the domain already"}
		case k == "" || k == f.HashTagKey:
			return nil, &domain.ConfigError{Field: at, Reason: "a descriptor key other than hash_tag_key"}
		}
		if d.unscoped == nil {
			d.unscoped = map[string]bool{}
		}
		d.unscoped[k] = true
	}
	if f.Degraded != "" {
		a, err := domain.ParseDegradedAction(f.Degraded)
		if err != nil {
			return nil, &domain.ConfigError{Field: field("degraded"), Reason: "bypass, deny or local", Err: err}
		}
		d.action = a
	}
	if f.LimitOverrideCeiling != nil {
		r, err := compileRate(f.LimitOverrideCeiling, field("limit_override_ceiling"))
		if err != nil {
			return nil, err
		}
		d.ceiling = &r
	}
	root, err := compileLevel(f.Descriptors, field("descriptors"))
	if err != nil {
		return nil, err
	}
	d.root = root
	return d, nil
}

// compileLevel builds one level of the tree.
func compileLevel(ds []DescriptorConfig, path string) (*node, error) {
	n := &node{exact: map[string]*node{}, any: map[string]*node{}}
	for i := range ds {
		dc := &ds[i]
		at := fmt.Sprintf("%s[%d]", path, i)
		if dc.Key == "" {
			return nil, &domain.ConfigError{Field: at + ".key", Reason: "required"}
		}
		next, err := compileLevel(dc.Descriptors, at+".descriptors")
		if err != nil {
			return nil, err
		}
		if dc.RateLimit != nil {
			if next.rule, err = compileRule(dc, at); err != nil {
				return nil, err
			}
		}
		switch {
		case dc.Value == "":
			if n.any[dc.Key] != nil {
				return nil, &domain.ConfigError{Field: at + ".key", Reason: "duplicate descriptor " + dc.Key}
			}
			n.any[dc.Key] = next
		case strings.HasSuffix(dc.Value, "*"):
			n.prefixes = append(n.prefixes, prefixNode{key: dc.Key, prefix: strings.TrimSuffix(dc.Value, "*"), next: next})
		default:
			k := dc.Key + "_" + dc.Value
			if n.exact[k] != nil {
				return nil, &domain.ConfigError{Field: at + ".value", Reason: "duplicate descriptor " + k}
			}
			n.exact[k] = next
		}
	}
	return n, nil
}

// compileRule validates a descriptor's rate_limit.
func compileRule(dc *DescriptorConfig, at string) (*rule, error) {
	rl := dc.RateLimit
	at += ".rate_limit"
	if rl.Unlimited {
		return nil, &domain.ConfigError{Field: at + ".unlimited", Reason: "refused", Err: ErrUnlimited}
	}
	r, err := compileRate(&rl.RateConfig, at)
	if err != nil {
		return nil, err
	}
	alg := domain.SlidingLog
	if rl.Algorithm != "" {
		if alg, err = domain.ParseAlgorithm(rl.Algorithm); err != nil {
			return nil, &domain.ConfigError{Field: at + ".algorithm", Reason: "sliding_log or gcra", Err: err}
		}
	}
	// The window's name: the limit's own, else its descriptor's key, so
	// that the policy names of one response tell the descriptors apart.
	name := sanitise(cmp.Or(rl.Name, dc.Key), 32)
	w := domain.Window{Name: name, Limit: r.limit, Period: r.period, Algorithm: alg}
	if err := w.Validate(); err != nil {
		return nil, &domain.ConfigError{Field: at + ".requests_per_unit", Reason: "no store can honour it", Err: err}
	}
	ru := &rule{name: rl.Name, window: w, unit: r.unit, mult: r.mult, shadow: dc.ShadowMode}
	for j, rp := range dc.Replaces {
		if rp.Name == "" {
			return nil, &domain.ConfigError{Field: fmt.Sprintf("%s.replaces[%d].name", strings.TrimSuffix(at, ".rate_limit"), j), Reason: "required"}
		}
		ru.replaces = append(ru.replaces, rp.Name)
	}
	return ru, nil
}

// compileRate validates a rate.
func compileRate(rc *RateConfig, at string) (rate, error) {
	u := strings.ToUpper(rc.Unit)
	period, ok := units[u]
	switch {
	case !ok:
		return rate{}, &domain.ConfigError{Field: at + ".unit", Reason: "second, minute, hour, day, week, month or year"}
	case rc.RequestsPerUnit < 1 || rc.RequestsPerUnit > domain.MaxLimit:
		return rate{}, &domain.ConfigError{Field: at + ".requests_per_unit", Reason: fmt.Sprintf("1 to %d", domain.MaxLimit)}
	case rc.UnitMultiplier < 0 || rc.UnitMultiplier > math.MaxUint32:
		return rate{}, &domain.ConfigError{Field: at + ".unit_multiplier", Reason: "at least 1"}
	}
	mult := max(rc.UnitMultiplier, 1)
	if period > domain.MaxPeriod/time.Duration(mult) {
		return rate{}, &domain.ConfigError{Field: at + ".unit_multiplier", Reason: fmt.Sprintf("the period must be at most %s", domain.MaxPeriod)}
	}
	return rate{limit: rc.RequestsPerUnit, period: period * time.Duration(mult), unit: u, mult: uint32(mult)}, nil
}

// sanitise makes a name fit [a-z0-9_-]{1,n}: lower case, other runs of
// characters as '_'.
func sanitise(s string, n int) string {
	s = nameUnsafe.ReplaceAllString(strings.ToLower(s), "_")
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// match walks the tree with a request descriptor's entries and returns
// the rule of the node it ends on, nil when it matches no limit.
func (d *domainRules) match(keys, values []string) *rule {
	n := d.root
	for i, k := range keys {
		next := n.exact[k+"_"+values[i]]
		if next == nil {
			for _, p := range n.prefixes {
				if p.key == k && strings.HasPrefix(values[i], p.prefix) {
					next = p.next
					break
				}
			}
		}
		if next == nil {
			next = n.any[k]
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n.rule
}

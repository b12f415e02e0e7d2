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
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Sentinel errors wrapped by the *domain.ConfigError of the boot failures
// callers tell apart. Every one also matches domain.ErrInvalidConfig.
var (
	// ErrUnlimited: a rate_limit says unlimited: true, or requests_per_unit
	// 0, and LoadOptions.AcceptUnlimited is not set. A limit that never
	// limits is an allow list, which sluice does not have (docs/adr/005,
	// docs/adr/011).
	ErrUnlimited = errors.New("unlimited limits and requests_per_unit 0 load only with -accept-unlimited (docs/adr/011)")
	// ErrUnknownField: the YAML names a field the format does not have.
	ErrUnknownField = errors.New("unknown configuration field")
	// ErrDuplicateDomain: two files configure one domain (without
	// LoadOptions.MergeDomains), or two domains share a route key.
	ErrDuplicateDomain = errors.New("domain configured twice")
	// ErrDuplicateDescriptor: one level of a domain's tree declares a
	// key (and value, or wildcard value) twice, in one file or across the
	// merged files of a domain.
	ErrDuplicateDescriptor = errors.New("duplicate descriptor")
	// ErrReplacesSelf: a limit's replaces names the limit itself.
	ErrReplacesSelf = errors.New("replaces names the limit itself")
)

// FileError is a refused configuration file: it names the file, and the
// domain and the descriptor (its composite key, e.g.
// "key1_value1.subkey1", as envoyproxy/ratelimit names it) where it has
// them. It wraps the *domain.ConfigError naming the field, so errors.As
// and errors.Is(err, domain.ErrInvalidConfig) see through it.
type FileError struct {
	// File is the file's path as it was loaded (or "document N" for
	// ParseConfig's unnamed documents).
	File string
	// Domain is the file's domain, "" before it is known.
	Domain string
	// Descriptor is the descriptor's composite key within the domain,
	// "" when the error is not a descriptor's.
	Descriptor string
	// Err is the *domain.ConfigError.
	Err error
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Domain != "" {
		b.WriteString(": domain " + e.Domain)
	}
	if e.Descriptor != "" {
		b.WriteString(": descriptor " + e.Descriptor)
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// LoadOptions are the loader's settings, envoyproxy/ratelimit's where it
// has one.
type LoadOptions struct {
	// MergeDomains merges the files that configure one domain into one
	// tree (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a descriptor
	// declared in two of them is still refused. Without it a domain in two
	// files is refused (ErrDuplicateDomain). sluice's own fields
	// (hash_tag_key, unscoped_keys, degraded, limit_override_ceiling) may
	// be set in one file of a merged domain, or the same in several.
	MergeDomains bool
	// AcceptUnlimited loads envoyproxy/ratelimit's two limits that never
	// count (docs/adr/011): unlimited: true, a descriptor answered OK with
	// no limit (as one without rate_limit is), whose replaces are refused
	// (they would drop another limit: an allow list); and
	// requests_per_unit: 0, a block: every request it matches is
	// OVER_LIMIT and counts nowhere. Neither can admit a request a limit
	// would refuse. Without it both are refused (ErrUnlimited).
	AcceptUnlimited bool
}

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
// value (exact, or a pattern whose '*' match any run of characters), an
// optional limit and nested descriptors.
type DescriptorConfig struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// RateLimit is the limit of a request descriptor that ends here.
	RateLimit *RateLimitConfig `yaml:"rate_limit"`
	// ShadowMode decides and counts but never refuses for this limit.
	ShadowMode bool `yaml:"shadow_mode"`
	// QuotaMode: this limit is one of the request's quotas. A quota over
	// its limit is OVER_LIMIT in its status, and refuses the request only
	// when every quota of the request is (envoyproxy/ratelimit's
	// quota_mode); the others are counted.
	QuotaMode bool `yaml:"quota_mode"`
	// DetailedMetric and ValueToMetric are accepted for compatibility and
	// change nothing: sluice never puts a descriptor's value in a metric
	// label.
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	// ShareThreshold: every value the wildcard value matches counts in
	// one window (the pattern's), not one window per value. Only with a
	// value containing '*'.
	ShareThreshold bool `yaml:"share_threshold"`
	// Metadata is returned, merged over the request's admitted
	// descriptors, in the response's dynamic_metadata when the service
	// sends it (Options.DynamicMetadata).
	Metadata map[string]any `yaml:"metadata"`
	// Replaces here (sluice's first placement) is the same as
	// rate_limit.replaces, envoyproxy/ratelimit's.
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
	// Replaces names limits this one replaces in a request that matches
	// both: the replaced limits are not counted.
	Replaces []ReplaceConfig `yaml:"replaces"`
	// Unlimited loads only with LoadOptions.AcceptUnlimited.
	Unlimited bool `yaml:"unlimited"`
	// Algorithm (sluice) is "sliding_log" (the default: exact) or "gcra".
	Algorithm string `yaml:"algorithm"`
	// Allotments (sluice), "off", decides every request that counts this
	// limit at the store, never from an allotment (docs/adr/019); "" or
	// "on" (the default) lets allotments start on a descriptor hot on an
	// instance and far from its limit.
	Allotments string `yaml:"allotments"`
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
	// own is the sluice fields' rendering, which merged files must share.
	own string
}

// node is one level of the descriptor tree. A request entry matches the
// exact key and value first, then the wildcard values of its key in the
// order they were declared, then the key alone (any value), as
// envoyproxy/ratelimit does.
type node struct {
	exact map[string]*node
	// values lists each key's exact values in declared order: what a
	// descriptor entry whose value is not known matches (Config.Reach).
	values    map[string][]string
	wildcards []wildcardNode
	any       map[string]*node
	rule      *rule
	// seen holds every composite key (key, or key_value) declared here.
	seen map[string]bool
	// shareThreshold: a value matched through this wildcard counts as
	// the pattern.
	shareThreshold bool
	pattern        string
	metadata       *structpb.Struct
}

// wildcardNode is a wildcard value, split on '*' when loaded.
type wildcardNode struct {
	key   string
	parts []string
	next  *node
}

func newNode() *node {
	return &node{exact: map[string]*node{}, values: map[string][]string{}, any: map[string]*node{}, seen: map[string]bool{}}
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
	quota    bool
	replaces []string
	// unlimited: the descriptor has no limit (AcceptUnlimited).
	unlimited bool
	// block: requests_per_unit 0, every request refused (AcceptUnlimited).
	block bool
	// path is the descriptor's composite key, for Lookup.
	path string
	// noAllot: allotments off for the limit (RateLimitConfig.Allotments).
	noAllot bool
}

// units are the periods of Envoy's RateLimitUnit. A month counts 30 days
// and a year 365: a sliding window has no calendar.
var units = map[string]time.Duration{
	"SECOND": time.Second, "MINUTE": time.Minute, "HOUR": time.Hour, "DAY": 24 * time.Hour,
	"WEEK": 7 * 24 * time.Hour, "MONTH": 30 * 24 * time.Hour, "YEAR": 365 * 24 * time.Hour,
}

var (
	nameUnsafe    = regexp.MustCompile(`[^a-z0-9_-]+`)
	unknownFieldR = regexp.MustCompile(`line (\d+): field (\S+) not found`)
)

// File is one named configuration document.
type File struct {
	// Name names the file in errors.
	Name string
	Data []byte
}

// LoadConfig reads path with the default LoadOptions: one YAML file, or
// every *.yaml and *.yml file of a directory (envoyproxy/ratelimit's
// layout, one domain per file).
func LoadConfig(path string) (*Config, error) { return LoadConfigWith(path, LoadOptions{}) }

// LoadConfigWith reads path as LoadConfig does, under o. Every error names
// the file (*FileError), and the domain and descriptor where it has them.
func LoadConfigWith(path string, o LoadOptions) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &FileError{File: path, Err: &domain.ConfigError{Field: "(file)", Reason: "cannot be read", Err: err}}
	}
	names := []string{path}
	if st.IsDir() {
		names = nil
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(path, pat))
			names = append(names, m...)
		}
		slices.Sort(names)
		if len(names) == 0 {
			return nil, &FileError{File: path, Err: &domain.ConfigError{Field: "(file)", Reason: "no *.yaml or *.yml file in the directory"}}
		}
	}
	files := make([]File, 0, len(names))
	for _, n := range names {
		b, err := readBounded(n)
		if err != nil {
			return nil, &FileError{File: n, Err: &domain.ConfigError{Field: "(file)", Reason: "cannot be read", Err: err}}
		}
		files = append(files, File{Name: n, Data: b})
	}
	return ParseFiles(o, files...)
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

// ParseConfig reads one YAML document per domain with the default
// LoadOptions; errors name the documents "document 1", "document 2"...
func ParseConfig(docs ...[]byte) (*Config, error) {
	files := make([]File, len(docs))
	for i, d := range docs {
		files[i] = File{Name: fmt.Sprintf("document %d", i+1), Data: d}
	}
	return ParseFiles(LoadOptions{}, files...)
}

// ParseFiles reads and validates files under o: every failure is a
// *FileError naming the file, the domain and the descriptor where it has
// them, around a *domain.ConfigError naming the field (e.g.
// "mongo_cps.descriptors[0].rate_limit.unit"), unknown fields included.
func ParseFiles(o LoadOptions, files ...File) (*Config, error) {
	c := &Config{domains: map[string]*domainRules{}}
	routeKeys := map[string]string{}
	for _, file := range files {
		d, err := parseFile(c, o, file.Data)
		if err != nil {
			fe := &FileError{Err: err}
			if !errors.As(err, &fe) {
				err = fe
			}
			fe.File = file.Name
			return nil, err
		}
		if _, merged := c.domains[d.name]; merged {
			continue
		}
		if other, dup := routeKeys[d.routeKey]; dup {
			return nil, &FileError{File: file.Name, Domain: d.name, Err: &domain.ConfigError{Field: "domain", Reason: fmt.Sprintf("%s and %s share the route key %s", other, d.name, d.routeKey), Err: ErrDuplicateDomain}}
		}
		c.domains[d.name], routeKeys[d.routeKey] = d, d.name
	}
	return c, nil
}

// parseFile decodes one file and compiles it, into the domain c already
// holds when o merges domains.
func parseFile(c *Config, o LoadOptions, data []byte) (*domainRules, error) {
	var f DomainFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		var ce *domain.ConfigError
		switch m := unknownFieldR.FindStringSubmatch(err.Error()); {
		case m != nil:
			ce = &domain.ConfigError{Field: m[2], Reason: "unknown field at line " + m[1], Err: fmt.Errorf("%w: %w", ErrUnknownField, err)}
		case errors.Is(err, io.EOF):
			return nil, &domain.ConfigError{Field: "domain", Reason: "required (the file is empty)"}
		default:
			ce = &domain.ConfigError{Field: "(document)", Reason: "not valid YAML for this format", Err: err}
		}
		// The domain, when the file names one, tells which file this is.
		var named struct {
			Domain string `yaml:"domain"`
		}
		if yaml.Unmarshal(data, &named) == nil && named.Domain != "" {
			return nil, inDomain(named.Domain, ce)
		}
		return nil, ce
	}
	if f.Domain == "" {
		return nil, &domain.ConfigError{Field: "domain", Reason: "required"}
	}
	d, err := compileDomain(&f)
	if err != nil {
		return nil, inDomain(f.Domain, err)
	}
	if prev := c.domains[f.Domain]; prev != nil {
		switch {
		case !o.MergeDomains:
			return nil, &FileError{Domain: f.Domain, Err: &domain.ConfigError{Field: "domain", Reason: "configured in another file too (merge them with -merge-domain-config)", Err: ErrDuplicateDomain}}
		case d.own != "" && prev.own != "" && d.own != prev.own:
			return nil, &FileError{Domain: f.Domain, Err: &domain.ConfigError{Field: "domain", Reason: "merged files set different sluice fields (hash_tag_key, unscoped_keys, degraded, limit_override_ceiling): set them in one file", Err: ErrDuplicateDomain}}
		case d.own != "":
			prev.tagKey, prev.unscoped, prev.action, prev.ceiling, prev.own = d.tagKey, d.unscoped, d.action, d.ceiling, d.own
		}
		d = prev
	}
	l := level{domain: f.Domain, path: f.Domain + ".descriptors", opts: o}
	if err := l.compile(d.root, f.Descriptors); err != nil {
		return nil, inDomain(f.Domain, err)
	}
	return d, nil
}

// inDomain names the domain in err, a *FileError or not.
func inDomain(name string, err error) error {
	var fe *FileError
	if !errors.As(err, &fe) {
		return &FileError{Domain: name, Err: err}
	}
	fe.Domain = name
	return err
}

// compileDomain validates a file's own fields.
func compileDomain(f *DomainFile) (*domainRules, error) {
	d := &domainRules{name: f.Domain, routeKey: sanitise(f.Domain, 64), tagKey: f.HashTagKey, action: domain.ActionBypass, root: newNode()}
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
	if f.HashTagKey != "" || len(f.UnscopedKeys) > 0 || f.Degraded != "" || f.LimitOverrideCeiling != nil {
		d.own = fmt.Sprint(f.HashTagKey, f.UnscopedKeys, f.Degraded, ceilingString(f.LimitOverrideCeiling))
	}
	return d, nil
}

func ceilingString(r *RateConfig) string {
	if r == nil {
		return ""
	}
	return fmt.Sprint(*r)
}

// level is where compile is in a file: the domain, the field path and the
// descriptor's composite key.
type level struct {
	domain, path, key string
	opts              LoadOptions
}

// descriptorError wraps err with the descriptor's composite key.
func (l level) descriptorError(key string, err error) error {
	var fe *FileError
	if errors.As(err, &fe) {
		return err
	}
	return &FileError{Descriptor: key, Err: err}
}

// compile adds descriptors to n (a new node, or a merged domain's).
func (l level) compile(n *node, ds []DescriptorConfig) error {
	for i := range ds {
		dc := &ds[i]
		at := fmt.Sprintf("%s[%d]", l.path, i)
		if dc.Key == "" {
			return l.descriptorError(strings.TrimPrefix(l.key+".(empty key)", "."), &domain.ConfigError{Field: at + ".key", Reason: "required"})
		}
		final := dc.Key
		if dc.Value != "" {
			final += "_" + dc.Value
		}
		key := strings.TrimPrefix(l.key+"."+final, ".")
		fail := func(err error) error { return l.descriptorError(key, err) }
		if n.seen[final] {
			field := at + ".key"
			if dc.Value != "" {
				field = at + ".value"
			}
			return fail(&domain.ConfigError{Field: field, Reason: "declared twice at this level", Err: ErrDuplicateDescriptor})
		}
		n.seen[final] = true
		wild := strings.Contains(dc.Value, "*")
		if dc.ShareThreshold && !wild {
			return fail(&domain.ConfigError{Field: at + ".share_threshold", Reason: "only with a wildcard value (containing '*')"})
		}
		next := newNode()
		next.shareThreshold, next.pattern = dc.ShareThreshold, dc.Value
		if len(dc.Metadata) > 0 {
			md, err := structpb.NewStruct(dc.Metadata)
			if err != nil {
				return fail(&domain.ConfigError{Field: at + ".metadata", Reason: "not a map of strings, numbers, booleans, lists and maps", Err: err})
			}
			next.metadata = md
		}
		if dc.RateLimit != nil {
			r, err := l.compileRule(dc, at)
			if err != nil {
				return fail(err)
			}
			r.path = l.domain + "." + key
			next.rule = r
		} else if len(dc.Replaces) > 0 {
			return fail(&domain.ConfigError{Field: at + ".replaces", Reason: "replaces belongs to a limit: this descriptor has no rate_limit"})
		}
		sub := level{domain: l.domain, path: at + ".descriptors", key: key, opts: l.opts}
		if err := sub.compile(next, dc.Descriptors); err != nil {
			return err
		}
		switch {
		case dc.Value == "":
			n.any[dc.Key] = next
		case wild:
			n.wildcards = append(n.wildcards, wildcardNode{key: dc.Key, parts: strings.Split(dc.Value, "*"), next: next})
		default:
			n.exact[final] = next
			n.values[dc.Key] = append(n.values[dc.Key], dc.Value)
		}
	}
	return nil
}

// compileRule validates a descriptor's rate_limit.
func (l level) compileRule(dc *DescriptorConfig, at string) (*rule, error) {
	rl := dc.RateLimit
	rat := at + ".rate_limit"
	ru := &rule{name: rl.Name, shadow: dc.ShadowMode, quota: dc.QuotaMode}
	// replaces, in either placement: under rate_limit
	// (envoyproxy/ratelimit's) or beside it (sluice's first).
	for _, rs := range []struct {
		field string
		list  []ReplaceConfig
	}{{rat + ".replaces", rl.Replaces}, {at + ".replaces", dc.Replaces}} {
		for j, rp := range rs.list {
			f := fmt.Sprintf("%s[%d].name", rs.field, j)
			switch {
			case rp.Name == "":
				return nil, &domain.ConfigError{Field: f, Reason: "required"}
			case rp.Name == rl.Name:
				return nil, &domain.ConfigError{Field: f, Reason: rp.Name, Err: ErrReplacesSelf}
			}
			ru.replaces = append(ru.replaces, rp.Name)
		}
	}
	if rl.Unlimited {
		switch {
		case !l.opts.AcceptUnlimited:
			return nil, &domain.ConfigError{Field: rat + ".unlimited", Reason: "refused", Err: ErrUnlimited}
		case rl.Unit != "" || rl.RequestsPerUnit != 0 || rl.UnitMultiplier != 0 || rl.Algorithm != "":
			return nil, &domain.ConfigError{Field: rat + ".unit", Reason: "an unlimited limit has no unit, requests_per_unit, unit_multiplier or algorithm"}
		case len(ru.replaces) > 0:
			return nil, &domain.ConfigError{Field: rat + ".replaces", Reason: "an unlimited limit that replaces another is an allow list, which sluice does not have", Err: ErrUnlimited}
		}
		ru.unlimited = true
		ru.window.Name = sanitise(cmp.Or(rl.Name, dc.Key), 32)
		return ru, nil
	}
	block := rl.RequestsPerUnit == 0
	if block && !l.opts.AcceptUnlimited {
		return nil, &domain.ConfigError{Field: rat + ".requests_per_unit", Reason: "0 (a block list) is refused", Err: ErrUnlimited}
	}
	rc := rl.RateConfig
	if block {
		rc.RequestsPerUnit = 1 // validates the unit; the rule never counts
	}
	r, err := compileRate(&rc, rat)
	if err != nil {
		return nil, err
	}
	switch rl.Allotments {
	case "", "on":
	case "off":
		ru.noAllot = true
	default:
		return nil, &domain.ConfigError{Field: rat + ".allotments", Reason: fmt.Sprintf("%q is not on or off", rl.Allotments)}
	}
	alg := domain.SlidingLog
	if rl.Algorithm != "" {
		if alg, err = domain.ParseAlgorithm(rl.Algorithm); err != nil {
			return nil, &domain.ConfigError{Field: rat + ".algorithm", Reason: "sliding_log or gcra", Err: err}
		}
	}
	// The window's name: the limit's own, else its descriptor's key, so
	// that the policy names of one response tell the descriptors apart.
	name := sanitise(cmp.Or(rl.Name, dc.Key), 32)
	w := domain.Window{Name: name, Limit: r.limit, Period: r.period, Algorithm: alg}
	if err := w.Validate(); err != nil {
		return nil, &domain.ConfigError{Field: rat + ".requests_per_unit", Reason: "no store can honour it", Err: err}
	}
	ru.window, ru.unit, ru.mult, ru.block = w, r.unit, r.mult, block
	if block {
		ru.window.Limit = 0
	}
	return ru, nil
}

// compileRate validates a rate.
func compileRate(rc *RateConfig, at string) (rate, error) {
	u := strings.ToUpper(rc.Unit)
	period, ok := units[u]
	switch {
	case !ok:
		return rate{}, &domain.ConfigError{Field: at + ".unit", Reason: fmt.Sprintf("%q is not second, minute, hour, day, week, month or year", rc.Unit)}
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

// wildcardMatch reports whether value matches a pattern split on '*':
// each '*' matches any run of characters, the empty one included.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// matched is what a request descriptor's walk of the tree found.
type matched struct {
	rule *rule
	// shared[i] is the wildcard pattern entry i counts as
	// (share_threshold), "" for its own value.
	shared   []string
	metadata *structpb.Struct
}

// match walks the tree with a request descriptor's entries: exact key and
// value, then the key's wildcard values in declared order, then the key
// alone, as envoyproxy/ratelimit does. The rule is the last entry's
// node's; nil when the walk stops short or ends on no limit.
func (d *domainRules) match(keys, values []string) matched {
	var m matched
	n := d.root
	for i, k := range keys {
		next, wild := n.step(k, values[i])
		if next == nil {
			return matched{}
		}
		if wild && next.shareThreshold {
			if m.shared == nil {
				m.shared = make([]string, len(keys))
			}
			m.shared[i] = next.pattern
		}
		n = next
	}
	m.rule, m.metadata = n.rule, n.metadata
	return m
}

// step is one entry's move down the tree from n: the exact key and value,
// then the key's wildcard values in declared order (wild), then the key
// alone; nil when none matches.
func (n *node) step(k, v string) (next *node, wild bool) {
	if next = n.exact[k+"_"+v]; next != nil {
		return next, false
	}
	for _, w := range n.wildcards {
		if w.key == k && wildcardMatch(w.parts, v) {
			return w.next, true
		}
	}
	return n.any[k], false
}

// Limit is the limit a request descriptor matches (Config.Lookup).
type Limit struct {
	// Path is the matched descriptor's composite key, as
	// envoyproxy/ratelimit names it: "domain.key_value.subkey", a
	// wildcard value as its pattern ("test-domain.wild_foo*").
	Path string
	// Name is the limit's configured name, "" when it has none.
	Name string
	// RequestsPerUnit, Unit (SECOND, MINUTE...) and UnitMultiplier are its
	// rate; RequestsPerUnit is 0 for a block.
	RequestsPerUnit int64
	Unit            string
	UnitMultiplier  uint32
	// Unlimited and Block: the two limits AcceptUnlimited loads.
	Unlimited, Block bool
	// ShadowMode and QuotaMode are the descriptor's.
	ShadowMode, QuotaMode bool
	// Replaces are the names of the limits it replaces.
	Replaces []string
	// SharedAs[i] is the wildcard pattern entry i counts as under
	// share_threshold, "" when it counts its own value; nil without any.
	SharedAs []string
	// Metadata is the descriptor's metadata, nil without.
	Metadata *structpb.Struct
}

// Lookup returns the limit that entries (key, value pairs) match in the
// domain, as ShouldRateLimit matches a request descriptor; false when the
// domain is not configured or the descriptor matches no limit.
func (c *Config) Lookup(domainName string, entries ...[2]string) (Limit, bool) {
	d := c.domains[domainName]
	if d == nil || len(entries) == 0 {
		return Limit{}, false
	}
	keys, values := make([]string, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		keys[i], values[i] = e[0], e[1]
	}
	m := d.match(keys, values)
	if m.rule == nil {
		return Limit{}, false
	}
	return m.limit(), true
}

// limit is the Limit of a walk that matched a rule.
func (m matched) limit() Limit {
	r := m.rule
	return Limit{
		Path: r.path, Name: r.name, RequestsPerUnit: r.window.Limit, Unit: r.unit, UnitMultiplier: r.mult,
		Unlimited: r.unlimited, Block: r.block, ShadowMode: r.shadow, QuotaMode: r.quota,
		Replaces: r.replaces, SharedAs: m.shared, Metadata: m.metadata,
	}
}

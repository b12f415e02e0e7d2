package app

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/domain"
)

// Environment variables read by LoadConfig and ParseConfig. A non-empty
// value overrides the file.
const (
	EnvRedisURL   = "REDIS_URL"
	EnvHMACSecret = "RATE_LIMIT_HMAC_SECRET"
)

// Defaults applied to zero fields by Config.WithDefaults.
const (
	DefaultStoreTimeout    = 50 * time.Millisecond
	DefaultProbeInterval   = 10 * time.Second
	DefaultProbeTimeout    = time.Second
	DefaultBreakerFailures = 5
	DefaultFacadePeriod    = time.Minute
	// DefaultFacadeProfile is the profile name (route key and metric label)
	// of decisions taken through the ADR-002 façades.
	DefaultFacadeProfile = "facade"
)

// Sentinel errors wrapped by the *domain.ConfigError of the boot failures
// that callers and tests tell apart. Every ConfigError also matches
// domain.ErrInvalidConfig.
var (
	// ErrSecretMissing: no HMAC secret in the file or RATE_LIMIT_HMAC_SECRET.
	ErrSecretMissing = errors.New("HMAC secret missing")
	// ErrSecretShort: the secret is valid hex but under 32 bytes.
	ErrSecretShort = errors.New("HMAC secret shorter than 32 bytes")
	// ErrSecretMalformed: the secret is not hex, or longer than 32 bytes.
	ErrSecretMalformed = errors.New("HMAC secret is not 64 hex characters")
	// ErrUnknownField: the YAML names a field Config does not have.
	ErrUnknownField = errors.New("unknown configuration field")
	// ErrRouteWithoutProfile: an exposed route has no profile (CheckRoutes).
	ErrRouteWithoutProfile = errors.New("exposed route without a profile")
	// ErrZeroLimit: a window's limit is below 1, which would refuse every
	// request.
	ErrZeroLimit = errors.New("window limit below 1")
)

// Secret is a configuration value that must never be printed: String and
// GoString redact it, so a Config can be logged with %v or %+v.
type Secret string

// String returns a redacted placeholder.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString returns a redacted placeholder.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// Config is the whole configuration of a Limiter: loaded once at boot from
// YAML plus environment, validated, never reloaded (seed PD-172 forbids hot
// reload). Zero durations and counts mean the documented defaults; there is
// no per-identifier allow list or bypass, by design.
type Config struct {
	// RedisURL is the primary store's address (REDIS_URL). The Limiter does
	// not dial it: the composition root builds the store from it.
	RedisURL string `yaml:"redis_url" validate:"omitempty,url"`
	// HMACSecret is 32 bytes as 64 hex characters (RATE_LIMIT_HMAC_SECRET).
	// It has no default: boot fails without it. Rotating it resets every
	// counter, since every key changes.
	HMACSecret Secret `yaml:"hmac_secret"`
	// StoreTimeout is the deadline of one store call (default 50 ms).
	StoreTimeout time.Duration `yaml:"store_timeout" validate:"min=1ms,max=10s"`
	// ProbeInterval is the health loop's period (default 10 s).
	ProbeInterval time.Duration `yaml:"probe_interval" validate:"min=1ms,max=1h"`
	// ProbeTimeout bounds one probe (default 1 s, at most ProbeInterval).
	ProbeTimeout time.Duration `yaml:"probe_timeout" validate:"min=1ms,ltefield=ProbeInterval"`
	// ClearingProbes is how many good probes in a row take the system from
	// DEGRADED back to HEALTHY (default 3; 1 behaves as 2, see
	// domain.NewHealthMachine).
	ClearingProbes int `yaml:"clearing_probes" validate:"min=1,max=1000"`
	// BreakerFailures is how many consecutive in-band store failures open
	// the breaker between probes (default 5).
	BreakerFailures int `yaml:"breaker_failures" validate:"min=1,max=100000"`
	// RedisMemoryBudgetMB, when set, is checked against Redis maxmemory at
	// boot; a smaller or unreadable maxmemory is a warning (Limiter.Warnings).
	RedisMemoryBudgetMB int64 `yaml:"redis_memory_budget_mb" validate:"min=0"`
	// ShadowMode decides and records every request but never blocks one: the
	// one global switch for rollouts.
	ShadowMode bool `yaml:"shadow_mode"`
	// InstanceID names this instance in metrics (default: the host name).
	InstanceID string `yaml:"instance_id" validate:"omitempty,max=128,printascii"`
	// Degraded is the degraded matrix: what each route family does while
	// the store cannot answer.
	Degraded DegradedConfig `yaml:"degraded"`
	// Profiles are the route profiles. Every exposed route needs one.
	Profiles []ProfileConfig `yaml:"profiles" validate:"required,min=1,unique=Name,dive"`
	// Facade configures the ADR-002 compatibility façades.
	Facade FacadeConfig `yaml:"facade"`
}

// DegradedConfig is the degraded matrix: "bypass", "deny" or "local" per
// route family. Defaults: read bypass, auth deny, costly deny (seed PD-172).
type DegradedConfig struct {
	Read   string `yaml:"read" validate:"omitempty,oneof=bypass deny local"`
	Auth   string `yaml:"auth" validate:"omitempty,oneof=bypass deny local"`
	Costly string `yaml:"costly" validate:"omitempty,oneof=bypass deny local"`
}

// ProfileConfig is one route profile.
type ProfileConfig struct {
	// Name is the profile's name, also its route key in store keys and its
	// metric label: 1 to 64 of [a-z0-9_-].
	Name string `yaml:"name" validate:"required,routekey"`
	// Family is "read", "auth" or "costly".
	Family string `yaml:"family" validate:"required,oneof=read auth costly"`
	// Routes are the route templates this profile limits: a path template
	// ("/api/v1/users/{id}" or "/api/v1/users/:id"), optionally preceded by
	// a method ("GET /api/v1/users/{id}"), or a gRPC full method
	// ("/pkg.Service/Method").
	Routes []string `yaml:"routes" validate:"required,min=1,dive,required,max=300"`
	// Cost is the units one request consumes (default 1).
	Cost int64 `yaml:"cost" validate:"min=0"`
	// Windows are the windows per dimension.
	Windows WindowsConfig `yaml:"windows"`
}

// WindowsConfig lists a profile's windows per dimension. A dimension
// without windows is not checked for the profile; a dimension whose
// identifier a request lacks (no user, no tenant…) is skipped for it.
type WindowsConfig struct {
	IP     []WindowConfig `yaml:"ip" validate:"max=4,unique=Name,dive"`
	User   []WindowConfig `yaml:"user" validate:"max=4,unique=Name,dive"`
	APIKey []WindowConfig `yaml:"apikey" validate:"max=4,unique=Name,dive"`
	Tenant []WindowConfig `yaml:"tenant" validate:"max=4,unique=Name,dive"`
	// TenantGlobal windows count per tenant across every route; a window
	// name used here must mean the same window in every profile.
	TenantGlobal []WindowConfig `yaml:"tenant_global" validate:"max=4,unique=Name,dive"`
}

// WindowConfig is one window.
type WindowConfig struct {
	// Name is "burst", "sustained" or any 1 to 32 of [a-z0-9_-].
	Name string `yaml:"name" validate:"required,windowname"`
	// Limit is the units admitted per Period, at least 1.
	Limit int64 `yaml:"limit" validate:"min=1,max=1073741824"`
	// Period is the window's length, e.g. "1s", "1m".
	Period time.Duration `yaml:"period" validate:"required,min=1ms,max=8784h"`
	// Algorithm is "sliding_log" (default) or "gcra".
	Algorithm string `yaml:"algorithm" validate:"omitempty,oneof=sliding_log gcra"`
}

// FacadeConfig configures the ADR-002 façades (Allow, AllowDual).
type FacadeConfig struct {
	// Period is the window of both layers (default 1 minute).
	Period time.Duration `yaml:"period" validate:"min=1ms,max=8784h"`
	// Algorithm is "sliding_log" (default, ADR-002's ZSET semantics) or
	// "gcra".
	Algorithm string `yaml:"algorithm" validate:"omitempty,oneof=sliding_log gcra"`
	// Family labels façade decisions (default "read").
	Family string `yaml:"family" validate:"omitempty,oneof=read auth costly"`
	// Degraded is what façade calls do while the store cannot answer
	// (default "local": ADR-002's LocalDualLimiter).
	Degraded string `yaml:"degraded" validate:"omitempty,oneof=bypass deny local"`
}

// LookupEnv reads an environment variable; os.LookupEnv has this type.
// Tests pass a map-backed function.
type LookupEnv func(key string) (string, bool)

// LoadConfig reads the YAML file at path, overlays the environment (nil
// env means os.LookupEnv), applies defaults and validates. Every failure is
// a *domain.ConfigError (possibly several, joined) naming the field.
func LoadConfig(path string, env LookupEnv) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, &domain.ConfigError{Field: "(file)", Reason: "cannot be read", Err: err}
	}
	return ParseConfig(data, env)
}

// ParseConfig is LoadConfig on YAML already in memory. Unknown fields are
// errors (wrapping ErrUnknownField) with their full path.
func ParseConfig(data []byte, env LookupEnv) (Config, error) {
	var cfg Config
	var doc yaml.Node
	switch err := yaml.Unmarshal(data, &doc); {
	case err != nil:
		return Config{}, &domain.ConfigError{Field: "(document)", Reason: "is not valid YAML", Err: err}
	case len(doc.Content) > 0:
		if err := checkKnownFields(doc.Content[0], reflect.TypeFor[Config](), ""); err != nil {
			return Config{}, err
		}
		// KnownFields repeats the check above on the decoder's own terms,
		// so that a gap in the walk can never let a field through.
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, decodeError(err)
		}
		var extra yaml.Node
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			return Config{}, &domain.ConfigError{Field: "(document)", Reason: "must hold exactly one YAML document", Err: err}
		}
	}
	cfg.applyEnv(env)
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeError turns a YAML decoding failure (a type mismatch, an unknown
// field the walk missed) into a ConfigError.
func decodeError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, msg := range te.Errors {
			if strings.Contains(msg, "not found in type") {
				return &domain.ConfigError{Field: "(document)", Reason: "unknown field", Err: fmt.Errorf("%w: %s", ErrUnknownField, msg)}
			}
		}
	}
	return &domain.ConfigError{Field: "(document)", Reason: "does not decode", Err: err}
}

// checkKnownFields walks a YAML node against the type it decodes into and
// reports the first key no field carries, with its full path.
func checkKnownFields(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.AliasNode && n.Alias != nil:
		return checkKnownFields(n.Alias, t, path)
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			if key.Value == "<<" {
				// A merge key brings in another mapping's fields.
				if err := checkKnownFields(val, t, path); err != nil {
					return err
				}
				continue
			}
			f, ok := fieldByYAMLName(t, key.Value)
			if !ok {
				return &domain.ConfigError{
					Field:  joinPath(path, key.Value),
					Reason: fmt.Sprintf("unknown field (line %d)", key.Line),
					Err:    ErrUnknownField,
				}
			}
			if err := checkKnownFields(val, f.Type, joinPath(path, key.Value)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, el := range n.Content {
			name := strconv.Itoa(i)
			if path == "profiles" {
				name = profileName(el, i)
			}
			if err := checkKnownFields(el, t.Elem(), path+"["+name+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// profileName names a profile in a field path: its name when it has a
// valid one (profiles[login]), else its index, as Validate does.
func profileName(n *yaml.Node, i int) string {
	if n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "name" && n.Content[j+1].Kind == yaml.ScalarNode && routeKeyRE.MatchString(n.Content[j+1].Value) {
				return n.Content[j+1].Value
			}
		}
	}
	return strconv.Itoa(i)
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func yamlName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "" {
		return strings.ToLower(f.Name)
	}
	return tag
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// applyEnv overlays the environment on the file: a non-empty variable
// wins. An empty one counts as unset, as shells and container runtimes
// often export empty placeholders.
func (c *Config) applyEnv(env LookupEnv) {
	if env == nil {
		env = os.LookupEnv
	}
	if v, ok := env(EnvRedisURL); ok && v != "" {
		c.RedisURL = v
	}
	if v, ok := env(EnvHMACSecret); ok && v != "" {
		c.HMACSecret = Secret(v)
	}
}

// WithDefaults returns a copy of c with every zero duration, count and
// choice set to its documented default. The HMAC secret has no default.
func (c Config) WithDefaults() Config {
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = min(DefaultProbeTimeout, c.ProbeInterval)
	}
	if c.ClearingProbes == 0 {
		c.ClearingProbes = domain.DefaultClearingProbes
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.InstanceID == "" {
		if h, err := os.Hostname(); err == nil && len(h) <= 128 {
			c.InstanceID = h
		} else {
			c.InstanceID = "sluice"
		}
	}
	def := domain.DefaultDegradedMatrix()
	c.Degraded.Read = cmp(c.Degraded.Read, def.Read.String())
	c.Degraded.Auth = cmp(c.Degraded.Auth, def.Auth.String())
	c.Degraded.Costly = cmp(c.Degraded.Costly, def.Costly.String())
	if c.Facade.Period == 0 {
		c.Facade.Period = DefaultFacadePeriod
	}
	c.Facade.Algorithm = cmp(c.Facade.Algorithm, domain.SlidingLog.String())
	c.Facade.Family = cmp(c.Facade.Family, domain.FamilyRead.String())
	c.Facade.Degraded = cmp(c.Facade.Degraded, domain.ActionLocal.String())
	// Profiles are copied so that defaults never write through to the
	// caller's slice.
	c.Profiles = append([]ProfileConfig(nil), c.Profiles...)
	for i := range c.Profiles {
		if c.Profiles[i].Cost == 0 {
			c.Profiles[i].Cost = 1
		}
	}
	return c
}

// cmp returns v, or def when v is empty.
func cmp(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

var (
	routeKeyRE   = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	windowNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	validate     = newValidator()
)

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(yamlName)
	must := func(err error) {
		if err != nil {
			panic(err) // only a programming error in the tags below
		}
	}
	must(v.RegisterValidation("routekey", func(fl validator.FieldLevel) bool {
		return routeKeyRE.MatchString(fl.Field().String())
	}))
	must(v.RegisterValidation("windowname", func(fl validator.FieldLevel) bool {
		return windowNameRE.MatchString(fl.Field().String())
	}))
	return v
}

// Validate checks c as New will use it (apply WithDefaults first: zero
// durations are refused here). It returns nil or one or more
// *domain.ConfigError joined, each naming the field by its YAML path.
func (c Config) Validate() error {
	var errs []error
	if err := c.checkSecret(); err != nil {
		errs = append(errs, err)
	}
	if err := validate.Struct(c); err != nil {
		var verrs validator.ValidationErrors
		if !errors.As(err, &verrs) {
			return errors.Join(append(errs, &domain.ConfigError{Field: "(config)", Reason: "cannot be validated", Err: err})...)
		}
		for _, fe := range verrs {
			errs = append(errs, c.translate(fe))
		}
		return errors.Join(errs...)
	}
	// Cross-field rules the tags cannot express, once every field is sound.
	if _, err := buildProfiles(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SecretBytes decodes the HMAC secret.
func (c Config) SecretBytes() ([]byte, error) {
	if err := c.checkSecret(); err != nil {
		return nil, err
	}
	return hex.DecodeString(string(c.HMACSecret))
}

func (c Config) checkSecret() error {
	s := strings.TrimSpace(string(c.HMACSecret))
	want := 2 * domain.SecretLen
	switch {
	case s == "":
		return &domain.ConfigError{Field: "hmac_secret", Reason: "required: set " + EnvHMACSecret + " (32 random bytes as 64 hex characters); there is no default", Err: ErrSecretMissing}
	case !isHex(s):
		return &domain.ConfigError{Field: "hmac_secret", Reason: fmt.Sprintf("must be %d hex characters", want), Err: ErrSecretMalformed}
	case len(s) < want:
		return &domain.ConfigError{Field: "hmac_secret", Reason: fmt.Sprintf("too short: %d hex characters, want %d (32 bytes)", len(s), want), Err: ErrSecretShort}
	case len(s) > want:
		return &domain.ConfigError{Field: "hmac_secret", Reason: fmt.Sprintf("too long: %d hex characters, want %d (32 bytes)", len(s), want), Err: ErrSecretMalformed}
	case s != string(c.HMACSecret):
		return &domain.ConfigError{Field: "hmac_secret", Reason: "must not carry surrounding white space", Err: ErrSecretMalformed}
	}
	return nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// translate turns a validator failure into a ConfigError naming the YAML
// path, with profiles named rather than numbered where possible.
func (c Config) translate(fe validator.FieldError) error {
	field := fe.Namespace()
	if _, rest, ok := strings.Cut(field, "."); ok {
		field = rest // drop the root type name
	}
	field = c.nameProfiles(field)
	ce := &domain.ConfigError{Field: field, Reason: reason(fe)}
	if fe.Field() == "limit" && (fe.Tag() == "min") {
		ce.Reason = "must be at least 1: a limit of 0 would refuse every request"
		ce.Err = ErrZeroLimit
	}
	return ce
}

// nameProfiles rewrites "profiles[3]" as "profiles[login]".
func (c Config) nameProfiles(field string) string {
	rest, ok := strings.CutPrefix(field, "profiles[")
	if !ok {
		return field
	}
	idx, tail, ok := strings.Cut(rest, "]")
	if !ok {
		return field
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= len(c.Profiles) || !routeKeyRE.MatchString(c.Profiles[i].Name) {
		return field
	}
	return "profiles[" + c.Profiles[i].Name + "]" + tail
}

func reason(fe validator.FieldError) string {
	p := fe.Param()
	switch fe.Tag() {
	case "required":
		return "required"
	case "min":
		if fe.Kind() == reflect.Slice {
			return "needs at least " + p + " entries"
		}
		return "must be at least " + p
	case "max":
		if fe.Kind() == reflect.Slice || fe.Kind() == reflect.String {
			return "must have at most " + p + " entries or bytes"
		}
		return "must be at most " + p
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(p, " ", ", ")
	case "unique":
		return "names must be unique"
	case "url":
		return "must be a URL"
	case "routekey":
		return "must be 1 to 64 of [a-z0-9_-]"
	case "windowname":
		return "must be 1 to 32 of [a-z0-9_-]"
	case "ltefield":
		return "must not exceed probe_interval"
	case "printascii":
		return "must be printable ASCII"
	}
	return "fails " + fe.Tag()
}

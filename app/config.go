package app

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
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
	DefaultStoreTimeout = 50 * time.Millisecond
	// DefaultShedAfter bounds a decision's whole wait for the primary
	// store (see Config.ShedAfter): 40 store deadlines.
	DefaultShedAfter       = 2 * time.Second
	DefaultProbeInterval   = 10 * time.Second
	DefaultProbeTimeout    = time.Second
	DefaultBreakerFailures = 5
	// DefaultRecoveryProbeInterval is the health loop's period while the
	// instance is DEGRADED or RECOVERING (docs/adr/008).
	DefaultRecoveryProbeInterval = time.Second
	// DefaultPlanCeiling: a plan may raise a window's limit to at most 100
	// times the profile's own.
	DefaultPlanCeiling = 100
	// DefaultRefusalCacheSize is the number of refused key sets an instance
	// remembers (see Config.RefusalCacheSize).
	DefaultRefusalCacheSize = 1024
	// DefaultRefusalCacheTTL bounds how long an instance repeats a refusal
	// without asking the store (see Config.RefusalCacheTTL).
	DefaultRefusalCacheTTL = time.Second
	// DefaultAllotmentHold is how long an allotment may be spent (see
	// Config.AllotmentHold).
	DefaultAllotmentHold = time.Second
	// DefaultPseudonymCacheSize is the number of identifier pseudonyms an
	// instance remembers (see Config.PseudonymCacheSize).
	DefaultPseudonymCacheSize = 4096
	// DefaultFacadeProfile is the profile name (route key and metric label)
	// of decisions taken through the ADR-002 façades.
	DefaultFacadeProfile = "facade"
	// DefaultFacadePeriod is the period of the façade's default window on
	// each layer.
	DefaultFacadePeriod = time.Minute
	// DefaultReservationTTL is the lease TTL of a reservation without a
	// concurrency window (see Config.ReservationTTL).
	DefaultReservationTTL = time.Minute
	// DefaultSplitLeaseTTL is the lease TTL of the reservations that
	// decide a request across partitions (see Config.SplitLeaseTTL).
	DefaultSplitLeaseTTL = 5 * time.Second
)

// MaxConfigBytes bounds a configuration document: parsing stays linear in
// a size that can never be large.
const MaxConfigBytes = 1 << 20

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
	// ErrPlanRemovesLimit: a plan would leave a window without a limit or
	// raise it past the plan ceiling (docs/adr/006).
	ErrPlanRemovesLimit = errors.New("plan outside its bounds")
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

// RedactURL returns raw with the password of its user information
// replaced by "xxxxx" (url.URL.Redacted), for a log line, a banner or an
// error. A string that does not parse as a URL with user information but
// holds an "@" keeps only what follows its last "@": no form of a URL
// shows its credentials.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && (u.User != nil || !strings.Contains(raw, "@")) {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "xxxxx@" + raw[i+1:]
	}
	return raw
}

// Format prints c as fmt prints any struct, with RedisURL's password
// redacted (RedactURL) and HMACSecret hidden (Secret), so that a Config
// can be logged with %v, %+v or %#v (the type then reads app.printed).
func (c Config) Format(f fmt.State, verb rune) {
	type printed Config // without methods: fmt prints its fields
	c.RedisURL = RedactURL(c.RedisURL)
	fmt.Fprintf(f, fmt.FormatString(f, verb), printed(c))
}

// LogValue is what log/slog writes of a Config, with either handler:
// its %+v, credentials redacted (see Format).
func (c Config) LogValue() slog.Value { return slog.StringValue(fmt.Sprintf("%+v", c)) }

// Config is the whole configuration of a Limiter: loaded once at boot from
// YAML plus environment, validated, never reloaded (a change is a restart:
// docs/adr/005). Zero durations and counts mean the documented defaults;
// there is no per-identifier allow list or bypass, by design.
type Config struct {
	// RedisURL is the primary store's address (REDIS_URL). The Limiter does
	// not dial it: the composition root builds the store from it. A
	// printed Config shows it without its password (Format).
	RedisURL string `yaml:"redis_url" validate:"omitempty,url"`
	// HMACSecret is 32 bytes as 64 hex characters (RATE_LIMIT_HMAC_SECRET).
	// It has no default: boot fails without it. Rotating it resets every
	// counter, since every key changes.
	HMACSecret Secret `yaml:"hmac_secret"`
	// StoreTimeout is the one deadline of a store call (default 50 ms): the
	// Limiter sets it on the context it hands the store, and the stores
	// honour the context's deadline (a store's own timeout applies only
	// when it is called directly). It counts the store's time: from the
	// call's start (a decision queued behind a coalesced call has none
	// while it waits), less the time the service could not run
	// (docs/adr/008). A call that misses it is a store timeout, and the
	// decision comes from the degraded matrix (Decision.Degraded).
	StoreTimeout time.Duration `yaml:"store_timeout" validate:"min=1ms,max=10s"`
	// ShedAfter bounds how long one decision waits for the primary store
	// in all (default 2 s): in the coalescing queue, for its call to be
	// dispatched and for the answer to be read. The store deadline
	// (StoreTimeout) counts the store's time only: time the service could
	// not run (its CPU saturated) is not the store's, and extends it
	// (docs/adr/008). A decision still waiting at ShedAfter is refused
	// (DeniedDegraded, cause overloaded), whatever its route family: the
	// instance is saturated, and shedding never admits past a limit. A
	// value below StoreTimeout counts as StoreTimeout.
	ShedAfter time.Duration `yaml:"shed_after" validate:"min=1ms,max=1m"`
	// ProbeInterval is the health loop's period (default 10 s).
	ProbeInterval time.Duration `yaml:"probe_interval" validate:"min=1ms,max=1h"`
	// RecoveryProbeInterval is the health loop's period while a node of
	// the store is DEGRADED or RECOVERING (default 1 s; never longer than
	// ProbeInterval): the clearing probes then close the breaker seconds
	// after the store is back, whatever the healthy interval
	// (docs/adr/008).
	RecoveryProbeInterval time.Duration `yaml:"recovery_probe_interval" validate:"min=1ms,max=1h"`
	// ProbeTimeout bounds one probe (default 1 s, at most ProbeInterval).
	// A probe also fails when it takes longer than StoreTimeout: a store
	// too slow for a decision's deadline is not healthy (docs/adr/005).
	ProbeTimeout time.Duration `yaml:"probe_timeout" validate:"min=1ms,ltefield=ProbeInterval"`
	// ClearingProbes is how many good probes in a row take the system from
	// DEGRADED back to HEALTHY (default 3; 1 behaves as 2, see
	// domain.NewHealthMachine).
	ClearingProbes int `yaml:"clearing_probes" validate:"min=1,max=1000"`
	// BreakerFailures is how many store faults in a row, on one node,
	// trigger a confirming probe between scheduled ones (default 5); the
	// breaker opens only if that probe fails too, so that deadlines missed
	// by a saturated service, while the store answers, open nothing.
	// Request faults and safe retries never count (docs/adr/008).
	BreakerFailures int `yaml:"breaker_failures" validate:"min=1,max=100000"`
	// RedisMemoryBudgetMB, when set, is checked against Redis maxmemory at
	// boot; a smaller or unreadable maxmemory is a warning (Limiter.Warnings).
	RedisMemoryBudgetMB int64 `yaml:"redis_memory_budget_mb" validate:"min=0"`
	// ShadowMode decides and records every request but never blocks one: the
	// one global switch for rollouts.
	ShadowMode bool `yaml:"shadow_mode"`
	// Allotments, "off", turns allotments off for every profile and every
	// EvaluateWindows call; "" or "on" (the default) lets them start by
	// themselves on key sets hot on this instance and far from their
	// limits (docs/adr/019-allotments.md). A profile or a window may turn
	// them off for itself.
	Allotments Allotments `yaml:"allotments" validate:"omitempty,oneof=on off"`
	// AllotmentHold is how long an allotment may be spent in process
	// before what is left of it goes back to the store (default 1 s, at
	// most domain.MaxAllotmentHold); a key set whose shortest window is
	// shorter than twice it holds for half that window. Longer holds take
	// fewer store calls, and keep units out of the other instances' reach
	// longer.
	AllotmentHold time.Duration `yaml:"allotment_hold" validate:"min=0,max=1m"`
	// InstanceID names this instance in metrics (default: the host name).
	InstanceID string `yaml:"instance_id" validate:"omitempty,max=128,printascii"`
	// Degraded is the degraded matrix: what each route family does while
	// the store cannot answer.
	Degraded DegradedConfig `yaml:"degraded"`
	// Profiles are the route profiles. Every exposed route needs one; a
	// service that only uses the ADR-002 façades needs none.
	Profiles []ProfileConfig `yaml:"profiles" validate:"max=1000,unique=Name,dive"`
	// Facade configures the ADR-002 compatibility façades.
	Facade FacadeConfig `yaml:"facade"`
	// Plans scale or replace the limits of some profiles for the tenants
	// and api keys assigned to them (docs/adr/006).
	Plans []PlanConfig `yaml:"plans" validate:"max=1000,unique=Name,dive"`
	// PlanCeiling bounds every plan: no plan window may exceed PlanCeiling
	// times the profile's own limit (default 100).
	PlanCeiling float64 `yaml:"plan_ceiling" validate:"min=1,max=100000"`
	// RefusalCacheSize is how many refused key sets the instance remembers
	// until their retry-after (at most RefusalCacheTTL), to refuse them
	// again without a store call (default 1024; -1 turns the cache off).
	// See Limiter.Evaluate and docs/adr/005.
	RefusalCacheSize int `yaml:"refusal_cache_size" validate:"min=-1,max=16777216"`
	// RefusalCacheTTL bounds how long a remembered refusal is repeated,
	// counted from the instant the store decided it (default 1 s): a Reset
	// on another instance reaches this one within it (docs/adr/005).
	RefusalCacheTTL time.Duration `yaml:"refusal_cache_ttl" validate:"min=1ms,max=1h"`
	// PseudonymCacheSize is how many identifier pseudonyms the instance
	// remembers, so that a hot identifier is not hashed on every request
	// (default 4096; -1 turns the cache off).
	PseudonymCacheSize int `yaml:"pseudonym_cache_size" validate:"min=-1,max=16777216"`
	// ReservationTTL is the lease TTL of a reservation (Limiter.Reserve)
	// whose request holds no concurrency window (default 1 min): how long
	// an unsettled reservation waits for its Settle before it counts at
	// its reserved cost. With concurrency windows the lease TTL is the
	// smallest of their periods (docs/adr/012).
	ReservationTTL time.Duration `yaml:"reservation_ttl" validate:"windowperiod,max=24h"`
	// SplitLeaseTTL is the lease TTL of the reservations that decide an
	// Evaluate, EvaluateWindows or Wait whose keys span partitions of the
	// store (a Redis Cluster's slots, docs/adr/013; default 5 s): an
	// admitted side whose release was lost (a crash between the two
	// answers) counts at most this long beyond a refusal.
	SplitLeaseTTL time.Duration `yaml:"split_lease_ttl" validate:"windowperiod,max=1h"`
}

// DegradedConfig is the degraded matrix: "bypass", "deny" or "local" per
// route family. Defaults: read bypass, auth deny, costly deny
// (docs/adr/005).
type DegradedConfig struct {
	Read   domain.DegradedAction `yaml:"read"`
	Auth   domain.DegradedAction `yaml:"auth"`
	Costly domain.DegradedAction `yaml:"costly"`
}

// ProfileConfig is one route profile.
type ProfileConfig struct {
	// Name is the profile's name, also its route key in store keys and its
	// metric label: 1 to 64 of [a-z0-9_-].
	Name string `yaml:"name" validate:"required,routekey"`
	// Family is "read", "auth" or "costly".
	Family domain.RouteFamily `yaml:"family" validate:"required"`
	// Routes are the route templates this profile limits: a path template
	// ("/api/v1/users/{id}" or "/api/v1/users/:id"), optionally preceded by
	// a method ("GET /api/v1/users/{id}"), or a gRPC full method
	// ("/pkg.Service/Method").
	Routes []string `yaml:"routes" validate:"required,min=1,max=1000,dive,required,max=300"`
	// Cost is the units one request consumes (default 1).
	Cost int64 `yaml:"cost" validate:"min=0,windowlimit"`
	// Windows are the windows per dimension.
	Windows WindowsConfig `yaml:"windows"`
	// Settle, when set, makes the profile decide through reservations
	// (Limiter.Reserve): the entry point settles each request once served,
	// by these rules (Reservation.Finish, docs/adr/012).
	Settle *SettleConfig `yaml:"settle"`
	// Allotments, "off", keeps the profile's key sets out of allotments
	// (Config.Allotments): every request decided at the store.
	Allotments Allotments `yaml:"allotments" validate:"omitempty,oneof=on off"`
}

// Allotments switches allotments (docs/adr/019-allotments.md): "" and
// AllotmentsOn leave them on, AllotmentsOff turns them off.
type Allotments string

// The values of Allotments.
const (
	AllotmentsOn  Allotments = "on"
	AllotmentsOff Allotments = "off"
)

// SettleConfig is how an entry point settles a profile's reservations
// once the request is served (Reservation.Finish).
type SettleConfig struct {
	// RefundFailures refunds the whole cost of a request that failed on
	// the server's side (an HTTP 5xx, a gRPC code that is the server's
	// fault): a failure then consumes nothing.
	RefundFailures bool `yaml:"refund_failures"`
	// CostHeader names the response header (or trailer; gRPC trailer
	// metadata, lower-cased) in which the handler reports the request's
	// real cost, which is then charged instead of the cost reserved: an
	// HTTP field name, 1 to 64 token characters.
	CostHeader string `yaml:"cost_header" validate:"omitempty,headername"`
	// RefundStatuses are HTTP statuses whose requests are refunded in
	// full, whatever RefundFailures says: e.g. 404 or 409, answers that
	// did none of the work the cost stands for. 100 to 599.
	RefundStatuses []int `yaml:"refund_statuses" validate:"max=32,dive,min=100,max=599"`
	// RefundCodes are gRPC status codes, by their names in the gRPC
	// specification's spelling of google.golang.org/grpc/codes
	// ("NotFound", "ResourceExhausted"...), whose calls are refunded in
	// full, as RefundStatuses for HTTP.
	RefundCodes []string `yaml:"refund_codes" validate:"max=17,dive,grpccode"`
}

// refunds reports whether a served request is refunded in full by these
// rules (Reservation.Finish).
func (s *SettleConfig) refunds(o Outcome) bool {
	if s == nil {
		return false
	}
	if o.Failed && s.RefundFailures {
		return true
	}
	if o.Status != 0 && slices.Contains(s.RefundStatuses, o.Status) {
		return true
	}
	return o.Code != "" && slices.Contains(s.RefundCodes, o.Code)
}

// grpcCodes are the names of the gRPC status codes, as
// google.golang.org/grpc/codes spells them (app imports no adapter).
var grpcCodes = []string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

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
	// Limit is the units admitted per Period: 1 to domain.MaxLimit
	// (domain.MaxSlidingLogLimit for a sliding log).
	Limit int64 `yaml:"limit" validate:"windowlimit"`
	// Period is the window's length, e.g. "1s", "1m": domain.MinPeriod to
	// domain.MaxPeriod.
	Period time.Duration `yaml:"period" validate:"required,windowperiod"`
	// Algorithm is "sliding_log" (the default), "gcra" or "concurrency".
	// A concurrency window bounds the requests in flight: Limit of them
	// at once, each holding a slot from its decision until it is settled,
	// or until its lease expires (Period is the lease TTL, at most
	// domain.MaxLeaseTTL; Limit at most domain.MaxConcurrencyLimit). Only
	// Limiter.Reserve holds one; Evaluate skips it (docs/adr/012).
	Algorithm domain.Algorithm `yaml:"algorithm"`
	// Allotments, "off", keeps every key set that counts this window out
	// of allotments (Config.Allotments).
	Allotments Allotments `yaml:"allotments" validate:"omitempty,oneof=on off"`
}

// FacadeConfig configures the ADR-002 façades (Allow, AllowDual).
type FacadeConfig struct {
	// Tenant and User are the windows of the two layers (default: one
	// window "sustained" of one minute each). The first window of a layer
	// counts on ADR-002's key (rl:{tenant}, rl:{tenant}:user:{user}); each
	// further window on that key followed by ":" and its name.
	Tenant []FacadeWindowConfig `yaml:"tenant" validate:"max=4,unique=Name,dive"`
	User   []FacadeWindowConfig `yaml:"user" validate:"max=4,unique=Name,dive"`
	// Family labels façade decisions (default "read").
	Family domain.RouteFamily `yaml:"family"`
	// Degraded is what façade calls do while the store cannot answer
	// (default "local": ADR-002's LocalDualLimiter).
	Degraded domain.DegradedAction `yaml:"degraded"`
}

// FacadeWindowConfig is one window of a façade layer.
type FacadeWindowConfig struct {
	Name   string        `yaml:"name" validate:"required,windowname"`
	Period time.Duration `yaml:"period" validate:"required,windowperiod"`
	// Limit, when set, fixes the window's limit; zero means the limit the
	// caller passes (Allow's limit, AllowDual's tenantLimit or userLimit).
	Limit     int64            `yaml:"limit" validate:"omitempty,windowlimit"`
	Algorithm domain.Algorithm `yaml:"algorithm"`
}

// LookupEnv reads an environment variable; os.LookupEnv has this type.
// Tests pass a map-backed function.
type LookupEnv func(key string) (string, bool)

// LoadConfig reads the YAML file at path, overlays the environment (nil
// env means os.LookupEnv), applies defaults and validates. Every failure is
// a *domain.ConfigError (possibly several, joined) naming the field.
func LoadConfig(path string, env LookupEnv) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, &domain.ConfigError{Field: "(file)", Reason: "cannot be read", Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return Config{}, &domain.ConfigError{Field: "(file)", Reason: "cannot be read", Err: err}
	}
	return ParseConfig(data, env)
}

// ParseConfig is LoadConfig on YAML already in memory. Unknown fields are
// errors (wrapping ErrUnknownField) naming their full path. Parsing is
// linear in the document's size, which is at most MaxConfigBytes: the YAML
// decoder refuses cyclic anchors, duplicate keys and excessive aliasing,
// and nothing here follows an alias.
func ParseConfig(data []byte, env LookupEnv) (Config, error) {
	if len(data) > MaxConfigBytes {
		return Config{}, &domain.ConfigError{Field: "(document)", Reason: fmt.Sprintf("larger than %d bytes", MaxConfigBytes)}
	}
	cfg, err := decodeYAML(data)
	if err != nil {
		return Config{}, err
	}
	cfg.applyEnv(env)
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeYAML decodes exactly one document into a Config, refusing unknown
// fields.
func decodeYAML(data []byte) (Config, error) {
	var cfg Config
	var doc yaml.Node
	// A node tree keeps aliases as references, so this first pass is
	// linear; it serves to name the path of a field the decoder refuses.
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return cfg, &domain.ConfigError{Field: "(document)", Reason: "is not valid YAML", Err: err}
	}
	if len(doc.Content) == 0 {
		return cfg, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, decodeError(&doc, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return cfg, &domain.ConfigError{Field: "(document)", Reason: "must hold exactly one YAML document", Err: err}
	}
	return cfg, nil
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
	c.StoreTimeout = cmp.Or(c.StoreTimeout, DefaultStoreTimeout)
	c.ShedAfter = max(cmp.Or(c.ShedAfter, DefaultShedAfter), c.StoreTimeout)
	c.ProbeInterval = cmp.Or(c.ProbeInterval, DefaultProbeInterval)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, min(DefaultProbeTimeout, c.ProbeInterval))
	c.RecoveryProbeInterval = cmp.Or(c.RecoveryProbeInterval, DefaultRecoveryProbeInterval)
	c.ClearingProbes = cmp.Or(c.ClearingProbes, domain.DefaultClearingProbes)
	c.BreakerFailures = cmp.Or(c.BreakerFailures, DefaultBreakerFailures)
	c.PlanCeiling = cmp.Or(c.PlanCeiling, DefaultPlanCeiling)
	c.RefusalCacheSize = cmp.Or(c.RefusalCacheSize, DefaultRefusalCacheSize)
	c.RefusalCacheTTL = cmp.Or(c.RefusalCacheTTL, DefaultRefusalCacheTTL)
	c.PseudonymCacheSize = cmp.Or(c.PseudonymCacheSize, DefaultPseudonymCacheSize)
	c.ReservationTTL = cmp.Or(c.ReservationTTL, DefaultReservationTTL)
	c.SplitLeaseTTL = cmp.Or(c.SplitLeaseTTL, DefaultSplitLeaseTTL)
	c.AllotmentHold = cmp.Or(c.AllotmentHold, DefaultAllotmentHold)
	if c.InstanceID == "" {
		c.InstanceID = "sluice"
		if h, err := os.Hostname(); err == nil && h != "" && len(h) <= 128 {
			c.InstanceID = h
		}
	}
	def := domain.DefaultDegradedMatrix()
	c.Degraded.Read = cmp.Or(c.Degraded.Read, def.Read)
	c.Degraded.Auth = cmp.Or(c.Degraded.Auth, def.Auth)
	c.Degraded.Costly = cmp.Or(c.Degraded.Costly, def.Costly)
	c.Facade = c.Facade.withDefaults()
	// Slices are copied so that defaults never write through to the
	// caller's.
	c.Profiles = append([]ProfileConfig(nil), c.Profiles...)
	for i := range c.Profiles {
		c.Profiles[i].Cost = cmp.Or(c.Profiles[i].Cost, 1)
	}
	return c
}

func (f FacadeConfig) withDefaults() FacadeConfig {
	def := []FacadeWindowConfig{{Name: domain.WindowSustained, Period: DefaultFacadePeriod}}
	if len(f.Tenant) == 0 {
		f.Tenant = def
	}
	if len(f.User) == 0 {
		f.User = def
	}
	f.Family = cmp.Or(f.Family, domain.FamilyRead)
	f.Degraded = cmp.Or(f.Degraded, domain.ActionLocal)
	return f
}

var (
	routeKeyRE   = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	windowNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	// headerNameRE is an HTTP field name (RFC 9110 token), bounded.
	headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
	validate     = newValidator()
)

// newValidator registers the tags the Config uses. The numeric bounds of
// windows are the domain's own constants, so config and stores agree.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(yamlName)
	rules := map[string]validator.Func{
		"routekey":   func(fl validator.FieldLevel) bool { return routeKeyRE.MatchString(fl.Field().String()) },
		"windowname": func(fl validator.FieldLevel) bool { return windowNameRE.MatchString(fl.Field().String()) },
		"headername": func(fl validator.FieldLevel) bool { return headerNameRE.MatchString(fl.Field().String()) },
		"grpccode":   func(fl validator.FieldLevel) bool { return slices.Contains(grpcCodes, fl.Field().String()) },
		"windowlimit": func(fl validator.FieldLevel) bool {
			n := fl.Field().Int()
			return n <= domain.MaxLimit && (n >= 1 || fl.StructFieldName() == "Cost")
		},
		"windowperiod": func(fl validator.FieldLevel) bool {
			d := time.Duration(fl.Field().Int())
			return d >= domain.MinPeriod && d <= domain.MaxPeriod && d%time.Microsecond == 0
		},
	}
	for tag, fn := range rules {
		if err := v.RegisterValidation(tag, fn); err != nil {
			panic(err) // only a programming error in the tags above
		}
	}
	return v
}

func yamlName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "" {
		return strings.ToLower(f.Name)
	}
	return tag
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
	// Rules that span fields, once every field is sound.
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
	s := string(c.HMACSecret)
	trimmed := strings.TrimSpace(s)
	want := 2 * domain.SecretLen
	_, hexErr := hex.DecodeString(trimmed)
	switch {
	case trimmed == "":
		return &domain.ConfigError{Field: "hmac_secret", Reason: "required: set " + EnvHMACSecret + " (32 random bytes as 64 hex characters); there is no default", Err: ErrSecretMissing}
	case trimmed != s:
		return &domain.ConfigError{Field: "hmac_secret", Reason: "must not carry surrounding white space", Err: ErrSecretMalformed}
	case hexErr != nil:
		return &domain.ConfigError{Field: "hmac_secret", Reason: fmt.Sprintf("must be %d hex characters", want), Err: ErrSecretMalformed}
	case len(s) < want:
		return &domain.ConfigError{Field: "hmac_secret", Reason: fmt.Sprintf("too short: %d hex characters, want %d (32 bytes)", len(s), want), Err: ErrSecretShort}
	case len(s) > want:
		return &domain.ConfigError{Field: "hmac_secret", Reason: fmt.Sprintf("too long: %d hex characters, want %d (32 bytes)", len(s), want), Err: ErrSecretMalformed}
	}
	return nil
}

// translate turns a validator failure into a ConfigError naming the YAML
// path, with profiles and plans named rather than numbered where possible.
func (c Config) translate(fe validator.FieldError) error {
	field := fe.Namespace()
	if _, rest, ok := strings.Cut(field, "."); ok {
		field = rest // drop the root type name
	}
	field = c.nameEntries(field)
	ce := &domain.ConfigError{Field: field, Reason: reason(fe)}
	if fe.Tag() == "windowlimit" && fe.Field() == "limit" && fe.Value().(int64) < 1 {
		ce.Reason = "must be at least 1: a limit of 0 would refuse every request"
		ce.Err = ErrZeroLimit
	}
	return ce
}

// nameEntries rewrites "profiles[3]" as "profiles[login]" and "plans[0]"
// as "plans[pro]".
func (c Config) nameEntries(field string) string {
	names := map[string]func(int) string{
		"profiles[": func(i int) string {
			if i < len(c.Profiles) {
				return c.Profiles[i].Name
			}
			return ""
		},
		"plans[": func(i int) string {
			if i < len(c.Plans) {
				return c.Plans[i].Name
			}
			return ""
		},
	}
	for prefix, nameOf := range names {
		rest, ok := strings.CutPrefix(field, prefix)
		if !ok {
			continue
		}
		idx, tail, ok := strings.Cut(rest, "]")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil || i < 0 {
			return field
		}
		if name := nameOf(i); routeKeyRE.MatchString(name) {
			return prefix + name + "]" + tail
		}
	}
	return field
}

func reason(fe validator.FieldError) string {
	p := fe.Param()
	switch fe.Tag() {
	case "required":
		return "required"
	case "min", "gte":
		if fe.Kind() == reflect.Slice || fe.Kind() == reflect.Map {
			return "needs at least " + p + " entries"
		}
		return "must be at least " + p
	case "max", "lte":
		if fe.Kind() == reflect.Slice || fe.Kind() == reflect.String || fe.Kind() == reflect.Map {
			return "must have at most " + p + " entries or bytes"
		}
		return "must be at most " + p
	case "gt":
		return "must be greater than " + p
	case "unique":
		return "names must be unique"
	case "url":
		return "must be a URL"
	case "routekey":
		return "must be 1 to 64 of [a-z0-9_-]"
	case "windowname":
		return "must be 1 to 32 of [a-z0-9_-]"
	case "headername":
		return "must be an HTTP field name: 1 to 64 token characters"
	case "grpccode":
		return "must be a gRPC status code name: " + strings.Join(grpcCodes, ", ")
	case "windowlimit":
		return fmt.Sprintf("must be between 1 and %d", domain.MaxLimit)
	case "windowperiod":
		return fmt.Sprintf("must be a whole number of microseconds between %s and %s", domain.MinPeriod, domain.MaxPeriod)
	case "ltefield":
		return "must not exceed probe_interval"
	case "printascii":
		return "must be printable ASCII"
	}
	return "fails " + fe.Tag()
}

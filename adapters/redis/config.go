package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
)

// DefaultTimeout is the deadline of one store call made without a
// deadline of its own when Config.Timeout is zero: the decision pipeline's
// budget for the store (docs/adr/005).
const DefaultTimeout = 50 * time.Millisecond

// DefaultDialTimeout bounds connecting to a node when Config.DialTimeout is
// zero. It is longer than DefaultTimeout on purpose: a connection serves many
// calls, and a call that waits for it still ends at its own deadline.
const DefaultDialTimeout = 2 * time.Second

// DefaultMinTTL is the floor of every key's TTL when Config.MinTTL is zero.
const DefaultMinTTL = time.Second

// CompactLogMaxLimit is the largest sliding-log limit stored as a compact
// string (6 bytes per admitted unit, read and written whole: two commands
// per key) rather than a ZSET (one member per unit, about 32 bytes, and
// about 118 above 128 units), unless Config.Log is LogZSet. A larger limit
// would make every call copy a longer string. See docs/adr/003.
const CompactLogMaxLimit = 1024

// DefaultGrace is how far out of order (earlier than the latest instant a
// key has seen) a caller's now may be, under CallerTime, while a sliding
// log still counts every unit inside the caller's own window, when
// Config.Grace is zero. 250 ms covers a now read before a call that waited
// in a queue (the store deadline is 50 ms) and the clock skew of hosts kept
// by NTP. It costs a log the units of one more grace (of its period, for a
// window shorter than the grace: the grace of a window is min(grace,
// period)), and that much more Redis time.
//
// Under ServerTime (the default) the script reads the instant from Redis'
// own clock inside the atomic call, so calls cannot reach a key out of
// order: the default grace there is none. Only a failover to a node whose
// clock is behind, or a step of the server's clock, can put instants out
// of order, and a failover already costs counts (docs/runbook.md); set
// Grace to cover it if that matters more than the Redis time. See
// docs/adr/009-stored-state-and-script-v3.md.
const DefaultGrace = 250 * time.Millisecond

// LogEncoding says how the Redis store keeps sliding logs.
type LogEncoding uint8

const (
	// LogCompact, the default, stores the sliding log of a limit up to
	// CompactLogMaxLimit as a compact string and a larger one as a ZSET.
	LogCompact LogEncoding = iota
	// LogZSet stores every sliding log as a ZSET of one member per unit
	// (the compact bound sent as 0): each unit readable with ZRANGE, and
	// the encoding the tests and benchmarks hold the compact one against.
	// The script reads both encodings whatever this says, and rewrites a
	// key in the encoding its window wants on its next admitted request.
	LogZSet
)

// String returns "compact" or "zset".
func (e LogEncoding) String() string {
	switch e {
	case LogCompact:
		return "compact"
	case LogZSet:
		return "zset"
	}
	return fmt.Sprintf("log_encoding(%d)", uint8(e))
}

// Mode says how the store talks to Redis.
type Mode uint8

const (
	// ModeAuto asks the server: a node with cluster support enabled gives a
	// cluster client, any other a standalone one. The zero value.
	ModeAuto Mode = iota
	// ModeStandalone uses one server, never asking about a cluster.
	ModeStandalone
	// ModeCluster requires a Redis Cluster; New fails on a standalone
	// server.
	ModeCluster
)

// String returns "auto", "standalone" or "cluster".
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeStandalone:
		return "standalone"
	case ModeCluster:
		return "cluster"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// TimeSource says whose clock a Store's windows run on.
type TimeSource uint8

const (
	// ServerTime, the default, makes the script read the Redis server's
	// clock (TIME) and ignore the now passed to Evaluate and Peek: every
	// instance of a fleet counts on one clock (per cluster node, since the
	// keys of one call live on one node), so clock skew between instances
	// can neither admit more than a limit nor refuse early. It costs one
	// TIME call inside the script. See docs/adr/003.
	ServerTime TimeSource = iota
	// CallerTime uses the now the caller passes (its ports.Clock). The
	// sliding log stays within its limit whatever the callers' clocks do,
	// but GCRA trusts the instant it is given: two instances whose clocks
	// disagree by d can together admit about d/T more units than the limit
	// (T the emission interval). Choose it for scripted time (tests, the
	// conformance suite) or a fleet whose clocks are known to agree.
	CallerTime
)

// String returns "server" or "caller".
func (t TimeSource) String() string {
	switch t {
	case ServerTime:
		return "server"
	case CallerTime:
		return "caller"
	}
	return fmt.Sprintf("time_source(%d)", uint8(t))
}

// Config configures a Store. The zero value of every field but the address
// means its documented default; give either Addrs or URL.
type Config struct {
	// Addrs are host:port of one standalone server or of any cluster nodes
	// (the client discovers the others).
	Addrs []string
	// URL is a redis:// or rediss:// URL, the form of REDIS_URL, e.g.
	// redis://user:secret@10.0.0.5:6379/0. Credentials in the URL are used
	// unless Username/Password are set.
	URL string
	// Username and Password authenticate (Redis ACL; Username may be empty).
	Username string
	Password string
	// DB selects a database on a standalone server; clusters have only 0.
	DB int
	// TLS enables TLS with this configuration.
	TLS *tls.Config
	// Mode is standalone, cluster, or auto-detected (the default).
	Mode Mode
	// Timeout bounds a call (Evaluate, Peek, Reset, Reserve, Settle,
	// Renew) whose context has no deadline, i.e. a store called
	// directly; 0 means DefaultTimeout. A
	// context with a deadline (app.Limiter sets app.Config.StoreTimeout on
	// every decision) is the call's only deadline: the store adds none, so
	// the deadline a user configures is the one that holds, longer or
	// shorter than Timeout.
	Timeout time.Duration
	// DialTimeout bounds New's connecting to every node and loading the
	// script (and each later reconnection); 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// Time says whose clock the windows run on: the Redis server's (the
	// default) or the caller's. See TimeSource.
	Time TimeSource
	// Log says how sliding logs are stored: compactly up to
	// CompactLogMaxLimit (the default), or every one as a ZSET. See
	// LogEncoding.
	Log LogEncoding
	// MinTTL is the floor of every key's TTL; 0 means DefaultMinTTL. A key
	// expires when it stops mattering (a sliding log when its newest unit
	// leaves the window, a GCRA key at its theoretical arrival time), but
	// that TTL runs on the server's clock while the window runs on the
	// caller's: a now read before the call waited in a queue, or a test's
	// scripted clock, would find sub-second state expired early. The floor
	// keeps every key at least this long; it changes no answer, only how long
	// an idle key occupies memory. Rounded up to the millisecond; at least
	// 1 ms.
	MinTTL time.Duration
	// Grace is how far out of order a now may be while a sliding log still
	// counts every unit inside that now's window (rule S5 of
	// docs/adr/009-stored-state-and-script-v3.md): a log forgets a unit
	// only once it is older than the latest instant the key has seen
	// minus the period minus min(Grace, period), and keeps its key that
	// much longer. 0 means the default: DefaultGrace under CallerTime,
	// none under ServerTime; a negative value means none.
	Grace time.Duration
	// MaxRedirections bounds the MOVED and ASK redirections Redis Cluster
	// may send one call through; 0 means DefaultMaxRedirections. A call
	// redirected more often fails with an error wrapping ErrRedirections
	// (a slot migration left half done), which opens no breaker
	// (docs/adr/008).
	MaxRedirections int
	// MaxBatch bounds the requests one script call decides; 0 means
	// DefaultMaxBatch, 1 sends every request in a call of its own. A
	// request bound for a node (a slot, on a cluster) with fewer than
	// eight calls in flight goes at once, alone; the ones that arrive
	// while eight are in flight go together when one returns, each decided
	// exactly as its own call would (docs/adr/018-batches.md).
	MaxBatch int
	// ClientName is sent with CLIENT SETNAME, to spot the store's
	// connections in CLIENT LIST; empty means "sluice".
	ClientName string
}

// Validate reports the first field that cannot work, as a
// *domain.ConfigError. New calls it; a Config used with WithClient needs no
// address.
func (c Config) Validate() error {
	return c.validate(false)
}

func (c Config) validate(haveClient bool) error {
	switch {
	case !haveClient && len(c.Addrs) == 0 && c.URL == "":
		return &domain.ConfigError{Field: "redis.addrs", Reason: "give addrs or url"}
	case !haveClient && len(c.Addrs) > 0 && c.URL != "":
		return &domain.ConfigError{Field: "redis.url", Reason: "give addrs or url, not both"}
	case c.Timeout < 0:
		return &domain.ConfigError{Field: "redis.timeout", Reason: "must not be negative"}
	case c.MinTTL < 0 || (c.MinTTL > 0 && c.MinTTL < time.Millisecond):
		return &domain.ConfigError{Field: "redis.min_ttl", Reason: "must be 0 (default) or at least 1ms"}
	case c.DialTimeout < 0:
		return &domain.ConfigError{Field: "redis.dial_timeout", Reason: "must not be negative"}
	case c.MaxRedirections < 0:
		return &domain.ConfigError{Field: "redis.max_redirections", Reason: "must not be negative"}
	case c.DB < 0:
		return &domain.ConfigError{Field: "redis.db", Reason: "must not be negative"}
	case c.MaxBatch < 0 || c.MaxBatch > maxMaxBatch:
		return &domain.ConfigError{Field: "redis.max_batch", Reason: fmt.Sprintf("must be between 0 (default) and %d", maxMaxBatch)}
	case c.Mode > ModeCluster:
		return &domain.ConfigError{Field: "redis.mode", Reason: "unknown mode"}
	case c.Time > CallerTime:
		return &domain.ConfigError{Field: "redis.time", Reason: "unknown time source"}
	case c.Log > LogZSet:
		return &domain.ConfigError{Field: "redis.log", Reason: "unknown log encoding"}
	case c.Grace > domain.MaxPeriod:
		return &domain.ConfigError{Field: "redis.grace", Reason: "must be at most the longest period"}
	case c.Mode == ModeCluster && c.DB != 0:
		return &domain.ConfigError{Field: "redis.db", Reason: "a cluster has database 0 only"}
	}
	for i, a := range c.Addrs {
		if a == "" {
			return &domain.ConfigError{Field: fmt.Sprintf("redis.addrs[%d]", i), Reason: "must not be empty"}
		}
	}
	if c.URL != "" {
		if _, err := rueidis.ParseURL(c.URL); err != nil {
			return urlError(c.URL, err)
		}
		if u, _ := url.Parse(c.URL); u.Scheme != "unix" && (u.Opaque != "" || u.Host == "") {
			// rueidis would dial localhost: "redis:6379" is the scheme
			// redis and no host, not the host redis.
			return &domain.ConfigError{Field: "redis.url", Reason: "names no host: write redis://host:port"}
		}
	}
	return nil
}

// urlError is the ConfigError of a URL that does not parse. The parser's
// error quotes the whole URL, password included, and boot errors go to
// logs: only the reason is kept, and any trace of the URL's user
// information is cut out of it.
func urlError(raw string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		if userinfo, _, ok := strings.Cut(rest, "@"); ok && userinfo != "" {
			msg = strings.ReplaceAll(msg, userinfo, "[redacted]")
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "[redacted]")
			}
		}
	}
	return &domain.ConfigError{Field: "redis.url", Reason: "not a redis URL: " + msg}
}

// maxMaxBatch bounds Config.MaxBatch: a batch's Redis time grows with its
// requests, and the node serves nothing else meanwhile.
const maxMaxBatch = 1024

// maxBatch returns MaxBatch or its default.
func (c Config) maxBatch() int {
	if c.MaxBatch == 0 {
		return DefaultMaxBatch
	}
	return c.MaxBatch
}

// timeout returns Timeout or its default.
func (c Config) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// graceMicros returns Grace or its default, in whole microseconds (0 for
// a negative Grace, and by default under ServerTime: see DefaultGrace).
func (c Config) graceMicros() int64 {
	switch {
	case c.Grace < 0, c.Grace == 0 && c.Time != CallerTime:
		return 0
	case c.Grace == 0:
		return DefaultGrace.Microseconds()
	}
	return c.Grace.Microseconds()
}

// minTTLMillis returns MinTTL or its default, in whole milliseconds rounded
// up.
func (c Config) minTTLMillis() int64 {
	d := c.MinTTL
	if d == 0 {
		d = DefaultMinTTL
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// clientOption turns the Config into rueidis options.
func (c Config) clientOption() (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	if c.URL != "" {
		var err error
		if opt, err = rueidis.ParseURL(c.URL); err != nil {
			return opt, urlError(c.URL, err)
		}
	} else {
		opt.InitAddress = append([]string(nil), c.Addrs...)
	}
	if c.Username != "" {
		opt.Username = c.Username
	}
	if c.Password != "" {
		opt.Password = c.Password
	}
	if c.DB != 0 {
		opt.SelectDB = c.DB
	}
	if c.TLS != nil {
		opt.TLSConfig = c.TLS
	}
	opt.ClientName = c.ClientName
	if opt.ClientName == "" {
		opt.ClientName = "sluice"
	}
	opt.Dialer.Timeout = c.dialTimeout()
	// The script reads and writes; nothing is worth caching client-side,
	// and tracking would cost the server memory per connection.
	opt.DisableCache = true
	// Pipelined from the first command: on the pipelined path a call
	// returns as soon as its context ends (deadline or cancellation) and
	// the connection stays up for the calls behind it, whereas rueidis'
	// synchronous path, used for a lone caller, ignores cancellation and
	// closes the connection when a deadline passes. With a 50 ms budget,
	// every slow answer would otherwise cost a reconnection.
	opt.AlwaysPipelining = true
	// One pipelined connection per node: a node runs one script at a time,
	// and one connection carries the largest batches per system call.
	// Measured on two cores (BenchmarkClientOptions): as fast for one key
	// and up to 1.7 times faster for nine at 64 callers than rueidis'
	// default of 2^⌊log2 GOMAXPROCS⌋ connections (at most 4). No
	// MaxFlushDelay: it costs latency and, at 8 callers, half the
	// throughput.
	opt.PipelineMultiplex = -1
	if c.Mode == ModeStandalone {
		opt.ForceSingleClient = true
	}
	// rueidis follows redirections until the deadline by default: a slot
	// left half migrated would bounce a call tens of thousands of times.
	opt.ClusterOption.MaxMovedRedirections = c.MaxRedirections
	if opt.ClusterOption.MaxMovedRedirections == 0 {
		opt.ClusterOption.MaxMovedRedirections = DefaultMaxRedirections
	}
	return opt, nil
}

// Option customises New beyond Config.
type Option func(*options)

type options struct {
	client     rueidis.Client
	tuneClient []func(*rueidis.ClientOption)
}

// WithClient makes the store use an existing rueidis client instead of
// connecting itself. The client stays the caller's: Store.Close does not
// close it. Config's address, credential and mode fields are then ignored.
// Build the client with DisableCache and AlwaysPipelining, as New does, so
// that cancellation is prompt and a missed deadline keeps the connection
// (and with PipelineMultiplex -1, one connection per node, New's choice
// for throughput).
func WithClient(c rueidis.Client) Option {
	return func(o *options) { o.client = c }
}

// WithClientOption lets the caller adjust the rueidis options New builds
// from Config (buffer sizes, pipelining, TLS details...) before connecting.
func WithClientOption(f func(*rueidis.ClientOption)) Option {
	return func(o *options) { o.tuneClient = append(o.tuneClient, f) }
}

// dialTimeout is DialTimeout or its default.
func (c Config) dialTimeout() time.Duration {
	if c.DialTimeout == 0 {
		return DefaultDialTimeout
	}
	return c.DialTimeout
}

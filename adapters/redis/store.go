// Package redis is the sluice Store on Redis, standalone or Cluster, through
// github.com/redis/rueidis.
//
// Every call is one round trip: the versioned script lua.RateLimitV1
// checks all the limits of a request and consumes on every key only when
// every limit admits, atomically, since a script runs alone on its node.
// The script is sent with EVALSHA; when the server does not know it
// (NOSCRIPT, e.g. after a restart or SCRIPT FLUSH), rueidis sends it once
// with EVAL, which also caches it, so a flushed script cache costs one
// larger request and never a failed decision.
//
// All keys of one call must hash to one Redis Cluster slot (sluice keys
// share a {hash tag}); a request whose keys do not is refused with
// domain.ErrCrossSlot before anything is sent, on a standalone server too,
// so that a key layout that would break on a cluster fails in development.
//
// Time is, by default, the server's clock (Redis TIME, read inside the
// script), so that instances with skewed clocks count on one clock; with
// Config.Time set to CallerTime it is the now the caller passes (from its
// ports.Clock), in whole microseconds. Every key written carries a TTL of the time it stays
// relevant (at least Config.MinTTL), so an idle key disappears by itself.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/ports"
)

// Store is a ports.Store on Redis. It is safe for simultaneous use; calls
// from many goroutines share the client's connections and are pipelined
// together by rueidis.
type Store struct {
	client     rueidis.Client
	ownClient  bool
	script     *rueidis.Lua
	timeout    time.Duration
	serverTime bool
	minTTL     string // ARGV[5], milliseconds
	closed     atomic.Bool

	// noncePrefix is random per Store, nonceCounter counts calls: together
	// they name sliding-log members uniquely across processes and calls.
	noncePrefix  string
	nonceCounter atomic.Uint64

	bufs sync.Pool // *callBuf
}

var _ ports.Store = (*Store)(nil)

// callBuf holds the KEYS and ARGV of one call, reused across calls: rueidis
// copies them into its command when building it.
type callBuf struct {
	keys []string
	args []string
}

// Argument layout of lua.RateLimitV1 (see the script's header).
const (
	headArgs     = 5
	argsPerLimit = 4
	replyHead    = 2
	replyPerKey  = 4
)

// New connects to Redis as cfg says and returns a Store.
//
// In ModeAuto and ModeCluster, New fails (with an error wrapping
// domain.ErrStoreUnavailable) when no node answers. In ModeStandalone it
// succeeds even then: calls fail with ErrStoreUnavailable until the server
// answers, so a service can boot, degraded, during an outage.
func New(cfg Config, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.validate(o.client != nil); err != nil {
		return nil, err
	}
	s := &Store{
		client:     o.client,
		script:     rueidis.NewLuaScript(lua.RateLimitV1),
		timeout:    cfg.timeout(),
		serverTime: cfg.Time == ServerTime,
		minTTL:     strconv.FormatInt(cfg.minTTLMillis(), 10),
	}
	s.bufs.New = func() any {
		return &callBuf{
			keys: make([]string, 0, domain.MaxLimits),
			args: make([]string, 0, headArgs+argsPerLimit*domain.MaxLimits),
		}
	}
	var prefix [8]byte
	if _, err := rand.Read(prefix[:]); err != nil {
		return nil, fmt.Errorf("sluice redis: nonce prefix: %w", err)
	}
	s.noncePrefix = base64.RawURLEncoding.EncodeToString(prefix[:])

	if s.client != nil {
		return s, nil
	}
	copt, err := cfg.clientOption()
	if err != nil {
		return nil, err
	}
	for _, f := range o.tuneClient {
		f(&copt)
	}
	client, err := rueidis.NewClient(copt)
	if err != nil && !(cfg.Mode == ModeStandalone && client != nil) {
		if client != nil {
			client.Close()
		}
		return nil, fmt.Errorf("%w: connecting to %v: %w", domain.ErrStoreUnavailable, copt.InitAddress, err)
	}
	if cfg.Mode == ModeCluster && client.Mode() != rueidis.ClientModeCluster {
		client.Close()
		return nil, &domain.ConfigError{Field: "redis.mode", Reason: "cluster required, but the server is " + string(client.Mode())}
	}
	s.client, s.ownClient = client, true
	// Load the script at boot (docs/adr/005) so that the first
	// decisions do not pay for it under their 50 ms deadline. A failure here
	// is not fatal: EVALSHA falls back to EVAL on NOSCRIPT.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.dialTimeout())
	defer cancel()
	_ = s.LoadScript(ctx)
	return s, nil
}

// LoadScript sends SCRIPT LOAD of lua.RateLimitV1 to every node and checks
// that each answers with lua.RateLimitV1SHA1. New calls it once; call it
// again after a server restart to spare the first decisions a NOSCRIPT
// round trip.
func (s *Store) LoadScript(ctx context.Context) error {
	if s.closed.Load() {
		return domain.ErrStoreClosed
	}
	var errs []error
	for addr, node := range s.client.Nodes() {
		sha, err := node.Do(ctx, node.B().ScriptLoad().Script(lua.RateLimitV1).Build()).ToString()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: SCRIPT LOAD on %s: %w", domain.ErrStoreUnavailable, addr, err))
		case sha != lua.RateLimitV1SHA1:
			errs = append(errs, fmt.Errorf("sluice redis: SCRIPT LOAD on %s returned %s, want %s", addr, sha, lua.RateLimitV1SHA1))
		}
	}
	return errors.Join(errs...)
}

// Client returns the underlying rueidis client, e.g. for a health check
// that needs more than the Prober.
func (s *Store) Client() rueidis.Client { return s.client }

// Evaluate checks limits at now and consumes their cost on every key only
// if every limit admits it; see ports.Store. With ServerTime (the default),
// now is ignored and the server's clock is used.
func (s *Store) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.run(ctx, now, limits, true)
}

// Peek answers as Evaluate would, consuming nothing. It may delete entries
// that have left their window, which changes no answer.
func (s *Store) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	return s.run(ctx, now, limits, false)
}

func (s *Store) run(ctx context.Context, now time.Time, limits []domain.Limit, consume bool) (domain.Result, error) {
	var res domain.Result
	if s.closed.Load() {
		return res, domain.ErrStoreClosed
	}
	if err := domain.ValidateLimits(limits); err != nil {
		return res, err
	}
	if ok, i := sameSlot(limits); !ok {
		return res, fmt.Errorf("%w: limit %d hashes to slot %d, limit 0 to slot %d; give every key of a request the same {hash tag}",
			domain.ErrCrossSlot, i, Slot(limits[i].Key), Slot(limits[0].Key))
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("sluice redis: %w", err)
	}

	buf := s.bufs.Get().(*callBuf)
	defer s.bufs.Put(buf)
	keys, args := buf.keys[:0], buf.args[:0]
	if s.serverTime {
		args = append(args, "0")
	} else {
		args = append(args, strconv.FormatInt(now.UnixMicro(), 10))
	}
	if consume {
		args = append(args, "1")
	} else {
		args = append(args, "0")
	}
	if s.serverTime {
		args = append(args, "1")
	} else {
		args = append(args, "0")
	}
	if consume {
		args = append(args, s.nonce())
	} else {
		args = append(args, "-") // Peek adds no member
	}
	args = append(args, s.minTTL)
	for i := range limits {
		l := &limits[i]
		keys = append(keys, l.Key)
		algo := "0"
		if l.Window.Algorithm == domain.GCRA {
			algo = "1"
		}
		args = append(args, algo,
			strconv.FormatInt(l.Window.Limit, 10),
			strconv.FormatInt(l.Window.PeriodMicros(), 10),
			strconv.FormatInt(l.Cost, 10))
	}
	buf.keys, buf.args = keys, args

	// A caller whose own deadline already comes first (app.Limiter sets
	// its store deadline) needs no second timer on the hot path.
	cctx := ctx
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.timeout {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	resp := s.script.Exec(cctx, s.client, keys, args)
	if err := resp.Error(); err != nil {
		return res, s.mapErr(ctx, err, s.timeout)
	}
	reply, err := resp.ToArray()
	if err != nil {
		return res, fmt.Errorf("%w: unexpected script reply: %w", domain.ErrStoreUnavailable, err)
	}
	if err := decode(reply, len(limits), &res); err != nil {
		return res, err
	}
	return res, nil
}

// decode fills res from the script's reply, aggregated by domain.NewResult.
func decode(reply []rueidis.RedisMessage, n int, res *domain.Result) error {
	if len(reply) != replyHead+replyPerKey*n {
		return fmt.Errorf("%w: script reply has %d values, want %d", domain.ErrStoreUnavailable, len(reply), replyHead+replyPerKey*n)
	}
	var v [replyPerKey]int64
	allowed, err := reply[0].AsInt64()
	if err != nil {
		return fmt.Errorf("%w: script reply: %w", domain.ErrStoreUnavailable, err)
	}
	var st [domain.MaxLimits]domain.LimitStatus
	for i := range n {
		for j := range v {
			if v[j], err = reply[replyHead+replyPerKey*i+j].AsInt64(); err != nil {
				return fmt.Errorf("%w: script reply: %w", domain.ErrStoreUnavailable, err)
			}
		}
		st[i] = domain.LimitStatus{
			Allowed:    v[0] == 1,
			Remaining:  v[1],
			RetryAfter: domain.Micros(v[2]),
			ResetAfter: domain.Micros(v[3]),
		}
	}
	*res = domain.NewResult(st[:n])
	if res.Allowed != (allowed == 1) {
		// The script decides what it consumed; a disagreement would mean the
		// script and domain.NewResult have drifted apart.
		return fmt.Errorf("%w: script says allowed=%d, its per-key statuses say %t", domain.ErrStoreUnavailable, allowed, res.Allowed)
	}
	return nil
}

// Reset deletes key, forgetting every unit counted on it.
func (s *Store) Reset(ctx context.Context, key string) error {
	if s.closed.Load() {
		return domain.ErrStoreClosed
	}
	switch {
	case key == "":
		return &domain.LimitError{Index: -1, Field: "key", Reason: "must not be empty"}
	case len(key) > domain.MaxKeyLen:
		return &domain.LimitError{Index: -1, Field: "key", Reason: fmt.Sprintf("must be at most %d bytes", domain.MaxKeyLen)}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sluice redis: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Do(cctx, s.client.B().Del().Key(key).Build()).Error(); err != nil {
		return s.mapErr(ctx, err, s.timeout)
	}
	return nil
}

// Close marks the store closed and, unless the client came from
// WithClient, closes the client. Calls after Close return
// domain.ErrStoreClosed. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.ownClient {
		s.client.Close()
	}
	return nil
}

// nonce returns a string unique to this call among every call of every
// store: a random per-store prefix and a counter.
func (s *Store) nonce() string {
	var b [32]byte
	n := copy(b[:], s.noncePrefix)
	return string(strconv.AppendUint(b[:n], s.nonceCounter.Add(1), 36))
}

// mapErr turns a client error into the store's error contract. ctx is the
// caller's context, before the store's own deadline (timeout) was added.
func (s *Store) mapErr(ctx context.Context, err error, timeout time.Duration) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("%w: %w", domain.ErrStoreClosed, err)
	case ctx.Err() != nil:
		// The caller gave up (cancelled, or its own deadline passed first).
		return fmt.Errorf("sluice redis: %w", ctx.Err())
	case callerDeadlinePassed(ctx):
		// A socket deadline set from the caller's deadline may fire a hair
		// before the context's own timer marks it done.
		return fmt.Errorf("sluice redis: %w", context.DeadlineExceeded)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: no answer within %s: %w", domain.ErrStoreTimeout, timeout, err)
	}
	return fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, err)
}

func callerDeadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

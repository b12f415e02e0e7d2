// Package redis is the sluice Store on Redis, standalone or Cluster, through
// github.com/redis/rueidis.
//
// Every call is one round trip: the script lua.RateLimitV5
// (docs/adr/017-the-redis-script.md)
// checks all the limits of a request and consumes on every key only when
// every limit admits, atomically, since a script runs alone on its node.
// The same script holds reservations (ports.Reserver: Reserve, Settle,
// Renew) and concurrency windows under leases; see reserve.go and
// docs/adr/014-redis-script-v4.md. Sliding-log windows of one request
// that name the same key share one log in it (domain.SharesLog): the key
// is sent once, read once and written once per call, each window counting
// its own period in it (docs/adr/015-one-log-per-principal.md,
// docs/adr/016-redis-script-v5.md).
// The same call decides n identical requests at one instant
// (EvaluateRepeated, ports.Repeater), in O(keys) work whatever n.
// Requests that arrive while eight calls to their node (their slot, on a
// cluster) are in flight go together in one call of lua.BatchV5, which
// runs the same script once per request in arrival order, each decided
// exactly as its own call would; a lone request goes at once, alone
// (Config.MaxBatch, docs/adr/018-batches.md).
// The script is sent with EVALSHA; when the server does not know it
// (NOSCRIPT, e.g. after a restart or SCRIPT FLUSH), rueidis sends it once
// with EVAL, which also caches it, so a flushed script cache costs one
// larger request and never a failed decision.
//
// A sliding log of a limit up to CompactLogMaxLimit is one string of 7
// bytes per admitted unit; a larger one is a ZSET (Config.Log = LogZSet
// keeps every log a ZSET). docs/adr/003-sliding-log-versus-gcra.md says
// why and what it costs. A GCRA value carries the emission interval it
// was written with.
//
// The units a key holds survive a change of its window's limit, period or
// algorithm, and a sliding log counts correctly for callers whose instants
// are out of order by less than Config.Grace: the rules S1-S7 of
// docs/adr/009-stored-state-and-script-v3.md, which every store follows.
// A key holding a value the script cannot interpret (a wrong type, a
// malformed or out-of-range value written by something else) fails that
// request with a *domain.StoreValueError and nothing is written.
//
// On a cluster, all keys of one call must hash to one slot; a request
// whose keys do not is refused with domain.ErrCrossSlot before anything is
// sent. A standalone server takes any keys in one call, as its Partition
// (ports.Partitioned) says: the Limiter splits a request across slots only
// on a cluster (docs/adr/013).
//
// Time is, by default, the server's clock (Redis TIME, read inside the
// script), so that instances with skewed clocks count on one clock; with
// Config.Time set to CallerTime it is the now the caller passes (from its
// ports.Clock), in whole microseconds. Every key written carries a TTL of the
// time it stays relevant (at least Config.MinTTL), so an idle key
// disappears by itself.
//
// One deadline rules a call: the context's, when it has one (app.Limiter
// gives every decision app.Config.StoreTimeout), and Config.Timeout only
// for a call made without one. A missed deadline is a store timeout
// whichever of the two it was (see Store).
//
// New returns a store that is ready to serve at full speed: every
// connection the hot path uses is dialled and the script is loaded on
// every node, so the first decisions after boot pay for neither under
// their deadline. When no node answers, New returns the store
// unconnected (its calls fail at once, as an outage) and it connects in
// the background, found by the next probe: a service that starts during
// an outage starts degraded, not in a crash loop (Store.Ready,
// docs/runbook.md).
package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/ports"
)

// Store is a ports.Store on Redis. It is safe for simultaneous use; calls
// from many goroutines share the client's connections and are pipelined
// together by rueidis.
//
// A call that fails returns an error in one of three classes, which
// metrics and logs count apart (domain.CodeOf):
//
//   - a deadline passed (the context's or, without one, Config.Timeout):
//     the error wraps domain.ErrStoreTimeout and context.DeadlineExceeded;
//   - the caller cancelled its context: the error wraps context.Canceled
//     and nothing else, since giving up is neither a timeout nor an outage;
//   - Redis could not answer (refused connection, broken connection,
//     script error): the error wraps domain.ErrStoreUnavailable.
//
// A call after Close wraps domain.ErrStoreClosed, a malformed request is a
// *domain.LimitError, keys spanning two slots domain.ErrCrossSlot, and a
// key holding a value the script cannot interpret a
// *domain.StoreValueError (that request's fault, not an outage).
type Store struct {
	// client, cluster and batchers are set once, before live
	// (connect.go): read them only once live.Load() is true.
	live   atomic.Bool
	redial *redialer // nil with WithClient, whose client stays the caller's
	client rueidis.Client

	script   *rueidis.Lua
	batch    *rueidis.Lua // lua.BatchV5
	maxBatch int
	batchers []batcher // one (standalone) or one per slot (cluster)
	records  nodeRecords
	resets   resetSubs

	batchCalls, batchRequests atomic.Uint64 // Batched
	timeout                   time.Duration
	ownTimeout                string // says whose deadline passed, in errors
	serverTime                bool
	minTTL                    uint32 // milliseconds
	compact                   uint32 // largest sliding-log limit stored compactly
	grace                     int64  // microseconds (rule S5)
	cluster                   bool   // the client speaks to a Redis Cluster (ports.Partitioned)
	closed                    atomic.Bool

	// noncePrefix is random per Store, nonceCounter counts calls: together
	// they name ZSET members uniquely across processes and calls.
	noncePrefix  string
	nonceCounter atomic.Uint64

	bufs sync.Pool // *callBuf
}

var (
	_ ports.Store       = (*Store)(nil)
	_ ports.Repeater    = (*Store)(nil)
	_ ports.Forgetter   = (*Store)(nil)
	_ ports.Reserver    = (*Store)(nil)
	_ ports.Allotter    = (*Store)(nil)
	_ ports.Partitioned = (*Store)(nil)
	_ ports.Batcher     = (*Store)(nil)
)

// callBuf holds the KEYS and ARGV of one call, reused across calls so that
// a decision allocates nothing for them. args are strings over packed and
// nonce (unsafe.String): a callBuf goes back to the pool only once Redis
// has answered, never after a call abandoned on its deadline, whose
// command rueidis may still be writing.
type callBuf struct {
	keys   []string
	args   [3]string
	packed []byte
	nonce  []byte
	extra  [8]byte
}

// Argument and reply layout of lua.RateLimitV5 (see the script's header).
const (
	packedHead     = 29 // i8 now, B flags, I4 floor of TTLs, I4 compact bound, i8 grace, I4 n
	packedPerLimit = 17 // B algorithm + 4 × the index of its key in KEYS, I4 limit, i8 period, I4 cost
	flagConsume    = 1
	flagServerTime = 2
	flagOp         = 8 // times the op: opEvaluate (and Peek), opReserve, opSettle, opRenew
	replyHead      = 1 // the number of requests admitted
	replyAdmitted  = 2 // per key after the last admitted request: remaining, reset
	replyRefused   = 3 // per key of a refused request (or Peek): remaining, retry, reset
)

// The script's ops (flags / flagOp).
const (
	opEvaluate byte = iota // Evaluate, EvaluateRepeated and Peek
	opReserve
	opSettle
	opRenew
)

// request is what one script call carries besides its limits and now.
type request struct {
	n       int // identical requests; 1 for the lease ops
	consume bool
	op      byte
	// lease is the lease ID and leaseKey its record's key (ops above
	// opEvaluate); extra their ARGV[3]: a TTL in microseconds, or
	// Settle's actual cost.
	lease, leaseKey string
	extra           int64
	// ahead is how far ahead of its instant the call is made
	// (ReserveAhead), in microseconds.
	ahead int64
}

// maxFigureMicros bounds a retry-after or reset-after the script may
// report: a stored instant is at most two maximal periods ahead (the
// script refuses a value further ahead), and a wait adds at most one
// more period.
const maxFigureMicros = 3 * int64(domain.MaxPeriod/time.Microsecond)

// New connects to Redis as cfg says and returns a Store ready to serve:
// within Config.DialTimeout it dials every pipelined connection of every
// node (the ones EVALSHA and DEL travel on) and loads the script on each,
// checking its SHA1 (see LoadScript).
//
// When no node answers in time, in every mode, New returns the store
// unconnected, without an error: its calls fail at once with an error
// wrapping domain.ErrStoreUnavailable (they never wait for a dial), and
// it goes on connecting in the background, at every probe of its Prober
// and, at most every 250 ms, at a call; Ready says whether it is
// connected and, if not, why. The mode is found when it connects. A
// service that starts during an outage thus starts degraded (app.New's
// first probe fails) and recovers when Redis answers. New fails (and a
// later attempt stays unconnected, Ready saying why) for what no outage
// explains: credentials the server refuses, ModeCluster on a standalone
// server (*domain.ConfigError), a server that names the script by
// another SHA1 (ErrScriptMismatch). With WithClient, New loads the
// script and leaves the client's connections to the caller; an
// unreachable server is not an error there either.
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
		script:     rueidis.NewLuaScript(lua.RateLimitV5),
		batch:      rueidis.NewLuaScript(lua.BatchV5),
		maxBatch:   cfg.maxBatch(),
		timeout:    cfg.timeout(),
		ownTimeout: fmt.Sprintf("the store's own %s timeout (the call had no deadline)", cfg.timeout()),
		serverTime: cfg.Time == ServerTime,
		minTTL:     uint32(min(cfg.minTTLMillis(), math.MaxUint32)),
		compact:    CompactLogMaxLimit,
		grace:      cfg.graceMicros(),
	}
	if cfg.Log == LogZSet {
		s.compact = 0
	}
	s.bufs.New = func() any {
		return &callBuf{
			keys:   make([]string, 0, domain.MaxLimits+1),
			packed: make([]byte, 0, packedHead+packedPerLimit*domain.MaxLimits),
			nonce:  make([]byte, 0, 32),
		}
	}
	var prefix [8]byte
	if _, err := rand.Read(prefix[:]); err != nil {
		return nil, fmt.Errorf("sluice redis: nonce prefix: %w", err)
	}
	s.noncePrefix = base64.RawURLEncoding.EncodeToString(prefix[:])

	if s.client != nil {
		// The caller's client: its connections are the caller's to dial,
		// the script is ours to load.
		ctx, cancel := context.WithTimeout(context.Background(), cfg.dialTimeout())
		defer cancel()
		s.cluster = s.client.Mode() == rueidis.ClientModeCluster
		s.makeBatchers()
		s.live.Store(true)
		if err := s.warm(ctx, s.client, nil); err != nil && !isOutage(err) {
			return nil, err
		}
		return s, nil
	}
	// Dial every pipelined connection and load the script now, so that
	// no decision pays for either under its deadline; when no node
	// answers, the store starts unconnected (connect.go).
	s.redial = newRedialer(cfg, o.tuneClient)
	done, _ := s.startAttempt(false)
	<-done
	if err := s.Ready(); err != nil && !isOutage(err) {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// LoadScript sends SCRIPT LOAD of lua.RateLimitV5 and lua.BatchV5 to
// every node and checks that each answers with lua.RateLimitV5SHA1 and
// lua.BatchV5SHA1. New calls it; call it again after a server restart to
// spare the first decisions a NOSCRIPT round trip. A store not connected
// yet tries to connect within ctx, which loads the script. A node that
// cannot answer gives an error wrapping domain.ErrStoreUnavailable (or
// domain.ErrStoreTimeout); a node that names a script otherwise, an
// error wrapping ErrScriptMismatch.
func (s *Store) LoadScript(ctx context.Context) error {
	if s.closed.Load() {
		return domain.ErrStoreClosed
	}
	if err := s.connectWithin(ctx); err != nil {
		return err
	}
	return s.loadScript(ctx, s.client)
}

func (s *Store) loadScript(ctx context.Context, client rueidis.Client) error {
	var errs []error
	for addr, node := range client.Nodes() {
		for _, sc := range [...]struct{ src, sha string }{{lua.RateLimitV5, lua.RateLimitV5SHA1}, {lua.BatchV5, lua.BatchV5SHA1}} {
			sha, err := node.Do(ctx, node.B().ScriptLoad().Script(sc.src).Build()).ToString()
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("SCRIPT LOAD on %s: %w", addr, s.mapErr(ctx, ctx, err, "the caller's deadline")))
			case sha != sc.sha:
				errs = append(errs, fmt.Errorf("%w: SCRIPT LOAD on %s returned %s, want %s", ErrScriptMismatch, addr, sha, sc.sha))
			}
			if err != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// makeBatchers sizes the batchers for the client's mode: one for a
// standalone server, one per hash slot (16 384) for a cluster.
func (s *Store) makeBatchers() {
	n := 1
	if s.cluster {
		n = slotCount
	}
	s.batchers = make([]batcher, n)
	s.initAnswers()
}

// Client returns the underlying rueidis client, e.g. for a health check
// that needs more than the Prober; nil while the store is not connected
// (see Ready).
func (s *Store) Client() rueidis.Client {
	if !s.live.Load() {
		return nil
	}
	return s.client
}

// Evaluate checks limits at now and consumes their cost on every key only
// if every limit admits it; see ports.Store. With ServerTime (the default),
// now is ignored and the server's clock is used.
func (s *Store) Evaluate(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	var rep domain.Repeated
	if err := s.run(ctx, now, limits, 1, true, &rep); err != nil {
		return domain.Result{}, err
	}
	return rep.For(0, limits), nil
}

// EvaluateRepeated decides n identical requests at now in one script call,
// as n sequential Evaluate calls would; see ports.Repeater. The script's
// work grows with the keys, not with n.
func (s *Store) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	var rep domain.Repeated
	if n < 1 || n > ports.MaxRepeat {
		return rep, &domain.LimitError{Index: -1, Field: "n", Reason: fmt.Sprintf("must be between 1 and %d, got %d", ports.MaxRepeat, n)}
	}
	if err := s.run(ctx, now, limits, n, true, &rep); err != nil {
		return domain.Repeated{}, err
	}
	return rep, nil
}

// Peek answers as Evaluate would, consuming nothing and writing nothing.
// It accepts concurrency windows (domain.ValidateHeld): their Remaining
// is the limit less the slots held by unexpired leases, their
// RetryAfter, when full, the wait until the earliest of those leases
// expires, and their ResetAfter the wait until the last one does.
func (s *Store) Peek(ctx context.Context, now time.Time, limits []domain.Limit) (domain.Result, error) {
	var rep domain.Repeated
	if err := s.run(ctx, now, limits, 1, false, &rep); err != nil {
		return domain.Result{}, err
	}
	return rep.Refused, nil
}

// run sends one script call for n requests of limits and decodes its
// reply into rep (for Peek, rep.Refused holds the statuses as they stand).
func (s *Store) run(ctx context.Context, now time.Time, limits []domain.Limit, n int, consume bool, rep *domain.Repeated) error {
	validate := domain.ValidateLimits
	if !consume {
		validate = domain.ValidateHeld
	}
	if err := s.admit(ctx, limits, validate); err != nil {
		return err
	}
	reply, err := s.call(ctx, now, limits, request{n: n, consume: consume})
	if err != nil {
		return err
	}
	return decode(reply, limits, n, consume, rep)
}

// admit checks what every call checks before anything is sent: the store
// is open, limits pass validate, the store is connected, their keys share
// one slot, ctx is live.
func (s *Store) admit(ctx context.Context, limits []domain.Limit, validate func([]domain.Limit) error) error {
	if s.closed.Load() {
		return domain.ErrStoreClosed
	}
	if err := validate(limits); err != nil {
		return err
	}
	if !s.live.Load() {
		return s.notLive()
	}
	if ok, i := sameSlot(limits); !ok && s.cluster {
		return fmt.Errorf("%w: limit %d hashes to slot %d, limit 0 to slot %d; give every key of a request the same {hash tag}",
			domain.ErrCrossSlot, i, Slot(limits[i].Key), Slot(limits[0].Key))
	}
	if ctx.Err() != nil {
		return s.mapErr(ctx, ctx, ctx.Err(), "the caller's deadline")
	}
	return nil
}

// call sends one script call of req on limits and returns the script's
// reply array; the script's own errors become the store's (see Store).
func (s *Store) call(ctx context.Context, now time.Time, limits []domain.Limit, req request) ([]rueidis.RedisMessage, error) {
	buf := s.bufs.Get().(*callBuf)
	args := s.pack(buf, now, limits, &req)
	cctx, cancel, whose := s.deadline(ctx)
	defer cancel()
	resp := s.send(cctx, buf.keys, args)
	if resp.NonRedisError() == nil {
		// Redis answered: rueidis is done with the arguments.
		defer s.bufs.Put(buf)
	}
	return s.reply(ctx, cctx, whose, limits, req.leaseKey, resp)
}

// reply turns what came back for one request into the script's reply
// array; the script's own errors become the store's (see Store).
func (s *Store) reply(ctx, cctx context.Context, whose string, limits []domain.Limit, leaseKey string, resp rueidis.RedisResult) ([]rueidis.RedisMessage, error) {
	if err := resp.Error(); err != nil {
		if verr := valueError(err, limits, leaseKey); verr != nil {
			return nil, verr
		}
		return nil, s.mapErr(ctx, cctx, err, whose)
	}
	reply, err := resp.ToArray()
	if err != nil {
		return nil, fmt.Errorf("%w: unexpected script reply: %w", domain.ErrStoreUnavailable, err)
	}
	return reply, nil
}

// valuePrefix starts the script's error reply for a key holding a value it
// cannot interpret: "SLUICEVALUE <i> <reason>", i counted from 1.
const valuePrefix = "SLUICEVALUE "

// valueError turns the script's SLUICEVALUE error reply into a
// *domain.StoreValueError, or returns nil for any other error. Key
// len(limits)+1 is the lease record (leaseKey), which is no limit's:
// Index -1.
func valueError(err error, limits []domain.Limit, leaseKey string) error {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return nil
	}
	msg, ok := strings.CutPrefix(re.Error(), valuePrefix)
	if !ok {
		return nil
	}
	idx, reason, _ := strings.Cut(msg, " ")
	i, perr := strconv.Atoi(idx)
	if perr == nil && leaseKey != "" && i == len(limits)+1 {
		return &domain.StoreValueError{Index: -1, Key: leaseKey, Reason: reason}
	}
	if perr != nil || i < 1 || i > len(limits) {
		return fmt.Errorf("%w: script error reply names no key of the request: %q", domain.ErrStoreUnavailable, re.Error())
	}
	return &domain.StoreValueError{Index: i - 1, Key: limits[i-1].Key, Reason: reason}
}

// pack writes the script's KEYS and ARGV for req on limits into buf,
// without allocating, and returns ARGV: [1] the binary header and limits,
// [2] the nonce (or the lease ID), [3] for the lease ops req.extra. KEYS
// holds each distinct key once, in the order the limits first name it;
// each limit carries its key's index (a shared log, domain.SharesLog).
// The script names a key's error by the first limit naming it (or
// len(limits)+1 for the lease record), as valueError reads it.
func (s *Store) pack(buf *callBuf, now time.Time, limits []domain.Limit, req *request) []string {
	flags := req.op * flagOp
	var us int64
	if req.consume {
		flags |= flagConsume
	}
	if s.serverTime {
		// The script adds it to TIME.
		flags |= flagServerTime
		us = req.ahead
	} else {
		us = now.UnixMicro() + req.ahead
	}
	p := binary.BigEndian.AppendUint64(buf.packed[:0], uint64(us))
	p = append(p, flags)
	p = binary.BigEndian.AppendUint32(p, s.minTTL)
	p = binary.BigEndian.AppendUint32(p, s.compact)
	p = binary.BigEndian.AppendUint64(p, uint64(s.grace))
	p = binary.BigEndian.AppendUint32(p, uint32(req.n)) // 1..ports.MaxRepeat
	keys := buf.keys[:0]
	var index [domain.MaxLimits]byte // the 1-based KEYS index of each limit's key
	for i := range limits {
		l := &limits[i]
		if first, shared := domain.SharesLog(limits, i); shared {
			index[i] = index[first]
		} else {
			keys = append(keys, l.Key)
			index[i] = byte(len(keys)) // at most domain.MaxLimits
		}
		// An algorithm is below 4, an index at most domain.MaxLimits.
		p = append(p, byte(l.Window.Algorithm)+4*index[i])
		// ValidateLimits bounds limit and cost by domain.MaxLimit (2^30).
		p = binary.BigEndian.AppendUint32(p, uint32(l.Window.Limit))
		p = binary.BigEndian.AppendUint64(p, uint64(l.Window.PeriodMicros()))
		p = binary.BigEndian.AppendUint32(p, uint32(l.Cost))
	}
	buf.packed = p
	buf.args[0] = unsafe.String(unsafe.SliceData(p), len(p))
	if req.op != opEvaluate {
		// The lease ID names the members a reservation adds, so that
		// Settle finds them; the record is the last key.
		buf.keys = append(keys, req.leaseKey)
		buf.args[1] = req.lease
		binary.BigEndian.PutUint64(buf.extra[:], uint64(req.extra))
		buf.args[2] = unsafe.String(&buf.extra[0], len(buf.extra))
		return buf.args[:3]
	}
	buf.keys = keys
	buf.args[1] = "-" // Peek adds no member
	if req.consume {
		// A string unique to this call among every call of every store.
		buf.nonce = append(buf.nonce[:0], s.noncePrefix...)
		buf.nonce = strconv.AppendUint(buf.nonce, s.nonceCounter.Add(1), 36)
		buf.args[1] = unsafe.String(unsafe.SliceData(buf.nonce), len(buf.nonce))
	}
	return buf.args[:2]
}

// decode fills rep from the script's reply to n requests of limits (for
// Peek, consume false: rep.Refused holds the statuses as they stand),
// aggregated by domain.NewResult. A reply of the wrong shape wraps
// domain.ErrStoreUnavailable; a figure out of range (a remaining count
// above domain.MaxLimit, a wait beyond any window) is a
// *domain.StoreValueError of its key, never a decision.
func decode(reply []rueidis.RedisMessage, limits []domain.Limit, n int, consume bool, rep *domain.Repeated) error {
	k := len(limits)
	if len(reply) < replyHead {
		return fmt.Errorf("%w: empty script reply", domain.ErrStoreUnavailable)
	}
	admitted, err := reply[0].AsInt64()
	if err != nil {
		return fmt.Errorf("%w: script reply: %w", domain.ErrStoreUnavailable, err)
	}
	if admitted < 0 || admitted > int64(n) {
		return fmt.Errorf("%w: script reply admits %d of %d requests", domain.ErrStoreUnavailable, admitted, n)
	}
	want := replyHead
	if consume && admitted > 0 {
		want += replyAdmitted * k
	}
	if !consume || admitted < int64(n) {
		want += replyRefused * k
	}
	if len(reply) != want {
		return fmt.Errorf("%w: script reply has %d values, want %d", domain.ErrStoreUnavailable, len(reply), want)
	}
	*rep = domain.Repeated{N: n, Admitted: int(admitted)}
	if !consume {
		rep.Admitted = 0
	}
	var st [domain.MaxLimits]domain.LimitStatus
	var v [replyRefused]int64
	at := replyHead
	if consume && admitted > 0 {
		for i := range k {
			if err := figures(reply[at:at+replyAdmitted], v[:replyAdmitted], limits, i); err != nil {
				return err
			}
			at += replyAdmitted
			st[i] = domain.LimitStatus{Allowed: true, Remaining: v[0], ResetAfter: domain.Micros(v[1])}
		}
		rep.Last = domain.NewResult(st[:k])
	}
	if !consume || admitted < int64(n) {
		for i := range k {
			if err := figures(reply[at:at+replyRefused], v[:], limits, i); err != nil {
				return err
			}
			at += replyRefused
			st[i] = domain.LimitStatus{Allowed: v[1] == 0, Remaining: v[0], RetryAfter: domain.Micros(v[1]), ResetAfter: domain.Micros(v[2])}
		}
		rep.Refused = domain.NewResult(st[:k])
		if wantAllowed := !consume && admitted > 0; rep.Refused.Allowed != wantAllowed {
			// The script decides what it consumed; a disagreement would
			// mean the script and domain.NewResult have drifted apart.
			return fmt.Errorf("%w: script admits %d of %d, its per-key statuses say allowed=%t", domain.ErrStoreUnavailable, admitted, n, rep.Refused.Allowed)
		}
	}
	return nil
}

// figures reads the integers of key i's statuses from vals into v and
// range-checks them: v[0] a remaining count, the others waits in
// microseconds.
func figures(vals []rueidis.RedisMessage, v []int64, limits []domain.Limit, i int) error {
	for j := range v {
		x, err := vals[j].AsInt64()
		if err != nil {
			return fmt.Errorf("%w: script reply: %w", domain.ErrStoreUnavailable, err)
		}
		bound, what := maxFigureMicros, "a wait"
		if j == 0 {
			bound, what = limits[i].Window.Limit, "a remaining count"
		}
		if x < 0 || x > bound {
			return &domain.StoreValueError{Index: i, Key: limits[i].Key,
				Reason: fmt.Sprintf("the script reports %s of %d, outside 0..%d", what, x, bound)}
		}
		v[j] = x
	}
	return nil
}

// Reset deletes key, forgetting every unit counted on it (every window of
// a shared log, docs/adr/015).
func (s *Store) Reset(ctx context.Context, key string) error {
	_, err := s.Forget(ctx, key)
	return err
}

// Forget deletes key as Reset does and reports whether it existed: DEL's
// count (ports.Forgetter). A key outlives its units until its TTL, the
// longest of its windows.
func (s *Store) Forget(ctx context.Context, key string) (bool, error) {
	if s.closed.Load() {
		return false, domain.ErrStoreClosed
	}
	switch {
	case key == "":
		return false, &domain.LimitError{Index: -1, Field: "key", Reason: "must not be empty"}
	case len(key) > domain.MaxKeyLen:
		return false, &domain.LimitError{Index: -1, Field: "key", Reason: fmt.Sprintf("must be at most %d bytes", domain.MaxKeyLen)}
	}
	if !s.live.Load() {
		return false, s.notLive()
	}
	if ctx.Err() != nil {
		return false, s.mapErr(ctx, ctx, ctx.Err(), "the caller's deadline")
	}
	cctx, cancel, whose := s.deadline(ctx)
	defer cancel()
	n, err := s.client.Do(cctx, s.client.B().Del().Key(key).Build()).AsInt64()
	if err != nil {
		return false, s.mapErr(ctx, cctx, err, whose)
	}
	return n > 0, nil
}

// Close marks the store closed and, unless the client came from
// WithClient, closes the client; an attempt to connect in flight gives up
// and Close waits for it. Calls after Close return domain.ErrStoreClosed.
// Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.redial == nil {
		s.stopResets()
		return nil // WithClient: the client stays the caller's
	}
	r := s.redial
	r.cancel()
	r.mu.Lock()
	live, attempt := s.live.Load(), r.attempt
	r.mu.Unlock()
	if attempt != nil {
		<-attempt // it sees closed and closes what it dialled
	}
	if live {
		s.client.Close()
	}
	s.stopResets()
	return nil
}

// stopResets ends the subscription to reset notices, if any.
func (s *Store) stopResets() {
	s.resets.mu.Lock()
	cancel, done := s.resets.cancel, s.resets.done
	s.resets.cancel, s.resets.done = nil, nil
	s.resets.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// deadline returns the context a call runs under and whose deadline it
// is: ctx itself when it has a deadline, which is then the only one (the
// caller's budget, e.g. app.Config.StoreTimeout), else ctx bounded by
// Config.Timeout.
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc, string) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}, "the caller's deadline"
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	return cctx, cancel, s.ownTimeout
}

// mapErr turns a client error into the store's error contract (see
// Store). ctx is the caller's context, cctx the one the call ran under
// (ctx, or ctx bounded by the store's own timeout), and whose names
// cctx's deadline for the message.
func (s *Store) mapErr(ctx, cctx context.Context, err error, whose string) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("%w: %w", domain.ErrStoreClosed, err)
	case classified(err):
		return err
	case errors.Is(ctx.Err(), context.Canceled),
		cctx.Err() == nil && errors.Is(err, context.Canceled):
		// The caller gave up: not the store's failure.
		return keepInFlight(fmt.Errorf("sluice redis: %w", context.Canceled), err)
	case cctx.Err() != nil, deadlinePassed(cctx),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		// A socket deadline set from the context's may fire a hair before
		// the context's own timer marks it done: deadlinePassed.
		return keepInFlight(fmt.Errorf("%w: no answer within %s: %w", domain.ErrStoreTimeout, whose, context.DeadlineExceeded), err)
	}
	return fmt.Errorf("%w: %w", domain.ErrStoreUnavailable, err)
}

// keepInFlight is mapped, the error mapErr made of err, still saying
// that the call was sent when its caller gave up (ports.ErrInFlight): it
// may have run.
func keepInFlight(mapped, err error) error {
	if errors.Is(err, ports.ErrInFlight) {
		return fmt.Errorf("%w: %w", mapped, ports.ErrInFlight)
	}
	return mapped
}

func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

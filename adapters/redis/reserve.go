package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
)

// Reservations, concurrency windows and partitions on Redis: the ops 1-3
// of lua.RateLimitV5, v4's ops (docs/adr/012-reservations-and-leases.md
// for the semantics, docs/adr/014-redis-script-v4.md for the keys, the replies
// and the failure classes).
//
// A lease is a record key beside the request's keys, in the slot of its
// first key, so that one script call reads and writes them all: Reserve
// writes it open with the lease's instant and expiry, Settle marks it
// settled (which is what makes Settle idempotent), Renew moves its expiry.
// It lives for the lease's TTL plus a margin of as much again, at most a
// minute and at least Config.MinTTL. A concurrency window is a ZSET whose
// members name the lease holding each slot, scored by that lease's
// expiry: a holder that dies leaves members that stop counting at their
// expiry, with no process to sweep them.

// leaseKeyInfix joins the first limit key and the lease ID in the name of
// a lease record.
const leaseKeyInfix = ":lease:"

// Settle's replies (lua.RateLimitV5, op 2).
const (
	replySettled        = 1
	replyAlreadySettled = 2
	replyExpired        = 3
)

// leaseKey returns the record key of lease id reserved on a request whose
// first key is first: first itself, then ":lease:" and the ID, when first
// has a hash tag (every sluice key does, docs/adr/004): the record keeps
// the tag, hence the slot, and the key's prefix, hence whatever an ACL
// (the runbook's "~rl:*") or a SCAN pattern grants the request's keys.
// Without a tag, first is wrapped in braces, which hashes it as before.
// A key without a tag that holds a '}' cannot be wrapped and keep its
// slot: it is refused with a *domain.LimitError.
func leaseKey(first, id string) (string, error) {
	if hashTag(first) != first {
		return first + leaseKeyInfix + id, nil
	}
	if strings.IndexByte(first, '}') >= 0 {
		return "", &domain.LimitError{Index: 0, Field: "key",
			Reason: "a reservation's first key needs a {hash tag} when it holds a '}': its lease record must share the key's slot"}
	}
	return "{" + first + "}" + leaseKeyInfix + id, nil
}

// newLeaseID returns domain.LeaseIDLen lowercase hex characters of
// crypto/rand.
func newLeaseID() (string, error) {
	var b [domain.LeaseIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sluice redis: lease ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Reserve decides limits as Evaluate does, concurrency windows included,
// and when every window admits holds what it took under a new lease; see
// ports.Reserver. The lease's At is the script's instant: the server's
// clock under ServerTime, now (to the microsecond) under CallerTime.
//
// A call that fails after Redis may have run the script (a deadline, a
// broken connection) may have taken the reservation: its lease is not
// returned, so it is never settled; it expires after ttl, counted at its
// cost, and its concurrency slots come back then. Reserve is not retried.
func (s *Store) Reserve(ctx context.Context, now time.Time, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	return s.reserve(ctx, now, 0, limits, ttl)
}

// ReserveAhead is Reserve at the script's instant plus ahead: now + ahead
// under CallerTime, Redis' TIME + ahead under ServerTime; see
// ports.Allotter and docs/adr/019-allotments.md.
func (s *Store) ReserveAhead(ctx context.Context, now time.Time, ahead time.Duration, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if ahead < 0 || ahead > domain.MaxAllotmentHold {
		return domain.Result{}, domain.Lease{}, &domain.LimitError{Index: -1, Field: "ahead", Reason: fmt.Sprintf("must be between 0 and %s", domain.MaxAllotmentHold)}
	}
	return s.reserve(ctx, now, ahead.Microseconds(), limits, ttl)
}

func (s *Store) reserve(ctx context.Context, now time.Time, ahead int64, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error) {
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if err := s.admit(ctx, limits, domain.ValidateHeld); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	id, err := newLeaseID()
	if err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	lkey, err := leaseKey(limits[0].Key, id)
	if err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	reply, err := s.call(ctx, now, limits, request{n: 1, consume: true, op: opReserve, lease: id, leaseKey: lkey, extra: ttl.Microseconds(), ahead: ahead})
	if err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if len(reply) < replyHead+1 {
		return domain.Result{}, domain.Lease{}, fmt.Errorf("%w: Reserve reply has %d values", domain.ErrStoreUnavailable, len(reply))
	}
	at, err := reply[len(reply)-1].AsInt64()
	if err != nil {
		return domain.Result{}, domain.Lease{}, fmt.Errorf("%w: Reserve reply: %w", domain.ErrStoreUnavailable, err)
	}
	var rep domain.Repeated
	if err := decode(reply[:len(reply)-1], limits, 1, true, &rep); err != nil {
		return domain.Result{}, domain.Lease{}, err
	}
	if rep.Admitted == 0 {
		return rep.Refused, domain.Lease{}, nil
	}
	return rep.Last, domain.Lease{ID: id, At: time.UnixMicro(at), TTL: ttl}, nil
}

// Settle ends lease at actual units; see ports.Reserver. The script reads
// the lease's record first: settled, it answers AlreadySettled; expired
// or gone (its TTL and margin passed), Expired; both change nothing.
// Otherwise it refunds or charges each rate window, gives the
// concurrency slots back and marks the record settled, in one atomic
// call. Refunds take back units stamped at the record's instant (the
// lease's At).
//
// Settle is not retried by the store when its outcome is unknown (a
// deadline, a broken connection), but a caller may retry it safely: a
// Settle that did run left the record settled, and the retry answers
// AlreadySettled and changes nothing (docs/adr/014).
func (s *Store) Settle(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, actual int64) (domain.Settlement, error) {
	if !lease.Valid() {
		return 0, &domain.LimitError{Index: -1, Field: "lease", Reason: "not a lease a store returned (ID or TTL out of bounds)"}
	}
	if err := domain.ValidateActual(actual); err != nil {
		return 0, err
	}
	if err := s.admit(ctx, limits, domain.ValidateHeld); err != nil {
		return 0, err
	}
	lkey, err := leaseKey(limits[0].Key, lease.ID)
	if err != nil {
		return 0, err
	}
	reply, err := s.call(ctx, now, limits, request{n: 1, op: opSettle, lease: lease.ID, leaseKey: lkey, extra: actual})
	if err != nil {
		return 0, err
	}
	code, err := onlyInt(reply)
	if err != nil {
		return 0, err
	}
	switch code {
	case replySettled:
		return domain.Settled, nil
	case replyAlreadySettled:
		return domain.AlreadySettled, nil
	case replyExpired:
		return domain.Expired, nil
	}
	return 0, fmt.Errorf("%w: Settle reply %d", domain.ErrStoreUnavailable, code)
}

// Renew moves lease's expiry to now plus ttl (the server's now under
// ServerTime); see ports.Reserver. The renewed lease keeps its At, which
// refunds use, and carries ttl. A lease settled, expired or unknown
// gives an error wrapping domain.ErrLeaseEnded. A renewal whose outcome
// is unknown may be sent again: it only moves the expiry once more.
func (s *Store) Renew(ctx context.Context, now time.Time, lease domain.Lease, limits []domain.Limit, ttl time.Duration) (domain.Lease, error) {
	if !lease.Valid() {
		return domain.Lease{}, &domain.LimitError{Index: -1, Field: "lease", Reason: "not a lease a store returned (ID or TTL out of bounds)"}
	}
	if err := domain.ValidateLeaseTTL(ttl); err != nil {
		return domain.Lease{}, err
	}
	if err := s.admit(ctx, limits, domain.ValidateHeld); err != nil {
		return domain.Lease{}, err
	}
	lkey, err := leaseKey(limits[0].Key, lease.ID)
	if err != nil {
		return domain.Lease{}, err
	}
	reply, err := s.call(ctx, now, limits, request{n: 1, op: opRenew, lease: lease.ID, leaseKey: lkey, extra: ttl.Microseconds()})
	if err != nil {
		return domain.Lease{}, err
	}
	if len(reply) == 0 {
		return domain.Lease{}, fmt.Errorf("%w: empty Renew reply", domain.ErrStoreUnavailable)
	}
	ok, err := reply[0].AsInt64()
	switch {
	case err != nil:
		return domain.Lease{}, fmt.Errorf("%w: Renew reply: %w", domain.ErrStoreUnavailable, err)
	case ok == 0 && len(reply) == 1:
		return domain.Lease{}, fmt.Errorf("%w: lease %s", domain.ErrLeaseEnded, lease.ID)
	case ok != 1 || len(reply) != 2:
		return domain.Lease{}, fmt.Errorf("%w: Renew reply of %d values starting %d", domain.ErrStoreUnavailable, len(reply), ok)
	}
	return domain.Lease{ID: lease.ID, At: lease.At, TTL: ttl}, nil
}

// Partition returns the Redis Cluster hash slot of key, true, on a
// cluster; 0, false on a standalone server, where one call takes any
// keys, and on a store not connected yet, whose calls fail at once. See
// ports.Partitioned.
func (s *Store) Partition(key string) (int, bool) {
	if !s.live.Load() || !s.cluster {
		return 0, false
	}
	return int(Slot(key)), true
}

// onlyInt reads a reply of one integer.
func onlyInt(reply []rueidis.RedisMessage) (int64, error) {
	if len(reply) != 1 {
		return 0, fmt.Errorf("%w: script reply has %d values, want 1", domain.ErrStoreUnavailable, len(reply))
	}
	v, err := reply[0].AsInt64()
	if err != nil {
		return 0, fmt.Errorf("%w: script reply: %w", domain.ErrStoreUnavailable, err)
	}
	return v, nil
}

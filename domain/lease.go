package domain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CodeLeaseEnded marks a Renew of a lease that is no longer held: it was
// settled, or it expired (docs/adr/012).
const CodeLeaseEnded Code = "ERR-LEASE-01"

// ErrLeaseEnded is returned (wrapped) by Reserver.Renew for a lease that
// was settled or has expired: what it held is already back, or counted.
var ErrLeaseEnded = errors.New("sluice: lease settled or expired")

// MinLeaseTTL is the shortest lease TTL; the longest, MaxLeaseTTL, is
// declared with the window bounds since it bounds a Concurrency window's
// Period.
const MinLeaseTTL = time.Millisecond

// LeaseIDLen is the length of a lease ID: 32 lowercase hex characters (16
// random bytes).
const LeaseIDLen = 32

// Lease names one reservation held by a store (docs/adr/012): a
// reservation's cost stays consumed on its rate windows, and its slots of
// its concurrency windows stay held, until Settle, or until the lease
// expires at At + TTL (renewals move it), when it counts as settled at the
// cost reserved and its slots come back.
type Lease struct {
	// ID is random, unique to the reservation (LeaseIDLen hex
	// characters), chosen by the store.
	ID string
	// At is the store's instant of the reservation: the now it was given,
	// or its own clock's (Redis TIME) when it reads its own. Refunds take
	// back units stamped at At.
	At time.Time
	// TTL is the lease's time to live from At (or from its last renewal).
	TTL time.Duration
}

// Valid reports whether l could have been returned by a store: an ID of
// LeaseIDLen lowercase hex characters and a TTL within bounds.
func (l Lease) Valid() bool {
	if len(l.ID) != LeaseIDLen || l.TTL < MinLeaseTTL || l.TTL > MaxLeaseTTL {
		return false
	}
	for i := 0; i < len(l.ID); i++ {
		c := l.ID[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidateLeaseTTL returns a *LimitError (Index -1, Field "ttl") for a TTL
// outside [MinLeaseTTL, MaxLeaseTTL] or not a whole number of
// microseconds.
func ValidateLeaseTTL(ttl time.Duration) error {
	switch {
	case ttl < MinLeaseTTL || ttl > MaxLeaseTTL:
		return &LimitError{Index: -1, Field: "ttl", Reason: fmt.Sprintf("must be between %s and %s", MinLeaseTTL, MaxLeaseTTL)}
	case ttl%time.Microsecond != 0:
		return &LimitError{Index: -1, Field: "ttl", Reason: "must be a whole number of microseconds"}
	}
	return nil
}

// ValidateActual returns a *LimitError (Index -1, Field "actual") for an
// actual cost Settle cannot take: below 0 or above MaxLimit.
func ValidateActual(actual int64) error {
	if actual < 0 || actual > MaxLimit {
		return &LimitError{Index: -1, Field: "actual", Reason: fmt.Sprintf("must be between 0 and %d", MaxLimit)}
	}
	return nil
}

// Settlement is what Settle did.
type Settlement uint8

const (
	// Settled: this call settled the lease. Each rate window now counts
	// the actual cost instead of the reserved one (the difference
	// refunded, or charged even past the limit), and the concurrency
	// slots came back.
	Settled Settlement = iota + 1
	// AlreadySettled: an earlier Settle of this lease settled it; this
	// call changed nothing. Settle is idempotent.
	AlreadySettled
	// Expired: the lease had expired before this call: it counted as
	// settled at the cost reserved and its slots were already back. This
	// call changed nothing.
	Expired
)

// String returns "settled", "already_settled" or "expired".
func (s Settlement) String() string {
	switch s {
	case Settled:
		return "settled"
	case AlreadySettled:
		return "already_settled"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("settlement(%d)", uint8(s))
}

// maxCostDigits bounds a reported cost's digits: MaxLimit has fewer.
const maxCostDigits = 19

// ParseCost reads a cost a handler reports after serving a request (a
// response header, a trailer, gRPC trailer metadata; docs/adr/012): one
// integer in decimal ASCII digits between 0 and MaxLimit, with optional
// surrounding spaces or tabs. Anything else (a sign, a fraction, a list,
// an empty value) is not a cost: ok is false.
func ParseCost(v string) (cost int64, ok bool) {
	v = strings.Trim(v, " \t")
	if v == "" || len(v) > maxCostDigits {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	c, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ValidateActual(c) != nil {
		return 0, false
	}
	return c, true
}

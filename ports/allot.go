package ports

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Allotter is an optional capability of a Reserver, found by type
// assertion: a reservation made ahead of the store's instant, which is how
// an instance takes an allotment (docs/adr/019-allotments.md: a block of
// requests of one key set, reserved in one call and admitted in process
// for a while). Its methods are safe for simultaneous use.
type Allotter interface {
	Reserver
	// ReserveAhead is Reserve at the store's instant plus ahead (0 ≤ ahead
	// ≤ domain.MaxAllotmentHold): the caller's now + ahead, or, for a
	// store that reads its own clock (redis.ServerTime), that clock +
	// ahead. The lease's At is that instant. The units it records are
	// stamped then, ahead of the instants of the callers of the moment,
	// and count for every caller until they leave their window: a store
	// never takes a unit recorded ahead of a caller's instant for a sign
	// that the caller lags (rule S5 of docs/adr/009).
	ReserveAhead(ctx context.Context, now time.Time, ahead time.Duration, limits []domain.Limit, ttl time.Duration) (domain.Result, domain.Lease, error)
}

// ResetNotifier is an optional capability of a Store, found by type
// assertion: it tells every instance on the store which keys a reset
// forgot, so that each drops its allotments on them at once
// (docs/adr/019-allotments.md, "A reset"). Notices are best effort: an
// instance that misses one stops admitting from an allotment taken before
// the reset when its hold ends.
type ResetNotifier interface {
	// NotifyReset tells every instance subscribed on the store that keys
	// were reset.
	NotifyReset(ctx context.Context, keys []string) error
	// OnReset calls fn with the keys of every notice, this instance's own
	// included, from a goroutine of the store's, until stop is called or
	// the store is closed. fn must not block.
	OnReset(fn func(keys []string)) (stop func())
}

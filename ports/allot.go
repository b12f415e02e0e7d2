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

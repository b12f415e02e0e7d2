package local

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Defaults used for the zero values of Config.
const (
	// DefaultMaxCost is the default memory bound of the cache: 64 MiB.
	DefaultMaxCost = 64 << 20
	// DefaultSweepInterval is the default logical time between two sweeps
	// of idle keys.
	DefaultSweepInterval = time.Minute
	// DefaultIdleGrace is how long, by default, a key's state is kept after
	// it became trivial at the latest instant the store has seen.
	DefaultIdleGrace = time.Minute
	// countersPerCostByte derives NumCounters from MaxCost: ristretto
	// recommends ten counters per entry it may hold, and an entry with a
	// short key and no log costs about 320 bytes, hence one counter per 32
	// bytes.
	countersPerCostByte = 32
	// minCounters keeps the admission sketch useful for tiny caches.
	minCounters = 1024
	// pendingShare is the default MaxPendingCost as a fraction of MaxCost.
	pendingShare = 8
	// minPendingCost keeps room for a few hundred pending entries even when
	// MaxCost is tiny.
	minPendingCost = 128 << 10
)

// Config configures a Store. The zero value is valid and means the
// documented defaults.
type Config struct {
	// MaxCost bounds, in bytes (an estimate, see the package doc), the
	// entries the ristretto cache holds. Zero means DefaultMaxCost.
	MaxCost int64
	// NumCounters is the number of ristretto's admission counters. Zero
	// derives it from MaxCost: one counter per 32 bytes (about ten per
	// entry, as ristretto recommends), at least 1024.
	NumCounters int64
	// MaxPendingCost bounds, in bytes (the same estimate), the entries held
	// outside ristretto: those whose Set is not yet visible, was dropped or
	// refused, and live entries ristretto evicted. When it is exceeded the
	// oldest pending entry is forgotten (see the package doc's guarantees).
	// The bound is split evenly across the directory's shards. Zero means
	// MaxCost/8, at least 128 KiB.
	MaxPendingCost int64
	// SweepInterval is how far the instants the store is given must advance
	// between two sweeps of idle keys. Zero means DefaultSweepInterval; if
	// set, it must be at least domain.MinPeriod.
	SweepInterval time.Duration
	// IdleGrace is how long a key's state is kept after it became trivial
	// (back to its full quota) at the latest instant the store has seen. It
	// is also how far a caller's now may lag that latest instant with every
	// answer staying exact: a clock that goes backwards by less than
	// IdleGrace never finds a live key forgotten. Zero means
	// DefaultIdleGrace.
	IdleGrace time.Duration
}

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	switch {
	case c.MaxCost < 0:
		return &domain.ConfigError{Field: "local.max_cost", Reason: "must not be negative"}
	case c.NumCounters < 0:
		return &domain.ConfigError{Field: "local.num_counters", Reason: "must not be negative"}
	case c.MaxPendingCost < 0:
		return &domain.ConfigError{Field: "local.max_pending_cost", Reason: "must not be negative"}
	case c.SweepInterval < 0:
		return &domain.ConfigError{Field: "local.sweep_interval", Reason: "must not be negative"}
	case c.SweepInterval > 0 && c.SweepInterval < domain.MinPeriod:
		return &domain.ConfigError{Field: "local.sweep_interval", Reason: fmt.Sprintf("must be at least %s", domain.MinPeriod)}
	case c.IdleGrace < 0:
		return &domain.ConfigError{Field: "local.idle_grace", Reason: "must not be negative"}
	case c.IdleGrace > domain.MaxPeriod:
		return &domain.ConfigError{Field: "local.idle_grace", Reason: fmt.Sprintf("must be at most %s", domain.MaxPeriod)}
	}
	return nil
}

// withDefaults returns c with every zero value replaced by its default.
func (c Config) withDefaults() Config {
	if c.MaxCost == 0 {
		c.MaxCost = DefaultMaxCost
	}
	if c.NumCounters == 0 {
		c.NumCounters = max(c.MaxCost/countersPerCostByte, minCounters)
	}
	if c.MaxPendingCost == 0 {
		c.MaxPendingCost = max(c.MaxCost/pendingShare, minPendingCost)
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.IdleGrace == 0 {
		c.IdleGrace = DefaultIdleGrace
	}
	return c
}

// Option changes an optional behaviour of a Store.
type Option func(*options)

type options struct {
	cacheMetrics bool
}

// WithCacheMetrics turns on ristretto's own metrics (hits, misses, dropped
// and rejected Sets…), read with Store.CacheMetrics. They cost a few atomic
// additions per call, so they are off by default.
func WithCacheMetrics() Option {
	return func(o *options) { o.cacheMetrics = true }
}

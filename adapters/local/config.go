package local

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Defaults used for the zero values of Config, and the smallest bound.
const (
	// DefaultMaxMemory is the default bound of the store's footprint:
	// 64 MiB.
	DefaultMaxMemory = 64 << 20
	// MinMaxMemory is the smallest MaxMemory New accepts: 2 MiB. Below it,
	// ristretto's fixed structures (its 32768-slot write buffer alone takes
	// 256 KiB) would leave little room for keys.
	MinMaxMemory = 2 << 20
	// DefaultSweepInterval is the default logical time between two sweeps
	// of idle keys.
	DefaultSweepInterval = time.Minute
	// DefaultIdleGrace is how long, by default, a key's state is kept after
	// it became trivial at the latest instant the store has seen.
	DefaultIdleGrace = time.Minute
)

// Config configures a Store. The zero value is valid and means the
// documented defaults.
type Config struct {
	// MaxMemory bounds, in bytes, everything the store holds: the keys and
	// their state, the index that finds them, ristretto's cache with its
	// admission sketch and buffers, and the writes on their way to it. The
	// package doc ("Memory") says how each part is counted and what is
	// dropped when the bound is reached. Zero means DefaultMaxMemory; a
	// value below MinMaxMemory is refused.
	MaxMemory int64
	// SweepInterval is how far the instants the store is given must advance
	// between two sweeps of idle keys. Zero means DefaultSweepInterval; if
	// set, it must be at least domain.MinPeriod.
	SweepInterval time.Duration
	// IdleGrace is how long a key's state is kept after it became trivial
	// (back to its full quota) at the latest instant the store has seen. It
	// is also how far a caller's now may lag that latest instant with every
	// answer staying exact: a clock that goes backwards by less than
	// IdleGrace never finds a live key forgotten, and a sliding log keeps
	// its units for callers lagging the key's latest instant by less than
	// min(IdleGrace, the window's period) (rule S5 of docs/adr/009). Zero
	// means DefaultIdleGrace.
	IdleGrace time.Duration

	// cacheCost, when set, fixes ristretto's share of MaxMemory instead of
	// deriving it; the rest holds the keys ristretto refuses. The package's
	// tests use it to run with a cache that holds nothing, or a handful of
	// keys, so that every path outside ristretto is exercised.
	cacheCost int64
}

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	switch {
	case c.MaxMemory < 0:
		return &domain.ConfigError{Field: "local.max_memory", Reason: "must not be negative"}
	case c.MaxMemory > 0 && c.MaxMemory < MinMaxMemory:
		return &domain.ConfigError{Field: "local.max_memory", Reason: fmt.Sprintf("must be at least %d bytes (2 MiB)", MinMaxMemory)}
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
	if c.MaxMemory == 0 {
		c.MaxMemory = DefaultMaxMemory
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
// additions per cache call and up to 9 MiB of MaxMemory (ristretto keeps
// the admission time of up to 100,000 keys), so they are off by default.
func WithCacheMetrics() Option {
	return func(o *options) { o.cacheMetrics = true }
}

package domain

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Algorithm is how a window counts.
type Algorithm uint8

const (
	// SlidingLog is exact: it keeps one timestamp per admitted unit of cost
	// and admits a request when the units inside (now-Period, now] plus the
	// cost stay within Limit. Memory per key grows with Limit. It is the
	// semantics of ADR-002 (a Redis ZSET of timestamps) and the zero value.
	SlidingLog Algorithm = iota
	// GCRA is the generic cell rate algorithm: one theoretical arrival time
	// per key (O(1) memory), a burst of up to Limit at once, then one unit
	// every Period/Limit.
	GCRA
	// Concurrency bounds the requests in flight rather than their rate:
	// at most Limit units of cost held at once per key. A unit is taken
	// by a reservation (ports.Reserver.Reserve) and comes back when the
	// reservation is settled, or when its lease expires because its
	// holder died. Period is the window's lease TTL: how long a slot
	// outlives a holder that neither renews nor settles it
	// (docs/adr/012). Evaluate refuses a concurrency window: only a
	// reservation can hold it.
	Concurrency
)

// String returns "sliding_log" or "gcra".
func (a Algorithm) String() string {
	switch a {
	case SlidingLog:
		return "sliding_log"
	case GCRA:
		return "gcra"
	case Concurrency:
		return "concurrency"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm reads "sliding_log" (or ""), "gcra" and "concurrency".
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "", "sliding_log":
		return SlidingLog, nil
	case "gcra":
		return GCRA, nil
	case "concurrency":
		return Concurrency, nil
	}
	return 0, &UnknownNameError{Kind: "algorithm", Name: s, Valid: "sliding_log, gcra or concurrency"}
}

// Bounds of a window. Time is counted in whole microseconds everywhere in
// sluice (stores included), so that a Lua number holds any instant exactly.
const (
	MinPeriod = time.Millisecond
	MaxPeriod = 366 * 24 * time.Hour
	MaxLimit  = 1 << 30
	// MaxSlidingLogLimit caps a SlidingLog window: the log keeps one record
	// per admitted unit (one ZSET member on Redis, about 32 to 118 bytes),
	// so a larger limit belongs to GCRA, whose memory does not grow with it.
	MaxSlidingLogLimit = 100_000
	// MaxConcurrencyLimit caps a Concurrency window: the store keeps one
	// record per slot held (docs/adr/012).
	MaxConcurrencyLimit = 100_000
	// MaxLeaseTTL bounds a lease's TTL, hence a Concurrency window's
	// Period: a holder of a longer request renews its lease.
	MaxLeaseTTL = 24 * time.Hour
)

// Well-known window names. Any other non-empty name is allowed.
const (
	WindowBurst     = "burst"
	WindowSustained = "sustained"
)

// Window is one rate: at most Limit units of cost per Period, counted with
// Algorithm.
type Window struct {
	// Name identifies the window in keys, headers and metrics: "burst",
	// "sustained", or a user-defined name.
	Name      string
	Limit     int64
	Period    time.Duration
	Algorithm Algorithm
}

// Validate reports a *LimitError (Index -1) for a window no store can honour.
func (w Window) Validate() error {
	return w.validate(-1)
}

func (w Window) validate(i int) error {
	switch {
	case w.Limit < 1:
		return &LimitError{Index: i, Field: "limit", Reason: "must be at least 1"}
	case w.Limit > MaxLimit:
		return &LimitError{Index: i, Field: "limit", Reason: fmt.Sprintf("must be at most %d", MaxLimit)}
	case w.Algorithm == SlidingLog && w.Limit > MaxSlidingLogLimit:
		return &LimitError{Index: i, Field: "limit", Reason: fmt.Sprintf("must be at most %d for a sliding log (use gcra for larger limits)", MaxSlidingLogLimit)}
	case w.Algorithm == Concurrency && w.Limit > MaxConcurrencyLimit:
		return &LimitError{Index: i, Field: "limit", Reason: fmt.Sprintf("must be at most %d for a concurrency window", MaxConcurrencyLimit)}
	case w.Algorithm == Concurrency && w.Period > MaxLeaseTTL:
		return &LimitError{Index: i, Field: "period", Reason: fmt.Sprintf("must be at most %s for a concurrency window (its lease TTL)", MaxLeaseTTL)}
	case w.Period < MinPeriod:
		return &LimitError{Index: i, Field: "period", Reason: fmt.Sprintf("must be at least %s", MinPeriod)}
	case w.Period > MaxPeriod:
		return &LimitError{Index: i, Field: "period", Reason: fmt.Sprintf("must be at most %s", MaxPeriod)}
	case w.Period%time.Microsecond != 0:
		return &LimitError{Index: i, Field: "period", Reason: "must be a whole number of microseconds"}
	case w.Algorithm != SlidingLog && w.Algorithm != GCRA && w.Algorithm != Concurrency:
		return &LimitError{Index: i, Field: "algorithm", Reason: "unknown algorithm"}
	}
	return nil
}

// PeriodMicros is the period in microseconds.
func (w Window) PeriodMicros() int64 { return int64(w.Period / time.Microsecond) }

// EmissionMicros is the GCRA emission interval: Period/Limit truncated to
// the microsecond, at least 1. Truncation keeps the arithmetic exact and
// identical in every store (Go integers, Lua doubles); it lets the sustained
// rate exceed Limit/Period by less than one microsecond per unit. A window
// with more units than microseconds in its period is clamped to one unit
// per microsecond: its burst is still Limit, its sustained rate lower than
// asked.
func (w Window) EmissionMicros() int64 {
	if e := quo(w.PeriodMicros(), w.Limit); e >= 1 {
		return e
	}
	return 1
}

// emissionIs returns EmissionMicros when c, a key's stored emission
// interval, is it, which a key written under the same window proves in
// one multiplication, without EmissionMicros' division; otherwise it
// divides.
func (w Window) emissionIs(c int64) int64 {
	p, l := w.PeriodMicros(), w.Limit
	if c >= 1 && l >= 1 && p >= 0 {
		hi, lo := bits.Mul64(uint64(c), uint64(l))
		switch {
		case hi == 0 && lo <= uint64(p) && uint64(p)-lo < uint64(l):
			return c // c·l ≤ p < (c+1)·l: c = ⌊p/l⌋
		case c == 1 && p < l:
			return 1 // ⌊p/l⌋ = 0, clamped to 1
		}
	}
	return w.EmissionMicros()
}

// quo is a / b as Go computes it, dividing in 32 bits when both fit: a
// decision divides a few times per GCRA key, a 64-bit division costs
// several times a 32-bit one on common CPUs, and the operands of a window
// under 71 minutes fit.
func quo(a, b int64) int64 {
	if uint64(a)|uint64(b) <= math.MaxUint32 {
		return int64(uint32(a) / uint32(b))
	}
	return a / b
}

// Micros converts a count of microseconds to a duration.
func Micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

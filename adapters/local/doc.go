// Package local is the in-process sluice store: a ports.Store that keeps its
// counting state in memory, bounded by github.com/dgraph-io/ristretto/v2.
//
// It serves the degraded "local" action of a route family (ADR-002's
// LocalDualLimiter), single-instance deployments and tests. Its semantics are
// those of every sluice store: both algorithms of domain (SlidingLog and
// GCRA), time in whole microseconds taken from the now each call is given (the
// store never reads the wall clock for a decision), and all-or-nothing
// evaluation across up to domain.MaxLimits keys.
//
// # How state is kept
//
// The counting state of one key lives in one entry: a mutex and the key's
// domain.LogState or domain.GCRAState. A decision mutates the entry in place,
// under its mutex, so the value ristretto holds (a pointer to the entry) never
// changes while the key is in use. Two indexes point at entries:
//
//   - the ristretto cache, the fast path: a decision on a key it holds is a
//     Get, a lock, the check and the commit, with no Set and no allocation;
//   - the directory, a sharded map owned by the store that holds every entry
//     with state, whether or not ristretto holds it too. A new entry is
//     created only under the directory's shard lock, after the directory said
//     the key had none, so a key never has two entries at once.
//
// An entry leaves the directory only under its shard lock and its own lock,
// and is marked dead as it leaves; a decision that finds a dead entry in the
// cache looks the key up again in the directory. Every unit of cost is
// therefore counted on the one live entry of its key.
//
// Ristretto may drop a Set (its buffer is full), apply it later (Sets are
// asynchronous, so a Get right after a Set can miss), refuse it (TinyLFU
// admission) or evict an entry to respect its cost bound. None of these loses
// or forks a live key's state: the entry stays in the directory, counted as
// pending (held outside ristretto), and is offered to ristretto again later
// with a growing back-off. While an entry is pending, decisions on its key
// take the slower directory path (a shard lock and a map lookup) and stay
// exact.
//
// # Guarantees
//
//   - A key never has two live states, whatever ristretto does with its Sets
//     and whatever the goroutines do: decisions on one key are serialised on
//     its entry, and a decision across several keys locks every entry (in key
//     order, so that two decisions cannot deadlock) before it checks any of
//     them, so it is atomic and all-or-nothing.
//   - An idle key is forgotten, which changes no answer. A key is idle once
//     its state has been trivial (back to its full quota: domain's Idle) for
//     Config.IdleGrace at the latest instant the store has seen (recorded
//     with up to a millisecond of lag, in the safe direction). A caller whose
//     now lags that latest instant by less than IdleGrace therefore never
//     finds a live key forgotten, so a clock that goes backwards by less
//     than IdleGrace never admits more than a window's limit. Beyond it, or
//     after a call with an instant far in the future, keys may be forgotten
//     early: the store needs instants from roughly one clock.
//   - State of a live key is lost in one case only: memory pressure. When
//     ristretto evicts or refuses a live entry and the pending bytes of its
//     directory shard exceed their share of Config.MaxPendingCost, the entry
//     that became pending first is forgotten. Its key then starts again from
//     a full quota: it can admit up to one more window's limit. Store.Stats
//     counts such losses in Dropped.
//   - A key used with an algorithm other than the one its state was counted
//     with is re-initialised to the new algorithm's full quota at its next
//     consumption (Peek answers as if it had been). A change of limit or
//     period with the same algorithm keeps the state; a sliding-log key is
//     judged idle with the period it was last consumed under.
//   - A clock that goes backwards never admits more than a window's limit
//     (domain's algorithms see to it).
//
// # Memory
//
// Memory is bounded by Config.MaxCost (the entries ristretto holds, each
// costed at an estimate of its bytes: the entry, its key, its index slots in
// the directory and in ristretto, and 24 to 48 bytes per entry a sliding log
// may hold, at most one per commit and one per unit; a growing log reports
// its new cost to ristretto whenever it doubles) plus
// Config.MaxPendingCost (entries held outside ristretto) plus ristretto's
// fixed overhead (about 2 bytes per counter of Config.NumCounters) plus the
// entries whose Set waits in ristretto's 32768-slot buffer (transient: about
// 10 MiB at most, right after a flood of new keys). The estimate is
// conservative: an entry with a short key really takes about 350 bytes and
// is costed about 540. Entries are forgotten when idle; ristretto's own TTL
// is not used, because it runs on the wall clock while the store counts on
// the instants it is given, and an expiry on the wall clock could drop a key
// that is live on the store's clock.
//
// Idle entries are swept by a background goroutine, woken when the instants
// the store sees have advanced by Config.SweepInterval since the last sweep;
// ristretto's evictions and refusals forget idle entries as they happen.
//
// # Errors
//
// After Close every method returns an error wrapping domain.ErrStoreClosed. A
// context that is already done makes a method return an error wrapping
// ctx.Err() before anything is read or written. A request that breaks
// domain.ValidateLimits is refused with a *domain.LimitError; an invalid
// Config with a *domain.ConfigError. A refusal is a result, not an error.
package local

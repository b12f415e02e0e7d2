// Package local is the in-process sluice store: a ports.Store that keeps its
// counting state in memory, within one bound (Config.MaxMemory), with
// github.com/dgraph-io/ristretto/v2 deciding which keys are worth keeping.
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
// domain.KeyState, which holds a sliding log or a GCRA state, whichever
// algorithm last wrote the key, and reads it under either algorithm by the
// state rules every sluice store follows (docs/adr/009). A decision mutates
// the entry in place, under its mutex. Every entry is in the directory, a table sharded 64 ways
// that decisions read without a lock: a decision on a known key is a hash, a
// few atomic loads, the entry's lock, the check and the commit, with no
// allocation and no write to memory shared with other keys (but the latest
// instant seen, at most once a millisecond). A new entry is created only
// under its shard's lock, after the directory said the key had none, so a
// key never has two entries at once. An entry leaves the directory only
// under its shard lock, marked dead under its own lock first (an idle entry
// only if it is still idle then); a decision that finds a dead entry looks
// the key up again. Every unit of cost is therefore counted on the one live
// entry of its key.
//
// Ristretto holds most entries too, and its policy decides which stay: it
// admits a new key only if its TinyLFU frequency sketch rates it above the
// keys it would evict (so a flood of keys used once does not push out the
// keys in use), and evicts the least used when it needs room. The store
// reports to the sketch the first four accesses of a key, then one in
// thirty-two (enough for the relative frequencies the policy compares, at
// a fraction of a cache lookup per decision).
//
// Ristretto applies Sets later (they wait in its buffer), may refuse them
// or evict an entry. None of these loses or forks a live key's state: an
// entry ristretto does not hold stays in the directory, pending, and is
// offered again at a later access with a growing back-off; decisions on it
// take its shard's lock (the slow path) and stay exact. A new key the
// bound on writes in flight keeps from ristretto waits in a hand-off queue
// and is offered as soon as ristretto takes a write, not only when it is
// used again.
//
// # Guarantees
//
//   - A key never has two live states, whatever ristretto does with its Sets
//     and whatever the goroutines do: decisions on one key are serialised on
//     its entry, and a decision across several keys locks every entry (in
//     creation order, so that two decisions cannot deadlock) before it
//     checks any of them, so it is atomic and all-or-nothing.
//   - Sliding-log windows of one request that name one key share its log
//     (docs/adr/015): the decision finds, locks and writes the key once,
//     records an admitted request's units there once, and each window
//     counts them in its own period (a second cursor of the log keeps a
//     shorter window's count amortised O(1)); the log keeps them for the
//     longest period among its windows, plus min(IdleGrace, that period);
//     a reservation on it is refunded or charged once. The entry's size
//     estimate follows the log's backing array, whatever window wrote it.
//   - An idle key is forgotten, which changes no answer. A key is idle once
//     its state has been trivial (back to its full quota: domain's Idle) for
//     Config.IdleGrace at the latest instant the store has seen (recorded
//     with up to a millisecond of lag, in the safe direction). A caller whose
//     now lags that latest instant by less than IdleGrace therefore never
//     finds a live key forgotten, so a clock that goes backwards by less
//     than IdleGrace never admits more than a window's limit. Beyond it, or
//     after a call with an instant far in the future, keys may be forgotten
//     early: the store needs instants from roughly one clock.
//   - State of a live key is lost in one case only: when the bound is
//     reached (see Memory). While Stats().Dropped is zero, every answer the
//     store gave was exact.
//   - A key keeps its consumed units through any change of its window's
//     limit, period or algorithm (rules S1–S4 and S6 of docs/adr/009): a
//     GCRA state carries its emission interval and its outstanding units
//     are converted, a sliding log read by GCRA counts as TAT = now +
//     units·T, a GCRA state read by a sliding log as its outstanding units
//     stamped at now. An admitted request rewrites the key in its window's
//     algorithm; Peek reads exactly as Evaluate and writes nothing. A fresh
//     GCRA key has its full quota at any instant, before 1970 too.
//   - A sliding log forgets a unit only once it is older than the key's
//     latest instant minus its longest period and min(IdleGrace, that
//     period) (rule S5): a caller whose now lags by less than that still
//     counts every unit of its window, so instants slightly out of order
//     (goroutines that read the clock, then call) never admit more than
//     the limit. A key used under two periods keeps what the longest one
//     counts, and is judged idle by it.
//   - A clock that goes backwards never admits more than a window's limit
//     over the units the store still holds.
//   - EvaluateRepeated (ports.Repeater) decides n identical requests at one
//     instant as n sequential Evaluate calls would, in one lock of the
//     request's entries and O(keys) work: how many fit is worked out per
//     window (domain.KeyState.Fit).
//   - Reserve, Settle and Renew (ports.Reserver, docs/adr/012) lock a
//     request's entries as a decision does. The slots a lease holds on a
//     concurrency key live in that key's entry, the lease's record (its
//     expiry, and whether it was settled) in the entry of the request's
//     first key; a key holding a slot or record of a lease still running
//     is never idle. A lease expires on the store's clock, the instants
//     it is given: its slots stop counting at its expiry, its rate units
//     stay counted at the cost reserved. Peek counts the held slots of a
//     concurrency window; Evaluate refuses one.
//
// # Memory
//
// Config.MaxMemory (default 64 MiB) bounds everything the store holds. Each
// part is counted at an upper estimate of its heap bytes (allocations
// rounded up to Go's size classes, maps at the headroom they keep after
// growing); the package's tests check the sum against the live heap of a
// store flooded with a million keys of up to 512 bytes. The bound is shared
// out as follows:
//
//   - fixed structures: ristretto's frequency sketch and its doorkeeper
//     (4 bytes per counter, one counter per 128 bytes of MaxMemory: at most
//     1/32 of it), its 32768-slot write buffer, its map shards and Get
//     buffers, and the directory's shards; with WithCacheMetrics, 9 MiB
//     more for ristretto's metrics;
//   - ristretto's index: its item and cost maps take up to 224 bytes per key
//     once keys churn through them (measured at 215), and never shrink, so
//     that much is reserved for the most keys it has ever held at once;
//   - the keys ristretto holds, each costed at its size: the entry, its key,
//     its directory slot and its sliding log's array (counted at twice the
//     array's capacity, and counted again as it doubles). A key of 86 bytes
//     costs 384 bytes with GCRA (448 with a short sliding log), 608 with
//     its share of ristretto's index; a key of 500 bytes 800 and 1024;
//   - the keys held outside ristretto's cache, an eighth of what the first
//     two leave: new keys whose Set waits in ristretto's buffer (with
//     ristretto's Item; at most half of this share, so that ristretto's
//     buffer never fills and never drops a write), keys it refused or
//     evicted while still live, and keys whose log grew (they leave the
//     cache, to be admitted again at their new size, and count only their
//     growth until ristretto lets go of their old size), and the array of
//     the list that orders them for the bound (8 bytes a slot, at most
//     four slots a key; its first 64 slots are in the fixed share). While
//     ristretto's own share has room left, the keys held outside it may
//     use that room too (every byte is counted once, on one side): a burst
//     of new keys that outruns ristretto's goroutine waits instead of
//     being forgotten;
//   - in the entry of a key that reservations touched, 112 bytes per slot
//     or lease record (counted at twice their number as they grow, like a
//     sliding log), forgotten once ended for IdleGrace.
//
// When the bound is reached, ristretto evicts, or refuses new keys, to keep
// its share; nothing is lost yet, as the keys it gives up are held outside.
// When those exceed their share, the store forgets first the keys used
// only once, least recently used first (during a flood of new keys, the
// flood's own oldest keys), and the keys used more than once only when no
// key used once is left, least recently used first too. So a key in use
// keeps its state under a flood of keys used once, even while ristretto,
// whose sketch hears only a sample of the accesses, refuses or evicts it,
// and however many new keys come between two of its uses. The order is
// exact: a key ristretto gives up goes back in the line by the instant it
// was last used, behind every key used since, and a key used again moves
// to the back. Nor does a key used once get ahead of a key in use by
// being on its way to ristretto, where the store cannot forget it: it
// goes (its Set) only while the bytes held outside ristretto that the
// store cannot forget at once (the writes on their way to ristretto, the
// growth of keys whose Del waits), its own and those of the keys used
// more than once held outside fit their share, and waits in the line
// otherwise; and when the keys used more than once are all that is left
// to forget and the writes on their way to ristretto are all of the
// excess, the store lets ristretto take them (each is admitted, ristretto
// evicting what its policy rates lowest, or refused back to the front of
// the line) before it forgets a key in use. (The price is a newcomer's:
// while keys used more than once fill the share, a new key ristretto
// refuses goes first, until its uses, which ristretto's sketch counts
// across its forgotten states, earn its admission.) A forgotten key that was idle loses nothing
// (Stats().Expired counts it). A forgotten key that was live loses
// its state (Stats().Dropped counts it): its next request starts from a
// full quota, so within the window in progress it can admit up to one more
// window's limit than it should. Nothing else is dropped: a new key is
// always accepted and counted, and a decision never fails for lack of
// memory. Stats().Bytes is the store's running estimate; it passes
// MaxMemory only by the keys of the decisions under way (which are never
// forgotten under them), while ristretto's callbacks run, and by the
// writes on their way to ristretto (at most half the share of the keys
// held outside it) while it takes them in place of keys in use.
//
// Entries are forgotten when idle; ristretto's own TTL is not used, because
// it runs on the wall clock while the store counts on the instants it is
// given, and an expiry on the wall clock could drop a key that is live on
// the store's clock. Idle entries are swept by a background goroutine, woken
// when the instants the store sees have advanced by Config.SweepInterval
// since the last sweep; ristretto's evictions and refusals forget idle
// entries as they happen. docs/runbook.md covers the memory of every store.
//
// # Closing
//
// Decisions take no store-wide lock. Every call they make to ristretto
// happens under a shard lock or a live entry's lock; Close marks the store
// closed, then takes every shard lock and every entry lock in turn, marking
// them closed, before it closes ristretto. A call under way when Close began
// has then finished, and a later one sees the mark.
//
// # Errors
//
// After Close every method returns an error wrapping domain.ErrStoreClosed. A
// context that is already done makes a method return an error wrapping
// ctx.Err() before anything is read or written. A request that breaks
// domain.ValidateLimits (domain.ValidateHeld for Peek and Reserve; a
// lease, ttl or actual cost out of bounds) is refused with a
// *domain.LimitError; an invalid
// Config with a *domain.ConfigError. A refusal is a result, not an error.
package local

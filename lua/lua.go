// Package lua holds sluice's Redis scripts, one file per version, embedded
// in the binary.
//
// A released script is immutable: servers cache scripts by SHA1 and a
// fleet mid-deploy runs two versions side by side, so a script's text and
// its argument layout never change. A change is a new file with a new
// constant, and the adapter switches to it. Tests pin each script's SHA1 so
// that an accidental edit fails the build.
//
// The Redis store runs RateLimitV5. RateLimitV1 to RateLimitV4 stay
// embedded, unchanged, for the record and for tests that check how each
// version reads the keys the one before left (and, during a rolling
// upgrade, how the previous one reads what the next writes).
package lua

import _ "embed" // for go:embed

// RateLimitV1 is rate_limit_v1.lua: the all-or-nothing check of up to 16
// keys, each with its own algorithm (sliding log or GCRA), limit, period and
// cost. Its header documents the KEYS/ARGV layout and the reply.
//
//go:embed rate_limit_v1.lua
var RateLimitV1 string

// RateLimitV1SHA1 is the SHA1 of RateLimitV1, as EVALSHA and SCRIPT LOAD
// name it. A test checks it against the embedded text.
const RateLimitV1SHA1 = "d01ddec6d4b15a44c11ddab09282ee17356558b4"

// RateLimitV2 is rate_limit_v2.lua, the script the Redis store ran until v3: the
// same all-or-nothing check as v1, with its arguments packed in one binary
// string, and the sliding logs of small limits stored compactly (7 bytes
// per unit in one string: one MGET reads every key of a call, one SET
// writes each admitted key). It reads every key v1 writes. Its header
// documents the KEYS/ARGV layout, the reply and the encodings; see also
// docs/adr/003-sliding-log-versus-gcra.md.
//
//go:embed rate_limit_v2.lua
var RateLimitV2 string

// RateLimitV2SHA1 is the SHA1 of RateLimitV2. A test checks it against the
// embedded text.
const RateLimitV2SHA1 = "982be2a579b642d3de2febeea7008ebca8d1458e"

// RateLimitV3 is rate_limit_v3.lua, the script the Redis store ran until v4: the
// all-or-nothing check of v2 for n identical requests at one instant (the
// store's ports.Repeater), with a GCRA value that carries the emission
// interval it was written with, the conversions of a change of limit,
// period or algorithm, a grace for instants out of order, and every value
// it reads validated before it writes (a foreign value is the error reply
// "SLUICEVALUE <i> <reason>"). It reads every key v1 and v2 write. Its
// header documents the KEYS/ARGV layout, the reply and the encodings; see
// docs/adr/009-stored-state-and-script-v3.md.
//
//go:embed rate_limit_v3.lua
var RateLimitV3 string

// RateLimitV3SHA1 is the SHA1 of RateLimitV3. A test checks it against the
// embedded text.
const RateLimitV3SHA1 = "eccea6748f15b3bd9b0f6f7438e56509df801fc0"

// RateLimitV4 is rate_limit_v4.lua, the script the Redis store ran until v5: v3's
// check, unchanged for Evaluate and Peek (it reads and writes every rate
// key as v3 does, so the two run side by side during a rolling upgrade),
// and reservations: Reserve (the check, concurrency slots under a lease,
// the lease record), Settle (refund or charge, the slots given back,
// idempotent through the record) and Renew. Its header documents the
// KEYS/ARGV layout, the replies and the encodings; see
// docs/adr/014-redis-script-v4.md.
//
//go:embed rate_limit_v4.lua
var RateLimitV4 string

// RateLimitV4SHA1 is the SHA1 of RateLimitV4. A test checks it against the
// embedded text.
const RateLimitV4SHA1 = "c1d1ffe1bd836102585e273d838b04dccecb0856"

// RateLimitV5 is rate_limit_v5.lua, the script the Redis store runs: v4's
// ops (Evaluate, Peek, Reserve, Settle, Renew) with each distinct key sent
// once and each limit naming its key by index, so that several
// sliding-log windows of one request count in one shared log, read once
// and written once (docs/adr/015-one-log-per-principal.md). A key named by
// one limit is read and written exactly as v4 does, so v4 and v5 run side
// by side during a rolling upgrade. Its header documents the KEYS/ARGV
// layout, the replies and the encodings; see
// docs/adr/016-redis-script-v5.md.
//
//go:embed rate_limit_v5.lua
var RateLimitV5 string

// RateLimitV5SHA1 is the SHA1 of RateLimitV5. A test checks it against the
// embedded text.
const RateLimitV5SHA1 = "25e6592db7bec06306a0c58bdf130e5cd4e7b678"

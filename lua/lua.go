// Package lua holds sluice's Redis scripts, one file per version, embedded
// in the binary.
//
// A released script is immutable: servers cache scripts by SHA1 and a
// fleet mid-deploy runs two versions side by side, so a script's text and
// its argument layout never change. A change is a new file with a new
// constant, and the adapter switches to it. Tests pin each script's SHA1 so
// that an accidental edit fails the build.
//
// The Redis store runs RateLimitV2. RateLimitV1 stays embedded, unchanged,
// for the record and for tests that check how v2 reads the keys v1 left.
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

// RateLimitV2 is rate_limit_v2.lua, the script the Redis store runs: the
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

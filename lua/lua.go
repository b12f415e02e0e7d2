// Package lua holds sluice's Redis script, embedded in the binary.
//
// A released script is immutable: servers cache scripts by SHA1 and a
// fleet mid-deploy runs two versions side by side, so a script's text and
// its argument layout never change once released. A test pins the SHA1
// so that an accidental edit fails the build.
package lua

import _ "embed" // for go:embed

// RateLimitV5 is rate_limit_v5.lua, the script the Redis store runs:
// Evaluate, Peek and the repeated form, Reserve, Settle and Renew, with
// each distinct key sent once and each limit naming its key by index, so
// that several sliding-log windows of one request count in one shared
// log, read once and written once
// (docs/adr/015-one-log-per-principal.md). Its header documents the
// KEYS/ARGV layout, the replies and the encodings; see
// docs/adr/016-redis-script-v5.md.
//
//go:embed rate_limit_v5.lua
var RateLimitV5 string

// RateLimitV5SHA1 is the SHA1 of RateLimitV5, as EVALSHA and SCRIPT LOAD
// name it. A test checks it against the embedded text.
const RateLimitV5SHA1 = "8280469fd663fc0f42e01b6649634f80fcd3b094"

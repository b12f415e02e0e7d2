// Package lua holds sluice's Redis script, embedded: one script for every
// op of the Redis store (docs/adr/017-the-redis-script.md), and the batch
// script that calls it once per request (docs/adr/018-batches.md).
//
// How it changes after a release (docs/adr/017, "After the first
// release"):
//
//  1. A released script is immutable. Servers cache scripts by SHA1 and a
//     fleet mid-deploy runs two releases side by side, so a script's
//     text, argument layout and encodings never change once released. A
//     test pins its SHA1, so that any edit, even to a comment, fails.
//  2. A change is a new file (rate_limit_v6.lua) with a new constant, and
//     the store switches to it in the same release.
//  3. The new script reads every key its predecessor writes, and writes
//     nothing its predecessor cannot read while both may run: during a
//     rolling deploy they decide on the same keys.
//  4. It comes with an upgrade test: the predecessor, kept embedded until
//     no supported release runs it, and the new script taking turns on
//     the same keys against the Go reference, every answer equal.
package lua

import _ "embed" // for go:embed

// RateLimitV5 is rate_limit_v5.lua, the script the Redis store runs (the
// first release's; its number continues the unreleased history):
// Evaluate, Peek and the repeated form, Reserve, Settle and Renew, with
// each distinct key sent once and each limit naming its key by index, so
// that several sliding-log windows of one request count in one shared
// log, read once and written once. Its header documents the KEYS/ARGV
// layout, the replies and the encodings; the rules and how a script
// changes after a release are docs/adr/017-the-redis-script.md.
//
//go:embed rate_limit_v5.lua
var RateLimitV5 string

// RateLimitV5SHA1 is the SHA1 of RateLimitV5, as EVALSHA and SCRIPT LOAD
// name it. A test checks it against the embedded text.
const RateLimitV5SHA1 = "354bc455d1541cd84ad87554eec3f9f29ee31077"

//go:embed batch_v5.lua
var batchTail string

// BatchV5 is RateLimitV5 as a function, called by batch_v5.lua once per
// request of a batch, in order, each decided as its own call would be:
// every rule stays written once (docs/adr/018-batches.md).
var BatchV5 = "local function decide(KEYS, ARGV)\n" + RateLimitV5 + "\nend\n" + batchTail

// BatchV5SHA1 is the SHA1 of BatchV5. A test checks it against the text.
const BatchV5SHA1 = "c1904b0a5177156c57e3d898ecf0b76ae7f7e344"

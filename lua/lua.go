// Package lua holds sluice's Redis scripts, one file per version, embedded
// in the binary.
//
// A released script is immutable: servers cache scripts by SHA1 and a
// fleet mid-deploy runs two versions side by side, so a script's text and
// its argument layout never change. A change is a new file
// (rate_limit_v2.lua) with a new constant, and the adapter switches to it.
// Tests pin each script's SHA1 so that an accidental edit fails the build.
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

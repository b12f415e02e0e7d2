package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// pinnedRateLimitV1 is the SHA1 of the released rate_limit_v1.lua. It is
// written here literally: if this test fails, the script was edited, and a
// released script must not be. Restore it and add rate_limit_v2.lua.
const pinnedRateLimitV1 = "d01ddec6d4b15a44c11ddab09282ee17356558b4"

func TestRateLimitV1IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV1))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV1 {
		t.Fatalf("rate_limit_v1.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in rate_limit_v2.lua", got, pinnedRateLimitV1)
	}
	if RateLimitV1SHA1 != pinnedRateLimitV1 {
		t.Fatalf("RateLimitV1SHA1 = %s, pinned %s", RateLimitV1SHA1, pinnedRateLimitV1)
	}
}

// pinnedRateLimitV2 is the SHA1 of the released rate_limit_v2.lua.
const pinnedRateLimitV2 = "982be2a579b642d3de2febeea7008ebca8d1458e"

func TestRateLimitV2IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV2))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV2 {
		t.Fatalf("rate_limit_v2.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in rate_limit_v3.lua", got, pinnedRateLimitV2)
	}
	if RateLimitV2SHA1 != pinnedRateLimitV2 {
		t.Fatalf("RateLimitV2SHA1 = %s, pinned %s", RateLimitV2SHA1, pinnedRateLimitV2)
	}
}

// pinnedRateLimitV3 is the SHA1 of the released rate_limit_v3.lua.
const pinnedRateLimitV3 = "eccea6748f15b3bd9b0f6f7438e56509df801fc0"

func TestRateLimitV3IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV3))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV3 {
		t.Fatalf("rate_limit_v3.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in rate_limit_v4.lua", got, pinnedRateLimitV3)
	}
	if RateLimitV3SHA1 != pinnedRateLimitV3 {
		t.Fatalf("RateLimitV3SHA1 = %s, pinned %s", RateLimitV3SHA1, pinnedRateLimitV3)
	}
}

// pinnedRateLimitV4 is the SHA1 of the released rate_limit_v4.lua.
const pinnedRateLimitV4 = "c1d1ffe1bd836102585e273d838b04dccecb0856"

func TestRateLimitV4IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV4))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV4 {
		t.Fatalf("rate_limit_v4.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in rate_limit_v5.lua", got, pinnedRateLimitV4)
	}
	if RateLimitV4SHA1 != pinnedRateLimitV4 {
		t.Fatalf("RateLimitV4SHA1 = %s, pinned %s", RateLimitV4SHA1, pinnedRateLimitV4)
	}
}

// pinnedRateLimitV5 is the SHA1 of the released rate_limit_v5.lua.
const pinnedRateLimitV5 = "25e6592db7bec06306a0c58bdf130e5cd4e7b678"

func TestRateLimitV5IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV5))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV5 {
		t.Fatalf("rate_limit_v5.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in rate_limit_v6.lua", got, pinnedRateLimitV5)
	}
	if RateLimitV5SHA1 != pinnedRateLimitV5 {
		t.Fatalf("RateLimitV5SHA1 = %s, pinned %s", RateLimitV5SHA1, pinnedRateLimitV5)
	}
}

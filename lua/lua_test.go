package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// pinnedRateLimitV5 is the SHA1 of rate_limit_v5.lua. It is written here
// literally: if this test fails, the script was edited, and a released
// script must not be.
const pinnedRateLimitV5 = "c65d5c1384e48272e16d43d210da2867d072f92e"

func TestRateLimitV5IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV5))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV5 {
		t.Fatalf("rate_limit_v5.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in a new file", got, pinnedRateLimitV5)
	}
	if RateLimitV5SHA1 != pinnedRateLimitV5 {
		t.Fatalf("RateLimitV5SHA1 = %s, pinned %s", RateLimitV5SHA1, pinnedRateLimitV5)
	}
}

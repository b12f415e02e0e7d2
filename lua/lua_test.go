package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// pinnedRateLimitV5 is the SHA1 of rate_limit_v5.lua. It is written here
// literally: if this test fails, the script was edited, and a released
// script must not be.
const pinnedRateLimitV5 = "9ea59cb9224697a9abc5971be7a89632d4353984"

func TestRateLimitV5IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(RateLimitV5))
	if got := hex.EncodeToString(sum[:]); got != pinnedRateLimitV5 {
		t.Fatalf("rate_limit_v5.lua has SHA1 %s, pinned %s: released scripts are immutable; put changes in a new file", got, pinnedRateLimitV5)
	}
	if RateLimitV5SHA1 != pinnedRateLimitV5 {
		t.Fatalf("RateLimitV5SHA1 = %s, pinned %s", RateLimitV5SHA1, pinnedRateLimitV5)
	}
}

// pinnedBatchV5 is the SHA1 of BatchV5: rate_limit_v5.lua inside a
// function, then batch_v5.lua. Released, both are immutable.
const pinnedBatchV5 = "2f409195644902996c8a14ad92ad4792d4dbfcfc"

func TestBatchV5IsImmutable(t *testing.T) {
	sum := sha1.Sum([]byte(BatchV5))
	if got := hex.EncodeToString(sum[:]); got != pinnedBatchV5 {
		t.Fatalf("BatchV5 has SHA1 %s, pinned %s: released scripts are immutable; put changes in a new file", got, pinnedBatchV5)
	}
	if BatchV5SHA1 != pinnedBatchV5 {
		t.Fatalf("BatchV5SHA1 = %s, pinned %s", BatchV5SHA1, pinnedBatchV5)
	}
}

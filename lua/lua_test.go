package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// The scripts' SHA1s, written here literally: if this test fails, a
// script was edited, and a released script must not be.
const (
	pinnedRateLimitV5 = "9ea59cb9224697a9abc5971be7a89632d4353984"
	pinnedBatchV5     = "993a4dea1250482a8bead0f9f5243e5c54d3df8e"
)

func TestScriptsAreImmutable(t *testing.T) {
	for _, s := range []struct{ name, text, sha, pinned string }{
		{"rate_limit_v5.lua", RateLimitV5, RateLimitV5SHA1, pinnedRateLimitV5},
		{"BatchV5", BatchV5, BatchV5SHA1, pinnedBatchV5},
	} {
		sum := sha1.Sum([]byte(s.text))
		if got := hex.EncodeToString(sum[:]); got != s.pinned || s.sha != s.pinned {
			t.Errorf("%s has SHA1 %s, its constant %s, pinned %s: released scripts are immutable; put changes in a new file", s.name, got, s.sha, s.pinned)
		}
	}
}

package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// The scripts' SHA1s, written here literally: if this test fails, a
// script was edited, and a released script must not be.
const (
	pinnedRateLimitV5 = "354bc455d1541cd84ad87554eec3f9f29ee31077"
	pinnedBatchV5     = "c1904b0a5177156c57e3d898ecf0b76ae7f7e344"
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

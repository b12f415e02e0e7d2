package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemoRuns runs the whole demo on the local store and checks the story
// it tells: bursts throttled, the outage handled per family, recovery.
func TestDemoRuns(t *testing.T) {
	t.Setenv("RATE_LIMIT_HMAC_SECRET", strings.Repeat("ab", 32))
	var out strings.Builder
	require.NoError(t, run(&out, ""))
	s := out.String()
	for _, want := range []string{
		"THROTTLED", "REJECTED_INVALID_CONTEXT", "route_invalid", "BYPASS_DEGRADED", "DENIED_DEGRADED",
		"local_limit", "RECOVERING", "HEALTHY→DEGRADED, DEGRADED→RECOVERING, RECOVERING→HEALTHY",
		"AllowDual(globex, 3, carol, 2) = allowed false",
	} {
		assert.Contains(t, s, want)
	}
	assert.NotContains(t, s, "alice@example.org", "no raw identifier in the demo's decisions")
}

func TestDemoNeedsSecret(t *testing.T) {
	t.Setenv("RATE_LIMIT_HMAC_SECRET", "")
	var out strings.Builder
	err := run(&out, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RATE_LIMIT_HMAC_SECRET")
}

package app

import (
	"strings"
	"testing"
)

// TestIsNameMatchesTheRegexps: isName, the decision path's check of route
// keys and window names, accepts exactly what routeKeyRE and windowNameRE
// (the configuration's rules) accept, at the length bounds and for every
// byte value.
func TestIsNameMatchesTheRegexps(t *testing.T) {
	inputs := []string{"", "a", "edge_1-x", "A", "a b", "a\n", "\na", "é", "a.b", "a/b", "a$", "-", "_",
		strings.Repeat("a", 31), strings.Repeat("a", 32), strings.Repeat("a", 33),
		strings.Repeat("z", 63), strings.Repeat("z", 64), strings.Repeat("z", 65)}
	for c := range 256 {
		inputs = append(inputs, string([]byte{byte(c)}), "ab"+string([]byte{byte(c)}))
	}
	for _, s := range inputs {
		if got, want := isName(s, maxRouteKeyLen), routeKeyRE.MatchString(s); got != want {
			t.Errorf("route key %q: isName = %t, routeKeyRE = %t", s, got, want)
		}
		if got, want := isName(s, maxWindowNameLen), windowNameRE.MatchString(s); got != want {
			t.Errorf("window name %q: isName = %t, windowNameRE = %t", s, got, want)
		}
	}
}

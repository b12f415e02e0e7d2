package domain_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/domain"
)

// maxErrorLen bounds the message of an error about a client's input: a
// message that grew with the input would be quoting it.
const maxErrorLen = 160

// FuzzValidateRoute checks the hand-written validator against the
// documented pattern, and that a refusal is the typed, input-free error
// the pipeline maps to one uniform answer. Seeds: testdata/fuzz.
func FuzzValidateRoute(f *testing.F) {
	re := regexp.MustCompile(domain.RoutePattern)
	for _, s := range []string{"/", "/api/v1/x", "/{id}", "/a b", "/api/v1/users/:id", "/pkg.Service/Method",
		"/" + strings.Repeat("a", domain.MaxRouteLen), "/" + strings.Repeat("a", domain.MaxRouteLen+1), "/%zz", "/\x00", "//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, route string) {
		err := domain.ValidateRoute(route)
		if got, want := err == nil, re.MatchString(route); got != want {
			t.Fatalf("ValidateRoute(%q) valid=%v, pattern says %v", route, got, want)
		}
		if err == nil {
			if len(route) < 2 || len(route) > domain.MaxRouteLen+1 || route[0] != '/' {
				t.Fatalf("ValidateRoute(%q) accepted a route of %d bytes", route, len(route))
			}
			return
		}
		checkContextError(t, err, domain.CauseRouteInvalid)
	})
}

// checkContextError asserts that err is the *domain.ContextError of cause,
// carrying the invalid-context code, with a message that does not grow
// with the input.
func checkContextError(t *testing.T, err error, cause domain.Cause) {
	t.Helper()
	var ce *domain.ContextError
	if !errors.As(err, &ce) || ce.Cause != cause {
		t.Fatalf("err = %#v, want a *domain.ContextError of cause %s", err, cause)
	}
	if !errors.Is(err, domain.ErrInvalidContext) || domain.CodeOf(err) != domain.CodeInvalidContext {
		t.Fatalf("err %v does not carry ErrInvalidContext / %s", err, domain.CodeInvalidContext)
	}
	if len(err.Error()) > maxErrorLen {
		t.Fatalf("error message of %d bytes quotes its input: %q", len(err.Error()), err)
	}
}

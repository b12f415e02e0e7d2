package domain_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

func TestValidateRouteMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(domain.RoutePattern)
	routes := []string{
		"/", "/a", "/api/v1/users/{id}", "/api/v1/users/:id", "/pkg.Service/Method",
		"/a b", "api/v1", "", "/é", "/a?b=c", "/a#frag", "/%2F", "/~user/!$&'()*+,;=:@-._",
		"/" + strings.Repeat("a", 255), "/" + strings.Repeat("a", 256), "/\x00", "/a\n",
	}
	for _, r := range routes {
		err := domain.ValidateRoute(r)
		assert.Equal(t, re.MatchString(r), err == nil, "route %q", r)
		if err != nil {
			assert.ErrorIs(t, err, domain.ErrInvalidContext)
			assert.Equal(t, domain.CodeInvalidContext, domain.CodeOf(err))
			var ce *domain.ContextError
			if assert.ErrorAs(t, err, &ce) {
				assert.Equal(t, domain.CauseRouteInvalid, ce.Cause)
			}
		}
	}
}

func TestDegradedMatrix(t *testing.T) {
	m := domain.DefaultDegradedMatrix()
	assert.Equal(t, domain.ActionBypass, m.Action(domain.FamilyRead))
	assert.Equal(t, domain.ActionDeny, m.Action(domain.FamilyAuth))
	assert.Equal(t, domain.ActionDeny, m.Action(domain.FamilyCostly))
	assert.Equal(t, domain.ActionDeny, m.Action(0), "an unknown family fails closed")
	assert.Equal(t, domain.ActionDeny, domain.DegradedMatrix{}.Action(domain.FamilyRead), "an unset cell fails closed")
	m.Costly = domain.ActionLocal
	assert.Equal(t, domain.ActionLocal, m.Action(domain.FamilyCostly))
	for _, a := range []domain.DegradedAction{domain.ActionBypass, domain.ActionDeny, domain.ActionLocal} {
		got, err := domain.ParseDegradedAction(a.String())
		assert.NoError(t, err)
		assert.Equal(t, a, got)
	}
	for _, f := range domain.Families() {
		got, err := domain.ParseRouteFamily(f.String())
		assert.NoError(t, err)
		assert.Equal(t, f, got)
	}
}

func TestBurstLimit(t *testing.T) {
	p := domain.RouteProfile{Dimensions: []domain.DimensionWindows{
		{Dimension: domain.DimensionIP, Windows: []domain.Window{
			{Name: domain.WindowBurst, Limit: 20, Period: time.Second},
			{Name: domain.WindowSustained, Limit: 5, Period: time.Minute},
		}},
		{Dimension: domain.DimensionUser, Windows: []domain.Window{{Name: domain.WindowBurst, Limit: 10, Period: time.Second}}},
	}}
	assert.Equal(t, int64(10), p.BurstLimit())
	p.Dimensions = p.Dimensions[:1]
	p.Dimensions[0].Windows = p.Dimensions[0].Windows[1:]
	assert.Equal(t, int64(5), p.BurstLimit(), "without a burst window, the smallest limit")
}

func TestStateNames(t *testing.T) {
	want := map[domain.State]string{
		domain.Allowed: "ALLOWED", domain.Throttled: "THROTTLED", domain.BypassDegraded: "BYPASS_DEGRADED",
		domain.DeniedDegraded: "DENIED_DEGRADED", domain.RejectedInvalidContext: "REJECTED_INVALID_CONTEXT",
	}
	for s, name := range want {
		assert.Equal(t, name, s.String())
	}
	assert.True(t, domain.Allowed.Passes())
	assert.True(t, domain.BypassDegraded.Passes())
	assert.False(t, domain.Throttled.Passes())
	assert.False(t, domain.Decision{State: domain.Throttled, Shadow: true}.Blocks(), "shadow mode never blocks")
	assert.True(t, domain.Decision{State: domain.DeniedDegraded}.Blocks())
}

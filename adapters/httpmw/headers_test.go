package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

// sfItem is one parsed structured-field list member: its String value and
// its parameters in order.
type sfItem struct {
	Name   string
	Params map[string]any
	Order  []string
}

// parseList parses a structured-field list with httpsfv, a parser sluice
// does not use to write the fields, and checks that every member is an
// Item whose value is a String, as the draft requires.
func parseList(t *testing.T, values []string) []sfItem {
	t.Helper()
	list, err := httpsfv.UnmarshalList(values)
	require.NoError(t, err, "%q", values)
	var out []sfItem
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok, "member %v is not an Item", m)
		name, ok := item.Value.(string)
		require.True(t, ok, "member value %v is not a String", item.Value)
		it := sfItem{Name: name, Params: map[string]any{}, Order: item.Params.Names()}
		for _, k := range it.Order {
			it.Params[k], _ = item.Params.Get(k)
		}
		out = append(out, it)
	}
	return out
}

// decision builds a decision with the given windows checked; the limiting
// window is the one at index limiting.
func decision(state domain.State, limiting int, checks ...domain.WindowCheck) domain.Decision {
	d := domain.Decision{State: state, Remaining: 1 << 40}
	for _, c := range checks {
		d.Windows.Add(c)
		d.Remaining = min(d.Remaining, c.Remaining)
	}
	l := checks[limiting]
	d.Limit, d.LimitingDimension, d.LimitingWindow, d.LimitingPeriod = l.Window.Limit, l.Dimension, l.Window.Name, l.Window.Period
	d.ResetAfter, d.RetryAfter = l.ResetAfter, l.RetryAfter
	return d
}

func check(dim domain.Dimension, name string, limit int64, period time.Duration, allowed bool, remaining int64, retry, reset time.Duration) domain.WindowCheck {
	return domain.WindowCheck{
		Dimension: dim,
		Window:    domain.Window{Name: name, Limit: limit, Period: period},
		Allowed:   allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset,
	}
}

func TestHeadersOfAnAllowedDecision(t *testing.T) {
	d := decision(domain.Allowed, 1,
		check(domain.DimensionIP, "burst", 20, time.Second, true, 19, 0, 50*time.Millisecond),
		check(domain.DimensionUser, "burst", 5, time.Second, true, 2, 0, 600*time.Millisecond),
		check(domain.DimensionUser, "sustained", 100, time.Minute, true, 97, 0, 1800*time.Millisecond),
		check(domain.DimensionTenantGlobal, "sustained", 5000, time.Minute, true, 4000, 0, 30*time.Second),
	)
	h := http.Header{}
	setRateLimitHeaders(h, &d)

	assert.Equal(t, "5", h.Get(HeaderLimit))
	assert.Equal(t, "2", h.Get(HeaderRemaining), "minimum across every window")
	assert.Equal(t, "1", h.Get(HeaderReset), "seconds, rounded up")
	assert.Empty(t, h.Get(HeaderRetryAfter))

	policies := parseList(t, h.Values(HeaderPolicy))
	require.Len(t, policies, 4)
	want := []struct {
		name string
		q, w int64
	}{{"ip-burst", 20, 1}, {"user-burst", 5, 1}, {"user-sustained", 100, 60}, {"tenant_global-sustained", 5000, 60}}
	for i, p := range policies {
		assert.Equal(t, want[i].name, p.Name)
		assert.Equal(t, []string{"q", "w"}, p.Order)
		assert.Equal(t, want[i].q, p.Params["q"])
		assert.Equal(t, want[i].w, p.Params["w"])
	}

	limit := parseList(t, h.Values(HeaderRateLimit))
	require.Len(t, limit, 1)
	assert.Equal(t, "user-burst", limit[0].Name)
	assert.Equal(t, int64(2), limit[0].Params["r"])
	assert.Equal(t, int64(1), limit[0].Params["t"])
}

func TestHeadersOfARefusal(t *testing.T) {
	d := decision(domain.Throttled, 1,
		check(domain.DimensionIP, "burst", 20, time.Second, true, 19, 0, time.Second),
		check(domain.DimensionUser, "sustained", 100, time.Minute, false, 0, 2300*time.Millisecond, 59*time.Second),
		check(domain.DimensionTenant, "burst", 8, time.Second, false, 0, 400*time.Millisecond, time.Second),
	)
	rec := httptest.NewRecorder()
	writeRefusal(rec, &d)
	h := rec.Header()
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	limit := parseList(t, h.Values(HeaderRateLimit))
	require.Len(t, limit, 1)
	assert.Equal(t, "user-sustained", limit[0].Name)
	assert.Equal(t, int64(0), limit[0].Params["r"])
	assert.Equal(t, int64(3), limit[0].Params["t"], "t on a refusal: until the request would pass")
	assert.Equal(t, "3", h.Get(HeaderRetryAfter), "never earlier than t or than the request would pass")
	assert.JSONEq(t, `{
		"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title": "Request cannot be satisfied as assigned quota has been exceeded",
		"status": 429,
		"violated-policies": ["user-sustained", "tenant-burst"]
	}`, rec.Body.String())
}

func TestRetryAfterIsNeverBelowOneSecond(t *testing.T) {
	d := decision(domain.Throttled, 0, check(domain.DimensionIP, "burst", 20, time.Second, false, 0, 0, 0))
	assert.Equal(t, int64(1), d.RetryAfterSeconds())
	d.RetryAfter = 1001 * time.Millisecond
	assert.Equal(t, int64(2), d.RetryAfterSeconds())
}

func TestPolicyWithoutWholeSecondsHasNoWindow(t *testing.T) {
	d := decision(domain.Allowed, 0,
		check(domain.DimensionIP, "fast", 3, 500*time.Millisecond, true, 2, 0, 200*time.Millisecond),
		check(domain.DimensionIP, "odd", 3, 1500*time.Millisecond, true, 2, 0, 200*time.Millisecond),
	)
	h := http.Header{}
	setRateLimitHeaders(h, &d)
	policies := parseList(t, h.Values(HeaderPolicy))
	require.Len(t, policies, 2)
	for _, p := range policies {
		assert.Equal(t, []string{"q"}, p.Order, "the draft's w has no sub-second precision: %s leaves it out", p.Name)
	}
}

func TestLimitingWindowIsAlwaysAPolicy(t *testing.T) {
	// A degraded bypass counts the per-instance cap, which the decision
	// names as its limiting window even when its window list is empty.
	d := domain.Decision{State: domain.BypassDegraded, Limit: 10, Remaining: 9, LimitingDimension: domain.DimensionIP,
		LimitingWindow: "degraded_cap", LimitingPeriod: time.Minute, ResetAfter: 6 * time.Second}
	h := http.Header{}
	setRateLimitHeaders(h, &d)
	policies := parseList(t, h.Values(HeaderPolicy))
	require.Len(t, policies, 1)
	assert.Equal(t, "ip-degraded_cap", policies[0].Name)
	assert.Equal(t, int64(10), policies[0].Params["q"])
	assert.Equal(t, int64(60), policies[0].Params["w"])
}

func TestNothingCountedNoHeaders(t *testing.T) {
	for _, d := range []domain.Decision{
		{State: domain.Allowed, Remaining: -1, Cause: domain.CauseNoWindow},
		{State: domain.DeniedDegraded, Cause: domain.CauseBreakerOpen, RetryAfter: time.Second},
		{State: domain.RejectedInvalidContext, Cause: domain.CauseRouteInvalid},
	} {
		h := http.Header{}
		setRateLimitHeaders(h, &d)
		assert.Empty(t, h, "%s", d.State)
	}
}

func TestStringSerialisationEscapes(t *testing.T) {
	d := decision(domain.Allowed, 0, check(domain.DimensionIP, "we\"ird\\na\x01me", 3, time.Second, true, 2, 0, time.Second))
	h := http.Header{}
	setRateLimitHeaders(h, &d)
	policies := parseList(t, h.Values(HeaderPolicy))
	assert.Equal(t, "ip-we\"ird\\na_me", policies[0].Name)
}

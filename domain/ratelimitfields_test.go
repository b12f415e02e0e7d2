package domain_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func TestRateLimitFields(t *testing.T) {
	var d domain.Decision
	_, ok := d.RateLimitFields()
	assert.False(t, ok, "nothing counted, nothing to send")

	d = domain.Decision{
		State: domain.Throttled, Limit: 5, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: 3 * time.Second,
		LimitingDimension: domain.DimensionUser, LimitingWindow: "burst", LimitingPeriod: time.Second,
	}
	d.Windows.Add(domain.WindowCheck{Dimension: domain.DimensionUser, Window: domain.Window{Name: "burst", Limit: 5, Period: time.Second}, Remaining: 0})
	d.Windows.Add(domain.WindowCheck{Dimension: domain.DimensionTenant, Window: domain.Window{Name: "sustained", Limit: 100, Period: time.Minute}, Allowed: true, Remaining: 40})
	d.Windows.Add(domain.WindowCheck{Dimension: domain.DimensionIP, Window: domain.Window{Name: "fast", Limit: 9, Period: 1500 * time.Millisecond}, Allowed: true, Remaining: 9})
	f, ok := d.RateLimitFields()
	require.True(t, ok)
	assert.Equal(t, domain.RateLimitFields{
		Limit: 5, Remaining: 0, Reset: 3,
		Policy:    `"user-burst";q=5;w=1, "tenant-sustained";q=100;w=60, "ip-fast";q=9`,
		RateLimit: `"user-burst";r=0;t=2`,
	}, f)
	assert.Equal(t, int64(2), d.RetryAfterSeconds(), "rounded up, never before t")
	assert.Equal(t, []string{"user-burst"}, d.ViolatedPolicies())

	// The limiting window is a policy even when the list lacks it.
	d.Windows = domain.WindowChecks{}
	f, _ = d.RateLimitFields()
	assert.Equal(t, `"user-burst";q=5;w=1`, f.Policy)
	assert.Equal(t, []string{"user-burst"}, d.ViolatedPolicies())

	d = domain.Decision{State: domain.Allowed, Limit: 3, Remaining: 2, ResetAfter: 10 * time.Second, LimitingDimension: domain.DimensionIP, LimitingWindow: `we"ird`}
	f, _ = d.RateLimitFields()
	assert.Equal(t, `"ip-we\"ird";r=2;t=10`, f.RateLimit, "t is the reset on a pass; names are escaped")
	assert.Equal(t, int64(10), d.RetryAfterSeconds())
}

func TestClientIPBehindProxies(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	peerProxy := netip.MustParseAddr("10.1.2.3")
	stranger := netip.MustParseAddr("198.51.100.4")
	cases := []struct {
		name string
		peer netip.Addr
		hops []string
		want string
		bad  bool
	}{
		{"untrusted peer: hops ignored", stranger, []string{"203.0.113.9"}, "198.51.100.4", false},
		{"trusted peer, one hop", peerProxy, []string{"203.0.113.9"}, "203.0.113.9", false},
		{"right-most untrusted hop", peerProxy, []string{"1.1.1.1", "203.0.113.9", "10.9.9.9"}, "203.0.113.9", false},
		{"every hop trusted: the left-most", peerProxy, []string{"10.0.0.1", "10.0.0.2"}, "10.0.0.1", false},
		{"empty hops skipped", peerProxy, []string{"203.0.113.9", " ", ""}, "203.0.113.9", false},
		{"no hop: the peer", peerProxy, nil, "10.1.2.3", false},
		{"mapped peer is trusted", netip.MustParseAddr("::ffff:10.1.2.3"), []string{"[2001:db9::1]:443"}, "2001:db9::1", false},
		{"unknown hop where the client is", peerProxy, []string{"unknown"}, "", true},
		{"garbage left of the client is not read", peerProxy, []string{"garbage", "203.0.113.9"}, "203.0.113.9", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := domain.ClientIPBehindProxies(c.peer, c.hops, trusted)
			if c.bad {
				var ce *domain.ContextError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, domain.CauseIPUnresolved, ce.Cause)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got.String())
		})
	}
}

// TestRateLimitFieldsMemo: the memoised fields are RateLimitFields', on
// the first decision of a window list and on the ones that find it
// remembered, for decisions of several profiles in turn (the memo never
// answers one profile with another's policy), whichever window limits.
func TestRateLimitFieldsMemo(t *testing.T) {
	burst := domain.Window{Name: "burst", Limit: 5, Period: time.Second}
	sustained := domain.Window{Name: "sustained", Limit: 100, Period: time.Minute}
	fast := domain.Window{Name: "fast", Limit: 9, Period: 1500 * time.Millisecond}
	decision := func(limiting int, checks ...domain.WindowCheck) domain.Decision {
		l := checks[limiting]
		d := domain.Decision{State: domain.Allowed, Limit: l.Window.Limit, Remaining: 3, ResetAfter: 2500 * time.Millisecond,
			LimitingDimension: l.Dimension, LimitingWindow: l.Window.Name, LimitingPeriod: l.Window.Period}
		for _, c := range checks {
			d.Windows.Add(c)
		}
		return d
	}
	check := func(dim domain.Dimension, w domain.Window) domain.WindowCheck {
		return domain.WindowCheck{Dimension: dim, Window: w, Allowed: true}
	}
	ipUser := []domain.WindowCheck{check(domain.DimensionIP, burst), check(domain.DimensionUser, burst), check(domain.DimensionTenant, sustained)}
	otherLimit := []domain.WindowCheck{check(domain.DimensionIP, burst), check(domain.DimensionUser, burst), check(domain.DimensionTenant, domain.Window{Name: "sustained", Limit: 101, Period: time.Minute})}
	otherName := []domain.WindowCheck{check(domain.DimensionIP, burst), check(domain.DimensionUser, fast), check(domain.DimensionTenant, sustained)}
	shorter := []domain.WindowCheck{check(domain.DimensionIP, burst), check(domain.DimensionUser, burst)}
	lookAlike := []domain.WindowCheck{check(domain.DimensionTenant, domain.Window{Name: "global-x", Limit: 5, Period: time.Second}), check(domain.DimensionTenantGlobal, domain.Window{Name: "x", Limit: 5, Period: time.Second})}
	decisions := []domain.Decision{
		decision(0, ipUser...), decision(1, ipUser...), decision(2, ipUser...),
		decision(2, otherLimit...), decision(1, otherName...), decision(0, shorter...), decision(1, shorter...),
		decision(0, lookAlike...), decision(1, lookAlike...),
	}
	// A limiting window the list lacks is added to the policy.
	unlisted := decision(0, shorter...)
	unlisted.LimitingDimension, unlisted.LimitingWindow = domain.DimensionAPIKey, "burst"
	// A limiting window whose name is as long as a listed one's, and
	// differs from it in one byte, is not listed.
	alike := decision(0, lookAlike[0])
	alike.LimitingDimension, alike.LimitingWindow = domain.DimensionTenantGlobal, "x"
	decisions = append(decisions, unlisted, alike)
	// More window lists than the memo has slots: some share a slot, and
	// differ only by one window's limit.
	for limit := range int64(40) {
		decisions = append(decisions, decision(0, check(domain.DimensionIP, burst), check(domain.DimensionTenant, domain.Window{Name: "sustained", Limit: 1000 + limit, Period: time.Minute})))
	}
	var m domain.PolicyMemo
	for round := range 3 {
		for i := range decisions {
			d := &decisions[i]
			want, ok := d.RateLimitFields()
			require.True(t, ok)
			got, ok := d.RateLimitFieldsMemo(&m)
			require.True(t, ok)
			assert.Equal(t, want, got, "round %d, decision %d", round, i)
		}
	}
	var none domain.Decision
	_, ok := none.RateLimitFieldsMemo(&m)
	assert.False(t, ok, "nothing counted, nothing to send")
}

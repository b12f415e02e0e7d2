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

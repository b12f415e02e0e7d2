package httpmw

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	cases := []struct {
		name    string
		remote  string
		header  ProxyHeader
		values  []string // values of the header read
		other   []string // values of the header not read
		want    string   // "" means unresolved
		trusted []netip.Prefix
	}{
		{name: "no proxy configured: RemoteAddr", remote: "203.0.113.9:5555", values: []string{"198.51.100.1"}, want: "203.0.113.9"},
		{name: "untrusted peer: header ignored", remote: "203.0.113.9:5555", values: []string{"198.51.100.1"}, want: "203.0.113.9", trusted: proxies},
		{name: "untrusted peer: Forwarded ignored", remote: "203.0.113.9:5555", header: Forwarded, values: []string{"for=198.51.100.1"}, want: "203.0.113.9", trusted: proxies},
		{name: "trusted peer without header: the peer", remote: "10.1.1.1:80", want: "10.1.1.1", trusted: proxies},
		{name: "one hop", remote: "10.1.1.1:80", values: []string{"198.51.100.1"}, want: "198.51.100.1", trusted: proxies},
		{name: "right-most untrusted hop wins over a spoofed left part", remote: "10.1.1.1:80", values: []string{"6.6.6.6, 198.51.100.1"}, want: "198.51.100.1", trusted: proxies},
		{name: "trusted hops are skipped", remote: "10.1.1.1:80", values: []string{"6.6.6.6, 198.51.100.1, 10.2.2.2, 10.3.3.3"}, want: "198.51.100.1", trusted: proxies},
		{name: "several field lines are one list", remote: "10.1.1.1:80", values: []string{"6.6.6.6", "198.51.100.1, 10.2.2.2"}, want: "198.51.100.1", trusted: proxies},
		{name: "every hop trusted: the left-most", remote: "10.1.1.1:80", values: []string{"10.9.9.9, 10.2.2.2"}, want: "10.9.9.9", trusted: proxies},
		{name: "hop with a port", remote: "10.1.1.1:80", values: []string{"198.51.100.1:4711"}, want: "198.51.100.1", trusted: proxies},
		{name: "IPv6 hop", remote: "[2001:db8:ffff::1]:443", values: []string{"2001:db8:1::7"}, want: "2001:db8:1::7", trusted: proxies},
		{name: "IPv4-mapped trusted peer", remote: "[::ffff:10.1.1.1]:80", values: []string{"198.51.100.1"}, want: "198.51.100.1", trusted: proxies},
		{name: "garbage where the client is expected", remote: "10.1.1.1:80", values: []string{"198.51.100.1, unknown"}, want: "", trusted: proxies},
		{name: "garbage left of the client does not matter", remote: "10.1.1.1:80", values: []string{"unknown, 198.51.100.1"}, want: "198.51.100.1", trusted: proxies},
		{name: "empty elements carry no hop", remote: "10.1.1.1:80", values: []string{"198.51.100.1, , 10.2.2.2"}, want: "198.51.100.1", trusted: proxies},
		{name: "only the configured header is read", remote: "10.1.1.1:80", values: []string{"198.51.100.1"}, other: []string{"for=6.6.6.6"}, want: "198.51.100.1", trusted: proxies},
		{name: "Forwarded: only the configured header is read", remote: "10.1.1.1:80", header: Forwarded, values: []string{"for=198.51.100.1"}, other: []string{"6.6.6.6"}, want: "198.51.100.1", trusted: proxies},
		{name: "Forwarded: right-most untrusted for=", remote: "10.1.1.1:80", header: Forwarded, values: []string{`for=6.6.6.6, for=198.51.100.1;proto=https;by=10.1.1.1, for=10.2.2.2`}, want: "198.51.100.1", trusted: proxies},
		{name: "Forwarded: quoted IPv6 with port", remote: "10.1.1.1:80", header: Forwarded, values: []string{`for="[2001:db8:1::7]:4711"`}, want: "2001:db8:1::7", trusted: proxies},
		{name: "Forwarded: parameter names are case-insensitive", remote: "10.1.1.1:80", header: Forwarded, values: []string{`proto=http;For="198.51.100.1"`}, want: "198.51.100.1", trusted: proxies},
		{name: "Forwarded: a comma inside quotes is not a separator", remote: "10.1.1.1:80", header: Forwarded, values: []string{`for=198.51.100.1;ext="a,b"`}, want: "198.51.100.1", trusted: proxies},
		{name: "Forwarded: obfuscated identifier", remote: "10.1.1.1:80", header: Forwarded, values: []string{`for=_hidden`}, want: "", trusted: proxies},
		{name: "Forwarded: element without for=", remote: "10.1.1.1:80", header: Forwarded, values: []string{`proto=https`}, want: "", trusted: proxies},
		{name: "unparsable RemoteAddr", remote: "pipe", want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			other := Forwarded
			if c.header == Forwarded {
				other = XForwardedFor
			}
			for _, v := range c.values {
				r.Header.Add(c.header.String(), v)
			}
			for _, v := range c.other {
				r.Header.Add(other.String(), v)
			}
			got, err := clientIP(r, c.trusted, c.header)
			if c.want == "" {
				require.Error(t, err)
				var ce *domain.ContextError
				require.True(t, errors.As(err, &ce))
				assert.Equal(t, domain.CauseIPUnresolved, ce.Cause)
				assert.False(t, got.IsValid())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got.String())
		})
	}
}

func TestConfigValidate(t *testing.T) {
	assert.NoError(t, Config{}.Validate())
	err := Config{ProxyHeader: 7}.Validate()
	assert.ErrorIs(t, err, domain.ErrInvalidConfig)
	err = Config{TrustedProxies: []netip.Prefix{{}}}.Validate()
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "httpmw.trusted_proxies[0]", ce.Field)
}

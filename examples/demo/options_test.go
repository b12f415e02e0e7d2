package main

import (
	"io"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrustedProxiesFlag: -trusted-proxies reads a list of CIDRs, and
// refuses anything else.
func TestTrustedProxiesFlag(t *testing.T) {
	o, err := parseOptions([]string{"-trusted-proxies", "127.0.0.0/8, 10.0.0.0/8"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}, o.trusted)

	o, err = parseOptions(nil, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, o.trusted, "no proxy is trusted by default")

	_, err = parseOptions([]string{"-trusted-proxies", "127.0.0.1"}, io.Discard)
	assert.Error(t, err, "an address is not a CIDR")
}

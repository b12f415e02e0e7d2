package httpmw

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/domain"
)

// ProxyHeader names the forwarding header read from trusted proxies. Only
// one is read: a proxy that appends to X-Forwarded-For passes a client's
// own Forwarded header through untouched, so reading both would let the
// client choose its address.
type ProxyHeader uint8

const (
	// XForwardedFor reads X-Forwarded-For, the header most proxies append
	// to (nginx, HAProxy, cloud load balancers). The zero value.
	XForwardedFor ProxyHeader = iota
	// Forwarded reads the standard Forwarded header of RFC 7239 (its for=
	// parameters).
	Forwarded
)

// String returns the header's canonical name.
func (h ProxyHeader) String() string {
	if h == Forwarded {
		return "Forwarded"
	}
	return "X-Forwarded-For"
}

// clientIP resolves the address a request is counted by: RemoteAddr, or,
// when it is a trusted proxy, the right-most untrusted hop of the
// configured forwarding header (domain.ClientIPBehindProxies).
func clientIP(r *http.Request, trusted []netip.Prefix, header ProxyHeader) (netip.Addr, error) {
	peer, err := domain.ParseClientIP(r.RemoteAddr)
	if err != nil || len(trusted) == 0 {
		return peer, err
	}
	var hops []string
	values := r.Header.Values(header.String())
	if header == Forwarded {
		hops = forwardedFor(values)
	} else {
		for _, v := range values {
			hops = append(hops, strings.Split(v, ",")...)
		}
	}
	return domain.ClientIPBehindProxies(peer, hops, trusted)
}

// forwardedFor returns the for= value of every element of the Forwarded
// field lines, in order; an element without for= yields "unknown", the
// RFC 7239 name of a hop that cannot be identified. Values may be tokens or quoted strings ("[2001:db8::1]:4711").
func forwardedFor(lines []string) []string {
	var hops []string
	for _, line := range lines {
		for _, elem := range splitQuoted(line, ',') {
			hop := "unknown"
			for _, pair := range splitQuoted(elem, ';') {
				name, value, ok := strings.Cut(pair, "=")
				if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
					if v := unquote(strings.TrimSpace(value)); v != "" {
						hop = v
					}
				}
			}
			hops = append(hops, hop)
		}
	}
	return hops
}

// splitQuoted splits s at sep outside quoted strings.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote removes the quotes and escapes of an RFC 9110 quoted-string; a
// token is returned as is.
func unquote(v string) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	v = v[1 : len(v)-1]
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

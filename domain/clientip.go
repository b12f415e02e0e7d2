package domain

import (
	"net/netip"
	"strings"
)

// ClientIPBehindProxies resolves the address a request is counted by from
// its peer (the connection's remote address) and the hops a forwarding
// header lists, left to right as proxies appended them.
//
// The hops are read only when the peer is inside a trusted prefix: a
// forwarding header from anyone else is ignored, since any client can send
// one. They are then walked from the right (the hop the trusted proxy
// appended) to the left, skipping hops that are themselves trusted
// proxies: the first untrusted hop is the client. When every hop is
// trusted, the left-most one is. An empty hop carries nothing and is
// skipped; a hop that does not parse where the client is expected
// ("unknown", an obfuscated identifier, garbage) leaves the address
// unresolved (a *ContextError, CauseIPUnresolved): counting it against
// the proxy would throttle every client behind it together.
func ClientIPBehindProxies(peer netip.Addr, hops []string, trusted []netip.Prefix) (netip.Addr, error) {
	if !isTrusted(peer, trusted) {
		return peer, nil
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		a, err := ParseClientIP(hop)
		if err != nil {
			return netip.Addr{}, err
		}
		client = a
		if !isTrusted(a, trusted) {
			break
		}
	}
	return client, nil
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

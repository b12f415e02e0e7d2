package httpmw

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/domain"
)

// fuzzTrust are the trusted-proxy sets the fuzz targets pick from.
var fuzzTrust = [][]netip.Prefix{
	nil,
	{netip.MustParsePrefix("10.0.0.0/8")},
	{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")},
	{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
}

// notRead is the address the header that is not configured claims.
var notRead = netip.MustParseAddr("192.0.2.99")

// FuzzClientIP resolves the client address of requests with any
// RemoteAddr and any forwarding header: it never panics, a peer outside
// the trusted proxies is counted as itself whatever the header says (a
// spoofed header changes nothing), and a trusted peer's request is counted
// by a hop of its header or by the peer, or refused as unresolved. Seeds:
// testdata/fuzz.
func FuzzClientIP(f *testing.F) {
	f.Add("203.0.113.7:5000", "198.51.100.1", false, uint8(1))
	f.Add("10.0.0.2:5000", "198.51.100.1, 10.0.0.3", false, uint8(1))
	f.Add("10.0.0.2:5000", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.9`, true, uint8(2))
	f.Add("[2001:db8::5]:443", `for=unknown`, true, uint8(2))
	f.Add("10.1.2.3:1", `for="_hidden", for=192.0.2.60;by=203.0.113.43`, true, uint8(3))
	f.Add("not an address", "1.2.3.4", false, uint8(3))
	f.Add("10.0.0.2:5000", `for="\"[::1]\"", ,;;=`, true, uint8(1))
	f.Fuzz(func(t *testing.T, remote, header string, forwarded bool, trustSel uint8) {
		trusted := fuzzTrust[int(trustSel)%len(fuzzTrust)]
		h := XForwardedFor
		if forwarded {
			h = Forwarded
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set(h.String(), header)
		// The other header, which must never be read.
		r.Header.Set(map[ProxyHeader]string{XForwardedFor: "Forwarded", Forwarded: "X-Forwarded-For"}[h], "for="+notRead.String()+", "+notRead.String())
		got, err := clientIP(r, trusted, h)
		peer, perr := domain.ParseClientIP(remote)
		switch {
		case perr != nil:
			if err == nil {
				t.Fatalf("RemoteAddr %q does not parse, yet the client is %s", remote, got)
			}
		case !trustedPeer(peer, trusted):
			if err != nil || got != peer {
				t.Fatalf("untrusted peer %s with %s %q: client %s, %v; want the peer", peer, h, header, got, err)
			}
		case err != nil:
			var ce *domain.ContextError
			if !errors.As(err, &ce) || ce.Cause != domain.CauseIPUnresolved {
				t.Fatalf("unresolved client: %v, want a *domain.ContextError ip_unresolved", err)
			}
		case got == notRead && !strings.Contains(header, notRead.String()):
			t.Fatalf("the client came from the %s header, which is not configured", map[ProxyHeader]string{XForwardedFor: "Forwarded", Forwarded: "X-Forwarded-For"}[h])
		}
	})
}

func trustedPeer(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a.Unmap().WithZone("")) {
			return true
		}
	}
	return false
}

// FuzzForwardedRoundTrip writes a chain of proxies' hops in both headers,
// the way proxies write them (IPv6 bracketed and quoted with a port in
// Forwarded, other parameters around for=, any spacing), and reads them
// back: every hop comes back as written, and behind a trusted peer the
// client is the right-most hop outside the trusted proxies.
func FuzzForwardedRoundTrip(f *testing.F) {
	f.Add([]byte{198, 51, 100, 1, 10, 0, 0, 3}, uint16(4711), uint8(0))
	f.Add([]byte{0x20, 0x01, 0x0d, 0xb8, 0xca, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x17, 192, 0, 2, 60}, uint16(0), uint8(5))
	f.Fuzz(func(t *testing.T, raw []byte, port uint16, style uint8) {
		var addrs []netip.Addr
		for len(raw) > 0 && len(addrs) < 8 {
			n := 4
			if raw[0]&1 == 1 && len(raw) >= 16 {
				n = 16
			}
			if len(raw) < n {
				break
			}
			a, _ := netip.AddrFromSlice(raw[:n])
			addrs = append(addrs, a)
			raw = raw[n:]
		}
		if len(addrs) == 0 {
			return
		}
		var fwd, xff []string
		for i, a := range addrs {
			v := a.String()
			if a.Is6() {
				v = "[" + v + "]"
			}
			if port != 0 {
				v += ":" + strconv.Itoa(int(port)+i)
			}
			elem := "for=" + v
			if a.Is6() || port != 0 || style&1 == 1 {
				elem = `for="` + v + `"`
			}
			if style&2 == 2 {
				elem = "proto=https;" + strings.ToUpper(elem[:3]) + elem[3:] + ";by=_proxy"
			}
			fwd = append(fwd, elem)
			xff = append(xff, v)
		}
		sep := ","
		if style&4 == 4 {
			sep = " ,  "
		}
		hops := forwardedFor([]string{strings.Join(fwd, sep)})
		if len(hops) != len(addrs) {
			t.Fatalf("Forwarded %q read as %d hops, want %d", strings.Join(fwd, sep), len(hops), len(addrs))
		}
		for i, hop := range hops {
			if a, err := domain.ParseClientIP(hop); err != nil || a != addrs[i] {
				t.Fatalf("hop %d of %q read as %q (%v, %v), want %s", i, strings.Join(fwd, sep), hop, a, err, addrs[i])
			}
		}
		// Behind a trusted peer, the client is the right-most hop outside
		// the trusted proxies (here 10/8): the hops left of it are the
		// client's own claims.
		trusted := fuzzTrust[1]
		want := netip.MustParseAddr("10.0.0.1")
		for i := len(addrs) - 1; i >= 0; i-- {
			want = addrs[i]
			if !trustedPeer(addrs[i], trusted) {
				break
			}
		}
		for _, h := range []ProxyHeader{Forwarded, XForwardedFor} {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.0.0.1:443"
			if h == Forwarded {
				r.Header.Set("Forwarded", strings.Join(fwd, sep))
			} else {
				r.Header.Set("X-Forwarded-For", strings.Join(xff, sep))
			}
			if got, err := clientIP(r, trusted, h); err != nil || got != want {
				t.Fatalf("%s: client %s, %v; want %s", h, got, err, want)
			}
		}
	})
}

package domain_test

import (
	"net/netip"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/domain"
)

// FuzzNormaliseIdentifier: whatever a client sends as a user, tenant or
// api key, normalisation never panics, refuses with a typed error that
// does not quote the input, and accepts only clean, stable identifiers.
// Seeds: testdata/fuzz.
func FuzzNormaliseIdentifier(f *testing.F) {
	for _, s := range []string{"User-42", " Bob@Example.ORG ", "ÉLODIE@Example.fr", "", "   ", "u\xff1", "a\nb",
		strings.Repeat("a", domain.MaxIdentifierLen), strings.Repeat("a", domain.MaxIdentifierLen+1),
		"\u0130@x", "k@\u212a", "\u00a0x\u00a0", "a\u200bb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		id, err := domain.NormaliseIdentifier(raw)
		if err != nil {
			checkContextError(t, err, domain.CauseDimensionInvalid)
			return
		}
		switch {
		case id == "":
			t.Fatalf("NormaliseIdentifier(%q) accepted an empty identifier", raw)
		case !utf8.ValidString(id):
			t.Fatalf("NormaliseIdentifier(%q) = %q: not UTF-8", raw, id)
		case strings.ContainsFunc(id, unicode.IsControl):
			t.Fatalf("NormaliseIdentifier(%q) = %q: holds a control character", raw, id)
		case strings.TrimSpace(id) != id:
			t.Fatalf("NormaliseIdentifier(%q) = %q: not trimmed", raw, id)
		case len(strings.TrimSpace(raw)) > domain.MaxIdentifierLen:
			t.Fatalf("NormaliseIdentifier accepted %d bytes, over the bound", len(strings.TrimSpace(raw)))
		case len(id) > domain.MaxIdentifierLen:
			t.Fatalf("NormaliseIdentifier(%q) = %d bytes once lower-cased, over the bound", raw, len(id))
		}
		if !strings.Contains(id, "@") && id != strings.TrimSpace(raw) {
			t.Fatalf("NormaliseIdentifier(%q) = %q: an opaque id must keep its case", raw, id)
		}
		// E-mail-like ids count as one whatever their ASCII case.
		if strings.Contains(id, "@") && isASCII(raw) {
			up, err := domain.NormaliseIdentifier(strings.ToUpper(raw))
			if err != nil || up != id {
				t.Fatalf("NormaliseIdentifier(%q) = %q, but its upper case gives %q, %v", raw, id, up, err)
			}
		}
		// Normalising is idempotent (while the output is within the
		// bound: lower-casing may lengthen some non-ASCII letters).
		if len(id) <= domain.MaxIdentifierLen {
			if again, err := domain.NormaliseIdentifier(id); err != nil || again != id {
				t.Fatalf("NormaliseIdentifier(%q) = %q, then %q, %v", raw, id, again, err)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// FuzzParseClientIP: a raw client address (RemoteAddr or a forwarding
// header's hop) parses into an address that normalises, or is refused
// with a typed error that does not quote it. Seeds: testdata/fuzz.
func FuzzParseClientIP(f *testing.F) {
	for _, s := range []string{"192.0.2.7", "192.0.2.7:5123", "[2001:db8::1]:443", "[2001:db8::1]", "2001:db8::1",
		"::ffff:203.0.113.9", "[::ffff:203.0.113.9]:80", "fe80::1%eth0", "[fe80::1%25eth0]:1", " 10.0.0.1 ",
		"", ":80", "example.org", "1.2.3.4.5", "[]", "[::1", "0.0.0.0", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := domain.ParseClientIP(raw)
		if err != nil {
			checkContextError(t, err, domain.CauseIPUnresolved)
			return
		}
		if !a.IsValid() {
			t.Fatalf("ParseClientIP(%q) = the zero address without an error", raw)
		}
		norm, err := domain.NormaliseIP(a)
		if err != nil {
			t.Fatalf("ParseClientIP(%q) = %s, which does not normalise: %v", raw, a, err)
		}
		checkNormalised(t, a, norm)
	})
}

// FuzzNormaliseIP: every IPv6 address of one /64 counts as one client,
// an IPv4-mapped address as its IPv4 form, and a zone never matters.
func FuzzNormaliseIP(f *testing.F) {
	f.Add([]byte{192, 0, 2, 7}, uint64(0), "")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 203, 0, 113, 9}, uint64(1), "")
	f.Add([]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0xaa, 0xaa, 0xbb, 0xbb, 0xcc, 0xcc, 0xdd, 0xdd}, uint64(42), "eth0")
	f.Add([]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, ^uint64(0), "1")
	f.Fuzz(func(t *testing.T, b []byte, low uint64, zone string) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		norm, err := domain.NormaliseIP(a)
		if err != nil {
			t.Fatalf("NormaliseIP(%s): %v", a, err)
		}
		checkNormalised(t, a, norm)
		if !a.Is6() || a.Is4In6() {
			return
		}
		// Another host of the same /64, in any zone.
		b16 := a.As16()
		for i := range 8 {
			b16[8+i] = byte(low >> (8 * (7 - i)))
		}
		sibling := netip.AddrFrom16(b16)
		if zone != "" && !strings.ContainsAny(zone, "%\x00") {
			sibling = sibling.WithZone(zone)
		}
		if got, err := domain.NormaliseIP(sibling); err != nil || got != norm {
			t.Fatalf("NormaliseIP(%s) = %q but NormaliseIP(%s) = %q, %v: one /64 must count once", a, norm, sibling, got, err)
		}
	})
}

// checkNormalised asserts what NormaliseIP promises of a's normal form.
func checkNormalised(t *testing.T, a netip.Addr, norm string) {
	t.Helper()
	if a.Unmap().Is4() {
		if want := a.Unmap().String(); norm != want {
			t.Fatalf("NormaliseIP(%s) = %q, want the IPv4 form %q", a, norm, want)
		}
		return
	}
	p, err := netip.ParsePrefix(norm)
	if err != nil || p.Bits() != domain.IPv6GroupBits || !p.Contains(a.WithZone("")) || p.Masked() != p {
		t.Fatalf("NormaliseIP(%s) = %q, want the masked /%d holding it", a, norm, domain.IPv6GroupBits)
	}
}

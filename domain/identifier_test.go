package domain

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func TestParseClientIP(t *testing.T) {
	tests := []struct {
		name, raw string
		want      string
		cause     Cause
	}{
		{name: "ipv4", raw: "192.0.2.7", want: "192.0.2.7"},
		{name: "ipv4 with port", raw: "192.0.2.7:5123", want: "192.0.2.7"},
		{name: "ipv6 with port", raw: "[2001:db8::1]:443", want: "2001:db8::1"},
		{name: "bracketed ipv6", raw: "[2001:db8::1]", want: "2001:db8::1"},
		{name: "bare ipv6", raw: "2001:db8::1", want: "2001:db8::1"},
		{name: "surrounding space", raw: "  10.0.0.1 ", want: "10.0.0.1"},
		{name: "empty", raw: "", cause: CauseIPUnresolved},
		{name: "host name", raw: "example.org", cause: CauseIPUnresolved},
		{name: "garbage", raw: "1.2.3.4.5", cause: CauseIPUnresolved},
		{name: "port only", raw: ":80", cause: CauseIPUnresolved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClientIP(tt.raw)
			if tt.cause != "" {
				assertCause(t, err, tt.cause)
				return
			}
			if err != nil {
				t.Fatalf("ParseClientIP(%q): %v", tt.raw, err)
			}
			if got.String() != tt.want {
				t.Fatalf("ParseClientIP(%q) = %s, want %s", tt.raw, got, tt.want)
			}
		})
	}
}

func TestNormaliseIP(t *testing.T) {
	tests := []struct {
		name string
		addr netip.Addr
		want string
	}{
		{name: "ipv4 unchanged", addr: netip.MustParseAddr("203.0.113.9"), want: "203.0.113.9"},
		{name: "ipv4-mapped ipv6 becomes ipv4", addr: netip.MustParseAddr("::ffff:203.0.113.9"), want: "203.0.113.9"},
		{name: "ipv6 masked to /64", addr: netip.MustParseAddr("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), want: "2001:db8:1:2::/64"},
		{name: "same /64 shares a value", addr: netip.MustParseAddr("2001:db8:1:2::1"), want: "2001:db8:1:2::/64"},
		{name: "zone dropped", addr: netip.MustParseAddr("fe80::1%eth0"), want: "fe80::/64"},
		{name: "loopback v6", addr: netip.IPv6Loopback(), want: "::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormaliseIP(tt.addr)
			if err != nil {
				t.Fatalf("NormaliseIP(%s): %v", tt.addr, err)
			}
			if got != tt.want {
				t.Fatalf("NormaliseIP(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
	t.Run("zero address refused", func(t *testing.T) {
		_, err := NormaliseIP(netip.Addr{})
		assertCause(t, err, CauseIPUnresolved)
	})
}

func TestNormaliseIdentifier(t *testing.T) {
	tests := []struct {
		name, raw, want string
		cause           Cause
	}{
		{name: "opaque id keeps case", raw: "User-42", want: "User-42"},
		{name: "trimmed", raw: "\t u-1 \n", want: "u-1"},
		{name: "e-mail lower-cased", raw: "Bob@Example.ORG", want: "bob@example.org"},
		{name: "e-mail trimmed and lower-cased", raw: " ÉLODIE@Example.fr ", want: "élodie@example.fr"},
		{name: "exactly the bound", raw: strings.Repeat("a", MaxIdentifierLen), want: strings.Repeat("a", MaxIdentifierLen)},
		{name: "empty", raw: "", cause: CauseDimensionInvalid},
		{name: "blank", raw: "   ", cause: CauseDimensionInvalid},
		{name: "one byte too long", raw: strings.Repeat("a", MaxIdentifierLen+1), cause: CauseDimensionInvalid},
		{name: "invalid utf-8", raw: "u\xff1", cause: CauseDimensionInvalid},
		{name: "control character", raw: "u\x001", cause: CauseDimensionInvalid},
		{name: "newline inside", raw: "a\nb", cause: CauseDimensionInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormaliseIdentifier(tt.raw)
			if tt.cause != "" {
				assertCause(t, err, tt.cause)
				if err != nil && strings.Contains(err.Error(), tt.raw) && strings.TrimSpace(tt.raw) != "" {
					t.Fatalf("error %q quotes the raw identifier", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormaliseIdentifier(%q): %v", tt.raw, err)
			}
			if got != tt.want {
				t.Fatalf("NormaliseIdentifier(%q) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func TestNewPseudonymiserSecretLength(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		if _, err := NewPseudonymiser(make([]byte, n)); !errors.Is(err, ErrSecretLength) {
			t.Errorf("secret of %d bytes: err = %v, want ErrSecretLength", n, err)
		}
	}
	if _, err := NewPseudonymiser(testSecret); err != nil {
		t.Fatalf("32-byte secret: %v", err)
	}
}

func TestPseudonymise(t *testing.T) {
	p, err := NewPseudonymiser(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	want := func(d Dimension, id string) string {
		m := hmac.New(sha256.New, testSecret)
		m.Write(append([]byte{byte(d)}, id...))
		return hex.EncodeToString(m.Sum(nil))[:PseudonymLen]
	}
	tests := []struct {
		name string
		dim  Dimension
		id   string
	}{
		{name: "ip", dim: DimensionIP, id: "192.0.2.1"},
		{name: "ipv6 group", dim: DimensionIP, id: "2001:db8::/64"},
		{name: "user", dim: DimensionUser, id: "alice@example.org"},
		{name: "api key", dim: DimensionAPIKey, id: "k_123"},
		{name: "tenant", dim: DimensionTenant, id: "acme"},
		{name: "empty string still hashes", dim: DimensionUser, id: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Pseudonymise(tt.dim, tt.id)
			if got != want(tt.dim, tt.id) {
				t.Fatalf("Pseudonymise = %s, want %s", got, want(tt.dim, tt.id))
			}
			if len(got) != PseudonymLen || strings.ToLower(got) != got {
				t.Fatalf("pseudonym %q is not %d lowercase hex characters", got, PseudonymLen)
			}
			if tt.id != "" && strings.Contains(got, tt.id) {
				t.Fatalf("pseudonym %q contains the identifier", got)
			}
			if again := p.Pseudonymise(tt.dim, tt.id); again != got {
				t.Fatalf("not deterministic: %s then %s", got, again)
			}
		})
	}
	t.Run("dimensions are separated", func(t *testing.T) {
		if p.Pseudonymise(DimensionUser, "acme") == p.Pseudonymise(DimensionTenant, "acme") {
			t.Fatal("a user and a tenant with the same id share a pseudonym")
		}
	})
	t.Run("tenant global shares the tenant pseudonym", func(t *testing.T) {
		if p.Pseudonymise(DimensionTenantGlobal, "acme") != p.Pseudonymise(DimensionTenant, "acme") {
			t.Fatal("tenant_global and tenant pseudonyms differ")
		}
	})
	t.Run("secret matters", func(t *testing.T) {
		other, _ := NewPseudonymiser([]byte("fedcba9876543210fedcba9876543210"))
		if other.Pseudonymise(DimensionUser, "u") == p.Pseudonymise(DimensionUser, "u") {
			t.Fatal("two secrets give the same pseudonym")
		}
	})
	t.Run("secret is never printed", func(t *testing.T) {
		for _, s := range []string{fmt.Sprint(p), fmt.Sprintf("%v %+v %#v %s", p, p, p, p)} {
			if strings.Contains(s, string(testSecret)) || strings.Contains(s, "0123456789") {
				t.Fatalf("formatted pseudonymiser reveals the secret: %s", s)
			}
		}
	})
}

func TestPseudonymiseConcurrent(t *testing.T) {
	p, _ := NewPseudonymiser(testSecret)
	want := p.Pseudonymise(DimensionUser, "shared")
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 200 {
				id := fmt.Sprintf("g%d-%d", g, i)
				a := p.Pseudonymise(DimensionUser, id)
				if p.Pseudonymise(DimensionUser, "shared") != want {
					t.Error("pooled hash leaked state between calls")
					return
				}
				if p.Pseudonymise(DimensionUser, id) != a {
					t.Error("not deterministic under concurrency")
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
}

func BenchmarkPseudonymise(b *testing.B) {
	p, _ := NewPseudonymiser(testSecret)
	b.ReportAllocs()
	for b.Loop() {
		p.Pseudonymise(DimensionUser, "alice@example.org")
	}
}

func assertCause(t *testing.T, err error, want Cause) {
	t.Helper()
	var ce *ContextError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *ContextError", err)
	}
	if ce.Cause != want {
		t.Fatalf("cause = %s, want %s", ce.Cause, want)
	}
	if !errors.Is(err, ErrInvalidContext) || CodeOf(err) != CodeInvalidContext {
		t.Fatalf("err %v does not carry ErrInvalidContext / %s", err, CodeInvalidContext)
	}
}

// TestNormaliseIdentifierBoundsTheLowerCasedForm: lower-casing may
// lengthen an e-mail-like identifier ('Ⱥ' U+023A becomes 'ⱥ' U+2C65, 2 → 3
// bytes); the bound holds for what is counted, not only for what came in.
func TestNormaliseIdentifierBoundsTheLowerCasedForm(t *testing.T) {
	raw := "@" + strings.Repeat("\u023a", (MaxIdentifierLen-1)/2) // 255 bytes in, 382 once lower-cased
	if len(raw) > MaxIdentifierLen {
		t.Fatalf("the input itself is over the bound: %d bytes", len(raw))
	}
	if _, err := NormaliseIdentifier(raw); err == nil {
		t.Fatal("an identifier over the bound once lower-cased was accepted")
	}
}

package domain

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/netip"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxIdentifierLen bounds a user, tenant or api-key identifier, in bytes,
// after trimming. Anything longer is refused rather than truncated: two
// distinct long identifiers must never share a counter.
const MaxIdentifierLen = 256

// IPv6GroupBits is the prefix length IPv6 clients are grouped by: a /64 is
// what one subscriber is usually handed, so counting per address would let a
// single client rotate through 2^64 counters.
const IPv6GroupBits = 64

// ParseClientIP parses a raw client address as found in RemoteAddr
// ("host:port" or "host") or a forwarding header. It returns a
// *ContextError with CauseIPUnresolved when nothing usable is found. The
// result is not normalised: see NormaliseIP.
func ParseClientIP(raw string) (netip.Addr, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return netip.Addr{}, &ContextError{Cause: CauseIPUnresolved, Detail: "empty client address"}
	}
	if ap, err := netip.ParseAddrPort(raw); err == nil {
		return ap.Addr(), nil
	}
	// "[::1]" without a port is a bracketed literal, not a host:port.
	if len(raw) > 2 && raw[0] == '[' && raw[len(raw)-1] == ']' {
		raw = raw[1 : len(raw)-1]
	}
	a, err := netip.ParseAddr(raw)
	if err != nil {
		return netip.Addr{}, &ContextError{Cause: CauseIPUnresolved, Detail: "client address does not parse"}
	}
	return a, nil
}

// NormaliseIP returns the canonical text counted for a client address: an
// IPv4-mapped IPv6 address becomes its IPv4 form, any other IPv6 address
// is masked to its /64 prefix ("2001:db8:1:2::/64"), and zones are dropped.
// The zero Addr is refused with a *ContextError (CauseIPUnresolved).
func NormaliseIP(a netip.Addr) (string, error) {
	if !a.IsValid() {
		return "", &ContextError{Cause: CauseIPUnresolved, Detail: "no client address"}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String(), nil
	}
	p, err := a.Prefix(IPv6GroupBits)
	if err != nil {
		return "", &ContextError{Cause: CauseIPUnresolved, Detail: "client address cannot be grouped"}
	}
	return p.String(), nil
}

// NormaliseIdentifier returns the canonical form of a user, tenant or
// api-key identifier: surrounding white space trimmed, and e-mail-like
// identifiers (those containing '@') lower-cased so that "Bob@Example.org"
// and "bob@example.org" share one counter. Other identifiers keep their
// case: opaque ids may be case-sensitive.
//
// An identifier that is empty after trimming, longer than MaxIdentifierLen
// bytes, not valid UTF-8 or holding a control character is refused with a
// *ContextError (CauseDimensionInvalid). The error never quotes the input.
func NormaliseIdentifier(raw string) (string, error) {
	id := strings.TrimSpace(raw)
	switch {
	case id == "":
		return "", &ContextError{Cause: CauseDimensionInvalid, Detail: "empty identifier"}
	case len(id) > MaxIdentifierLen:
		return "", &ContextError{Cause: CauseDimensionInvalid, Detail: "identifier too long"}
	case !utf8.ValidString(id):
		return "", &ContextError{Cause: CauseDimensionInvalid, Detail: "identifier is not valid UTF-8"}
	}
	lower := false
	for _, r := range id {
		if unicode.IsControl(r) {
			return "", &ContextError{Cause: CauseDimensionInvalid, Detail: "identifier holds a control character"}
		}
		if r == '@' {
			lower = true
		}
	}
	if lower {
		id = strings.ToLower(id)
		// Lower-casing may lengthen a string ('Ⱥ' is 2 bytes, 'ⱥ' 3).
		if len(id) > MaxIdentifierLen {
			return "", &ContextError{Cause: CauseDimensionInvalid, Detail: "identifier too long"}
		}
	}
	return id, nil
}

// SecretLen is the length of the HMAC secret, in bytes (docs/adr/005:
// 32 random bytes, given as 64 hex characters).
const SecretLen = 32

// PseudonymLen is the length of a pseudonym, in hex characters: the first
// 128 bits of the HMAC-SHA256. 128 bits keep keys short while making a
// collision between two identifiers negligible (birthday bound 2^64), and a
// truncated HMAC is as hard to invert as the full one.
const PseudonymLen = 32

// ErrSecretLength is returned by NewPseudonymiser for a secret that is not
// SecretLen bytes long.
var ErrSecretLength = errors.New("sluice: HMAC secret must be 32 bytes")

// Pseudonymiser turns normalised identifiers into pseudonyms: lowercase hex
// of HMAC-SHA256 under a secret, truncated to PseudonymLen characters. The
// dimension takes part in the MAC, so the same string used as a user id and
// as a tenant id yields two unrelated pseudonyms.
//
// It is safe for simultaneous use. Keyed hashes are pooled, so a call does
// not re-derive the HMAC pads from the secret. A Pseudonymiser never
// reveals its secret, even when printed.
type Pseudonymiser struct {
	pool sync.Pool
}

// NewPseudonymiser returns a Pseudonymiser keyed by secret, which must be
// SecretLen bytes long. The secret is copied.
func NewPseudonymiser(secret []byte) (*Pseudonymiser, error) {
	if len(secret) != SecretLen {
		return nil, ErrSecretLength
	}
	key := append([]byte(nil), secret...)
	p := &Pseudonymiser{}
	p.pool.New = func() any { return &keyedHash{h: hmac.New(sha256.New, key)} }
	return p, nil
}

// Pseudonymise returns the pseudonym of an identifier of dimension d. The
// identifier must already be normalised (NormaliseIP, NormaliseIdentifier);
// the tenant-global dimension shares the tenant's pseudonym.
func (p *Pseudonymiser) Pseudonymise(d Dimension, normalised string) string {
	if d == DimensionTenantGlobal {
		d = DimensionTenant
	}
	k := p.pool.Get().(*keyedHash)
	k.h.Reset()
	// One leading byte of domain separation keeps dimensions apart; the
	// message is assembled in a pooled buffer so that no call allocates a
	// copy of the identifier.
	k.buf = append(append(k.buf[:0], byte(d)), normalised...)
	k.h.Write(k.buf)
	clear(k.buf) // no raw identifier lingers in pooled memory
	k.sum = k.h.Sum(k.sum[:0])
	var out [PseudonymLen]byte
	hex.Encode(out[:], k.sum[:PseudonymLen/2])
	p.pool.Put(k)
	return string(out[:])
}

// keyedHash is what the pool holds: an HMAC keyed once, with its message
// and digest buffers.
type keyedHash struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

// String keeps the secret out of logs and %v.
func (p *Pseudonymiser) String() string { return "domain.Pseudonymiser{secret: redacted}" }

// GoString keeps the secret out of %#v.
func (p *Pseudonymiser) GoString() string { return p.String() }

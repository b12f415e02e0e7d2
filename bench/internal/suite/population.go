package suite

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// Secret is the HMAC secret of every Limiter the suite builds (and of the
// pseudonyms in the bare stores' keys): a fixed, public benchmark value.
const Secret = "b3e1c0ffee5eed5a1ce000000000000000000000000000000000000000000ba5"

// Windows of the shapes. Every window is far from its limit at the rates
// these machines reach (a key is visited at most ~100 times a second), so
// that every decision but the hot key's is an admission, the path that
// writes; the hot key's limit is reached at once.
var (
	burstLog     = domain.Window{Name: domain.WindowBurst, Limit: 1000, Period: time.Second, Algorithm: domain.SlidingLog}
	sustainedLog = domain.Window{Name: domain.WindowSustained, Limit: 1000, Period: 10 * time.Second, Algorithm: domain.SlidingLog}
	burstGCRA    = domain.Window{Name: domain.WindowBurst, Limit: 1000, Period: time.Second, Algorithm: domain.GCRA}
	sustainedGCR = domain.Window{Name: domain.WindowSustained, Limit: 1000, Period: 10 * time.Second, Algorithm: domain.GCRA}
	// hotWindow admits 50 requests a second: at tens of thousands of
	// requests a second, more than 99.9 % are refused.
	hotWindow = domain.Window{Name: domain.WindowBurst, Limit: 50, Period: time.Second, Algorithm: domain.GCRA}
	// globalWindow is the hot tenant-global window of the hot-admit
	// shape: GCRA at a unit a microsecond (the finest rate GCRA counts:
	// 1M a second) with a burst of 100 s of it, so that no run reaches
	// it (a measurement starts from an empty server and lasts seconds)
	// and allotments, whose GCRA window gives up a hold's worth of the
	// burst (domain.AllotWindow), stay far from it.
	globalWindow = domain.Window{Name: "hot", Limit: 100_000_000, Period: 100 * time.Second, Algorithm: domain.GCRA}
)

// HotTenant is the tenant every client of the hot-admit shape belongs to:
// its tenant-global window takes every decision.
const HotTenant = "tenant-hot"

// routeKey is the route key of the bare stores' keys: the name of the
// Limiter's nine-window profile, so that both use the very same keys.
const routeKey = "bench"

// Identity is one client of the population: its raw identities, as a
// service hands them to the Limiter, and the keys a bare store is given
// for it in each shape, built as the Limiter builds its own (pseudonymised
// ids, the principal's hash tag, the ip's own for ip windows).
type Identity struct {
	IP                   netip.Addr
	User, Tenant, APIKey string
	// One is the ip's burst key (no tenant: tagged by the ip's pseudonym);
	// Dual ADR-002's rl:{tenant} and rl:{tenant}:user:{user}; Nine four
	// dimensions × burst and sustained, then the tenant-global window, one
	// key per window (the layout of GCRA windows, and of the plain script,
	// which keeps a ZSET per window as a service writes it).
	// BigTenant is Nine for the same ip, user and api key in BigTenant, the
	// one tenant every client of the large-log shape belongs to, so that
	// its tenant and tenant-global windows take every decision.
	One, Dual, Nine, BigTenant []string
	// NineShared and BigTenantShared are Nine and BigTenant in the shared
	// layout of sliding logs (docs/adr/015), window for window: the burst
	// and sustained windows of each principal name one key, its sustained
	// window's (the longer period names the log, as the Limiter names it),
	// and the tenant-global window keeps its own: 9 windows on 5 keys.
	NineShared, BigTenantShared []string
}

// BigTenant is the tenant of every client in the large-log shape.
const BigTenant = "tenant-big"

// Population is the set of clients a run cycles through, plus the hot
// client every worker of the hot-key shape sends.
type Population struct {
	Clients []Identity
	Hot     Identity
}

// hotIndex numbers the hot client apart from any population's.
const hotIndex = 1<<24 - 2

// MaxPopulation is the largest population NewPopulation builds: client i
// has the address 10.x.y.z that spells i in 24 bits.
const MaxPopulation = hotIndex

// NewPopulation builds n clients.
func NewPopulation(n int) (*Population, error) {
	if n < 1 || n > MaxPopulation {
		return nil, fmt.Errorf("suite: population of %d clients, want 1 to %d", n, MaxPopulation)
	}
	secret, err := hex.DecodeString(Secret)
	if err != nil {
		return nil, err
	}
	ps, err := domain.NewPseudonymiser(secret)
	if err != nil {
		return nil, err
	}
	p := &Population{Clients: make([]Identity, n)}
	for i := range p.Clients {
		p.Clients[i] = newIdentity(ps, i)
	}
	p.Hot = newIdentity(ps, hotIndex)
	return p, nil
}

func newIdentity(ps *domain.Pseudonymiser, i int) Identity {
	id := Identity{
		IP:     netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
		User:   fmt.Sprintf("user-%d@example.org", i),
		Tenant: fmt.Sprintf("tenant-%d", i),
		APIKey: fmt.Sprintf("key-%d", i),
	}
	ip, _ := domain.NormaliseIP(id.IP)
	pid := map[domain.Dimension]string{
		domain.DimensionIP:     ps.Pseudonymise(domain.DimensionIP, ip),
		domain.DimensionUser:   ps.Pseudonymise(domain.DimensionUser, id.User),
		domain.DimensionAPIKey: ps.Pseudonymise(domain.DimensionAPIKey, id.APIKey),
		domain.DimensionTenant: ps.Pseudonymise(domain.DimensionTenant, id.Tenant),
	}
	key := func(tag string, d domain.Dimension, window string) string {
		rk, id := routeKey, pid[d]
		switch d {
		case domain.DimensionTenantGlobal:
			rk, id = domain.GlobalRouteKey, tag
		case domain.DimensionTenant:
			id = tag
		case domain.DimensionIP:
			tag = id // an ip window counts per ip whoever sends (docs/adr/013)
		}
		return domain.KeyParts{Tag: tag, Dimension: d, ID: id, RouteKey: rk, Window: window}.Key()
	}
	// nine is the four principals' burst and sustained windows, then the
	// tenant-global one. With shared, both windows of a principal name
	// the key of its sustained window, the one with the longer period in
	// every shape that sends them (NineWindows, largeWindows).
	nine := func(tenant string, shared bool) []string {
		burst := domain.WindowBurst
		if shared {
			burst = domain.WindowSustained
		}
		var keys []string
		for _, d := range []domain.Dimension{domain.DimensionIP, domain.DimensionUser, domain.DimensionAPIKey, domain.DimensionTenant} {
			keys = append(keys, key(tenant, d, burst), key(tenant, d, domain.WindowSustained))
		}
		return append(keys, key(tenant, domain.DimensionTenantGlobal, domain.WindowSustained))
	}
	id.One = []string{key(pid[domain.DimensionIP], domain.DimensionIP, domain.WindowBurst)}
	tenant, big := pid[domain.DimensionTenant], ps.Pseudonymise(domain.DimensionTenant, BigTenant)
	id.Dual = []string{domain.TenantKey(tenant), domain.TenantUserKey(tenant, pid[domain.DimensionUser])}
	id.Nine, id.NineShared = nine(tenant, false), nine(tenant, true)
	id.BigTenant, id.BigTenantShared = nine(big, false), nine(big, true)
	return id
}

// limits pairs keys with windows: windows[i % len(windows)] for key i.
func limits(keys []string, windows ...domain.Window) []domain.Limit {
	out := make([]domain.Limit, len(keys))
	for i, k := range keys {
		out[i] = domain.Limit{Key: k, Window: windows[i%len(windows)], Cost: 1}
	}
	return out
}

// Cursor walks the population for one worker of c: worker w visits
// clients w, w+c, w+2c… (mod n), so that the workers spread over the
// whole population and two of them rarely send the same client at once.
type Cursor struct {
	next, step, n int
}

// NewCursor returns worker w's cursor over n clients.
func NewCursor(w, c, n int) *Cursor { return &Cursor{next: w % n, step: c % n, n: n} }

// Next returns the index of the next client.
func (c *Cursor) Next() int {
	i := c.next
	c.next = (c.next + c.step) % c.n
	if c.step == 0 {
		c.next = (c.next + 1) % c.n
	}
	return i
}

package app

import (
	"net/netip"
	"unsafe"

	"github.com/sluicehq/sluice/domain"
)

// identity is a request's identities, normalised and pseudonymised; ""
// marks one the request does not carry.
type identity struct {
	ip, user, apiKey, tenant string
}

// identify normalises and pseudonymises every identity of req. Every
// identity given is validated, even one the profile does not count, so
// that a malformed request is refused the same way on every route.
func (l *Limiter) identify(req Request) (identity, error) {
	var id identity
	ip, err := l.names.ip(req.ClientIP)
	if err != nil {
		return id, err
	}
	id.ip = ip
	for _, f := range []struct {
		dim domain.Dimension
		raw string
		dst *string
	}{
		{domain.DimensionUser, req.User, &id.user},
		{domain.DimensionAPIKey, req.APIKey, &id.apiKey},
		{domain.DimensionTenant, req.Tenant, &id.tenant},
	} {
		if f.raw == "" {
			continue
		}
		norm, err := domain.NormaliseIdentifier(f.raw)
		if err != nil {
			return id, err
		}
		*f.dst = l.pseudonym(f.dim, norm)
	}
	return id, nil
}

// pseudonym returns the pseudonym of a normalised identifier, from the
// cache when it holds it.
func (l *Limiter) pseudonym(d domain.Dimension, normalised string) string {
	return l.names.get(d, normalised)
}

// tag is the Redis Cluster hash tag of the request's keys (docs/adr/004),
// but for its ip windows (tagOf): the tenant, else the most specific
// principal (user, else api key, else ip). A user's and an api key's
// windows then count the same whatever ip the requests come from.
func (id identity) tag() string {
	for _, t := range [...]string{id.tenant, id.user, id.apiKey} {
		if t != "" {
			return t
		}
	}
	return id.ip
}

// tagOf is the hash tag of dimension d's keys: an ip window is tagged by
// the ip itself, so that it counts per ip across every user, api key and
// tenant (docs/adr/013); every other window by tag.
func (id identity) tagOf(d domain.Dimension) string {
	if d == domain.DimensionIP {
		return id.ip
	}
	return id.tag()
}

// of returns the pseudonym counted for a dimension, "" when absent.
func (id identity) of(d domain.Dimension) string {
	switch d {
	case domain.DimensionIP:
		return id.ip
	case domain.DimensionUser:
		return id.user
	case domain.DimensionAPIKey:
		return id.apiKey
	case domain.DimensionTenant, domain.DimensionTenantGlobal:
		return id.tenant
	}
	return ""
}

// client is who the degraded bypass cap counts: the user, else the api
// key, else the ip.
func (id identity) client() (domain.Dimension, string) {
	switch {
	case id.user != "":
		return domain.DimensionUser, id.user
	case id.apiKey != "":
		return domain.DimensionAPIKey, id.apiKey
	}
	return domain.DimensionIP, id.ip
}

// addProfileKeys adds the limits of p's windows for the identities the
// request carries: its rate windows at cost, and, when held (a
// reservation, or a reset), its concurrency windows at one slot each;
// Evaluate leaves them out (docs/adr/012). Each window's key is the one
// p's layout names (docs/adr/015): the sliding-log windows of a principal
// may share one. The keys are appended to one buffer of their exact
// length, in request order, and cut from it, so that a decision allocates
// once for all of them and the buffer is the keys end to end.
func (ev *evaluation) addProfileKeys(p *profile, id identity, cost int64, held bool) {
	counted := func(w domain.Window) bool { return held || w.Algorithm != domain.Concurrency }
	total := 0
	for d, dw := range p.Dimensions {
		if pid := id.of(dw.Dimension); pid != "" {
			tag := id.tagOf(dw.Dimension)
			for j, w := range dw.Windows {
				if counted(w) {
					total += profileKey(tag, dw.Dimension, pid, p.Name, p.keyWindow(d, j)).Len()
				}
			}
		}
	}
	if total == 0 {
		return
	}
	buf := make([]byte, 0, total)
	var ends [domain.MaxLimits]int
	n := 0
	for d, dw := range p.Dimensions {
		if pid := id.of(dw.Dimension); pid != "" {
			for j, w := range dw.Windows {
				if counted(w) {
					buf = profileKey(id.tagOf(dw.Dimension), dw.Dimension, pid, p.Name, p.keyWindow(d, j)).AppendKey(buf)
					ends[n] = len(buf)
					n++
				}
			}
		}
	}
	// The buffer is never written again: the keys may share it as strings.
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	n0, start, i := ev.n, 0, 0
	for _, dw := range p.Dimensions {
		if id.of(dw.Dimension) == "" {
			continue // the request lacks this identity
		}
		for _, w := range dw.Windows {
			if !counted(w) {
				continue
			}
			c := cost
			if w.Algorithm == domain.Concurrency {
				c = 1 // a request holds one slot, whatever its cost
			}
			ev.add(domain.Limit{Key: all[start:ends[i]], Window: w, Cost: c}, dw.Dimension)
			start, i = ends[i], i+1
		}
	}
	if n0 == 0 {
		// The evaluation's keys are exactly these, in order: fingerprint
		// hashes them in one write.
		ev.keys = all
	}
}

// profileKey is the key of a profile's window for one identity: the
// tenant-global dimension counts under its own route key.
func profileKey(tag string, dim domain.Dimension, pid, route, window string) domain.KeyParts {
	if dim == domain.DimensionTenantGlobal {
		route = domain.GlobalRouteKey
	}
	return domain.KeyParts{Tag: tag, Dimension: dim, ID: pid, RouteKey: route, Window: window}
}

// requestOf is the Request whose keys a reset targets.
func (r ResetRequest) requestOf() Request {
	ip := r.ClientIP
	if !ip.IsValid() {
		// Any address: without one the ip is not part of the reset, and
		// identify needs one to run.
		ip = netip.IPv4Unspecified()
	}
	return Request{ClientIP: ip, User: r.User, Tenant: r.Tenant, APIKey: r.APIKey}
}

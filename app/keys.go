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
	ip, err := domain.NormaliseIP(req.ClientIP)
	if err != nil {
		return id, err
	}
	id.ip = l.pseudonym(domain.DimensionIP, ip)
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

// tag is the Redis Cluster hash tag every key of the request shares
// (docs/adr/004): the tenant, else the most specific principal (user, else
// api key, else ip). A user's and an api key's windows then count the same
// whatever ip the requests come from, and an anonymous request's ip
// windows count per ip.
func (id identity) tag() string {
	for _, t := range [...]string{id.tenant, id.user, id.apiKey} {
		if t != "" {
			return t
		}
	}
	return id.ip
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
// request carries. The keys are appended to one buffer and cut from it, so
// that a decision allocates once for all of them and copies each key once.
func (ev *evaluation) addProfileKeys(p *profile, id identity, cost int64) {
	var parts [domain.MaxLimits]domain.KeyParts
	n, total, tag := 0, 0, id.tag()
	for _, dw := range p.Dimensions {
		pid := id.of(dw.Dimension)
		if pid == "" {
			continue // the request lacks this identity
		}
		route := p.Name
		if dw.Dimension == domain.DimensionTenantGlobal {
			route = domain.GlobalRouteKey
		}
		for _, w := range dw.Windows {
			parts[n] = domain.KeyParts{Tag: tag, Dimension: dw.Dimension, ID: pid, RouteKey: route, Window: w.Name}
			total += parts[n].Len()
			n++
		}
	}
	if n == 0 {
		return
	}
	buf := make([]byte, 0, total)
	for i := range n {
		buf = parts[i].AppendKey(buf)
	}
	// The buffer is never written again: the keys may share it as strings.
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	n0, start, i := ev.n, 0, 0
	for _, dw := range p.Dimensions {
		if id.of(dw.Dimension) == "" {
			continue
		}
		for _, w := range dw.Windows {
			end := start + parts[i].Len()
			ev.add(domain.Limit{Key: all[start:end], Window: w, Cost: cost}, dw.Dimension)
			start, i = end, i+1
		}
	}
	if n0 == 0 {
		// The evaluation's keys are exactly these: fingerprint hashes them
		// in one write.
		ev.keys = all
	}
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

package domain

import "fmt"

// Dimension is what a window is counted per.
type Dimension uint8

const (
	// DimensionNone is the zero value: no dimension.
	DimensionNone Dimension = iota
	// DimensionIP counts per client address (IPv6 grouped by /64).
	DimensionIP
	// DimensionUser counts per authenticated user.
	DimensionUser
	// DimensionAPIKey counts per api key.
	DimensionAPIKey
	// DimensionTenant counts per tenant, per route.
	DimensionTenant
	// DimensionTenantGlobal counts per tenant across every route (route key
	// GlobalRouteKey).
	DimensionTenantGlobal
	// DimensionDescriptor counts per Envoy rate-limit descriptor (the
	// entries of one descriptor, docs/adr/011). Profiles cannot name it:
	// only the Limiter's window entry point (app.Limiter.EvaluateWindows)
	// builds its keys, so Dimensions leaves it out.
	DimensionDescriptor
)

// GlobalRouteKey is the route key of the tenant-global window.
const GlobalRouteKey = "__global__"

// String returns the dimension's name as used in keys, config and labels:
// "ip", "user", "apikey", "tenant", "tenant_global".
func (d Dimension) String() string {
	switch d {
	case DimensionIP:
		return "ip"
	case DimensionUser:
		return "user"
	case DimensionAPIKey:
		return "apikey"
	case DimensionTenant:
		return "tenant"
	case DimensionTenantGlobal:
		return "tenant_global"
	case DimensionDescriptor:
		return "descriptor"
	case DimensionNone:
		return "none"
	}
	return fmt.Sprintf("dimension(%d)", uint8(d))
}

// ParseDimension reads a dimension's name.
func ParseDimension(s string) (Dimension, error) {
	for _, d := range Dimensions() {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, &UnknownNameError{Kind: "dimension", Name: s, Valid: "ip, user, apikey, tenant or tenant_global"}
}

// Dimensions lists every dimension, in key-building order.
func Dimensions() []Dimension {
	return []Dimension{DimensionIP, DimensionUser, DimensionAPIKey, DimensionTenant, DimensionTenantGlobal}
}

// Layer returns the ADR-002 layer a dimension belongs to.
func (d Dimension) Layer() Layer {
	switch d {
	case DimensionTenant, DimensionTenantGlobal:
		return LayerTenant
	case DimensionUser, DimensionAPIKey:
		return LayerUser
	}
	return LayerNone
}

// KeyPrefix starts every store key sluice writes (ADR-002: "rl:").
const KeyPrefix = "rl"

// KeyParts are the parts of one store key. Every part is produced by
// sluice itself (pseudonyms are hex HMACs, route keys are profile names),
// never a raw identifier.
type KeyParts struct {
	// Tag is the Redis Cluster hash tag shared by every key of a decision:
	// the tenant's pseudonym, or for a request without a tenant the client's
	// pseudonym.
	Tag       string
	Dimension Dimension
	// ID is the pseudonymised identifier of the dimension.
	ID string
	// RouteKey is the profile name, or GlobalRouteKey.
	RouteKey string
	// Window is the window's name.
	Window string
}

// Key returns rl:{tag}:dimension:id:routekey:window.
func (k KeyParts) Key() string {
	b := make([]byte, 0, k.Len())
	return string(k.AppendKey(b))
}

// Len returns the length of the key in bytes.
func (k KeyParts) Len() int {
	return len(KeyPrefix) + len(k.Tag) + len(k.Dimension.String()) + len(k.ID) + len(k.RouteKey) + len(k.Window) + 7
}

// AppendKey appends the key to b and returns the extended buffer, so that
// the keys of one decision can share one allocation.
func (k KeyParts) AppendKey(b []byte) []byte {
	b = append(b, KeyPrefix...)
	b = append(b, ":{"...)
	b = append(b, k.Tag...)
	b = append(b, "}:"...)
	b = append(b, k.Dimension.String()...)
	b = append(b, ':')
	b = append(b, k.ID...)
	b = append(b, ':')
	b = append(b, k.RouteKey...)
	b = append(b, ':')
	return append(b, k.Window...)
}

// TenantKey is ADR-002's tenant key: rl:{tenant}.
func TenantKey(tenant string) string { return KeyPrefix + ":{" + tenant + "}" }

// TenantUserKey is ADR-002's user key: rl:{tenant}:user:{user}.
func TenantUserKey(tenant, user string) string {
	return KeyPrefix + ":{" + tenant + "}:user:{" + user + "}"
}

// TenantAPIKeyKey is ADR-002's api-key key: rl:{tenant}:key:{key}.
func TenantAPIKeyKey(tenant, apiKey string) string {
	return KeyPrefix + ":{" + tenant + "}:key:{" + apiKey + "}"
}

package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

func TestKeyFormat(t *testing.T) {
	k := domain.KeyParts{Tag: "t1", Dimension: domain.DimensionUser, ID: "abc", RouteKey: "login", Window: "burst"}
	assert.Equal(t, "rl:{t1}:user:abc:login:burst", k.Key())
	assert.Equal(t, "t1", domain.HashTag(k.Key()))
	assert.Equal(t, "rl:{t1}", domain.TenantKey("t1"))
	assert.Equal(t, "rl:{t1}:user:{u1}", domain.TenantUserKey("t1", "u1"))
	assert.Equal(t, "rl:{t1}:key:{k1}", domain.TenantAPIKeyKey("t1", "k1"))
	assert.Equal(t, domain.Slot(domain.TenantKey("t1")), domain.Slot(domain.TenantUserKey("t1", "u1")),
		"ADR-002 keys of one tenant share a slot")
}

func TestHashTagRules(t *testing.T) {
	// The rules of the Redis Cluster specification.
	cases := map[string]string{
		"{user1000}.following": "user1000",
		"foo{}{bar}":           "foo{}{bar}",
		"foo{{bar}}zap":        "{bar",
		"foo{bar}{zap}":        "bar",
		"plain":                "plain",
		"open{only":            "open{only",
	}
	for key, tag := range cases {
		assert.Equal(t, tag, domain.HashTag(key), key)
	}
}

func TestSlot(t *testing.T) {
	// Reference values from the Redis Cluster specification and CLUSTER
	// KEYSLOT.
	assert.Equal(t, uint16(12739), domain.Slot("123456789"))
	assert.Equal(t, uint16(12182), domain.Slot("foo"))
	assert.Equal(t, domain.Slot("bar"), domain.Slot("{bar}baz"))
	w := domain.Window{Limit: 1, Period: time.Second}
	ok, i := domain.SameSlot([]domain.Limit{{Key: "{a}1", Window: w}, {Key: "{a}2", Window: w}})
	assert.True(t, ok)
	assert.Equal(t, -1, i)
	ok, i = domain.SameSlot([]domain.Limit{{Key: "{a}1", Window: w}, {Key: "{a}2", Window: w}, {Key: "{b}3", Window: w}})
	assert.False(t, ok)
	assert.Equal(t, 2, i)
}

func TestDimensions(t *testing.T) {
	for _, d := range domain.Dimensions() {
		got, err := domain.ParseDimension(d.String())
		assert.NoError(t, err)
		assert.Equal(t, d, got)
	}
	_, err := domain.ParseDimension("device")
	assert.Error(t, err)
	assert.Equal(t, domain.LayerTenant, domain.DimensionTenantGlobal.Layer())
	assert.Equal(t, domain.LayerUser, domain.DimensionAPIKey.Layer())
	assert.Equal(t, domain.LayerNone, domain.DimensionIP.Layer())
}

func TestErrorsCarryCodes(t *testing.T) {
	ce := &domain.ConfigError{Field: "hmac_secret", Reason: "required"}
	assert.ErrorIs(t, ce, domain.ErrInvalidConfig)
	assert.Equal(t, domain.CodeInvalidConfig, domain.CodeOf(ce))
	assert.Contains(t, ce.Error(), "ERR-172-05")
	assert.Contains(t, ce.Error(), "hmac_secret")
	assert.Equal(t, domain.CodeStoreTimeout, domain.CodeOf(domain.ErrStoreTimeout))
	assert.Equal(t, domain.CodeCrossSlot, domain.CodeOf(domain.ErrCrossSlot))
	assert.Equal(t, domain.CodeStoreUnavailable, domain.CodeOf(domain.ErrStoreClosed))
	assert.Equal(t, domain.Code(""), domain.CodeOf(nil))
}

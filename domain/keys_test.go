package domain_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

func TestKeyFormat(t *testing.T) {
	k := domain.KeyParts{Tag: "t1", Dimension: domain.DimensionUser, ID: "abc", RouteKey: "login", Window: "burst"}
	assert.Equal(t, "rl:{t1}:user:abc:login:burst", k.Key())
	assert.Equal(t, "rl:{t1}", domain.TenantKey("t1"))
	assert.Equal(t, "rl:{t1}:user:{u1}", domain.TenantUserKey("t1", "u1"))
	assert.Equal(t, "rl:{t1}:key:{k1}", domain.TenantAPIKeyKey("t1", "k1"))
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

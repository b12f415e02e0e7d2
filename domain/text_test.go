package domain_test

import (
	"encoding"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func TestEnumsRoundTripThroughText(t *testing.T) {
	type textual interface {
		encoding.TextMarshaler
	}
	cases := []struct {
		v    textual
		into encoding.TextUnmarshaler
		name string
	}{
		{domain.SlidingLog, new(domain.Algorithm), "sliding_log"},
		{domain.GCRA, new(domain.Algorithm), "gcra"},
		{domain.FamilyAuth, new(domain.RouteFamily), "auth"},
		{domain.ActionLocal, new(domain.DegradedAction), "local"},
		{domain.DimensionAPIKey, new(domain.Dimension), "apikey"},
		{domain.DimensionTenantGlobal, new(domain.Dimension), "tenant_global"},
	}
	for _, c := range cases {
		b, err := c.v.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, c.name, string(b))
		require.NoError(t, c.into.UnmarshalText(b))
		assert.Equal(t, c.v, deref(c.into))
	}
}

func deref(v encoding.TextUnmarshaler) any {
	switch p := v.(type) {
	case *domain.Algorithm:
		return *p
	case *domain.RouteFamily:
		return *p
	case *domain.DegradedAction:
		return *p
	case *domain.Dimension:
		return *p
	}
	return nil
}

func TestEnumsRefuseUnknownNames(t *testing.T) {
	var a domain.Algorithm
	assert.ErrorContains(t, a.UnmarshalText([]byte("leaky")), "want sliding_log, gcra or concurrency")
	var f domain.RouteFamily
	assert.ErrorContains(t, f.UnmarshalText([]byte("write")), "want read, auth or costly")
	var d domain.DegradedAction
	assert.ErrorContains(t, d.UnmarshalText([]byte("allow")), "want bypass, deny or local")
	var dim domain.Dimension
	assert.ErrorContains(t, dim.UnmarshalText([]byte("device")), "want ip, user")
	_, err := domain.Algorithm(7).MarshalText()
	assert.Error(t, err)
}

package envoyrls_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/domain"
)

// TestLoadEnvoyproxyExamples: envoyproxy/ratelimit's documented examples
// load as they are, from the directory, one domain per file.
func TestLoadEnvoyproxyExamples(t *testing.T) {
	cfg, err := envoyrls.LoadConfig("testdata/envoyproxy")
	require.NoError(t, err)
	assert.Equal(t, []string{"edge_proxy_per_path", "example10", "example10_wildcard", "example11", "example11_metrics",
		"example5", "example6", "example7", "example8", "example9", "messaging", "mongo_cps"}, cfg.Domains())
	// Example 9: a '*' anywhere in a value.
	checkLookups(t, cfg, "example9", []lookupCase{
		{kv("key1", "valueXYZ"), "example9.key1_value*", 20, "MINUTE"},
		{kv("path", "/api/123/action"), "example9.path_/api/*/action", 20, "MINUTE"},
		{kv("path", "/api/user-id/action"), "example9.path_/api/*/action", 20, "MINUTE"},
		{kv("path", "/api/123/other"), "", 0, ""},
		{kv("route", "/api/v1/resource/123/action"), "example9.route_/api/*/resource/*/action", 20, "MINUTE"},
		{kv("route", "/api/v1/other/123/action"), "", 0, ""},
	})
	checkLookups(t, cfg, "example10_wildcard", []lookupCase{
		{kv("user", "alice", "action", "readfile", "resource", "documents"), "example10_wildcard.user.action_read*.resource", 100, "MINUTE"},
	})
	cfg, err = envoyrls.LoadConfig("testdata/sluice/shared.yaml")
	require.NoError(t, err)
	assert.Equal(t, []string{"shared"}, cfg.Domains())
}

// TestConfigErrors: every refused configuration is a *domain.ConfigError
// naming the field.
func TestConfigErrors(t *testing.T) {
	cases := []struct {
		file  string
		field string
		is    error
	}{
		{"unlimited.yaml", "internal.descriptors[0].rate_limit.unlimited", envoyrls.ErrUnlimited},
		{"example3-blocklist.yaml", "edge_proxy_per_ip.descriptors[1].rate_limit.requests_per_unit", nil},
		{"unknown-field.yaml", "request_per_unit", envoyrls.ErrUnknownField},
		{"bad-unit.yaml", "bad_unit.descriptors[0].rate_limit.unit", nil},
		{"bad-algorithm.yaml", "bad_algorithm.descriptors[0].rate_limit.algorithm", nil},
		{"bad-allotments.yaml", "bad_allotments.descriptors[0].rate_limit.allotments", nil},
		{"bad-degraded.yaml", "bad_degraded.degraded", nil},
		{"sliding-log-too-large.yaml", "huge.descriptors[0].rate_limit.requests_per_unit", nil},
		{"missing-key.yaml", "no_key.descriptors[0].key", nil},
		{"missing-domain.yaml", "domain", nil},
		{"bad-ceiling.yaml", "bad_ceiling.limit_override_ceiling.requests_per_unit", nil},
		{"replaces-without-name.yaml", "bad_replaces.descriptors[0].replaces[0].name", nil},
		{"unscoped-without-tag.yaml", "bad_unscoped.unscoped_keys[0]", nil},
		{"unscoped-tag-key.yaml", "bad_unscoped_tag.unscoped_keys[1]", nil},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			_, err := envoyrls.LoadConfig(filepath.Join("testdata/invalid", c.file))
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, c.field, ce.Field)
			assert.ErrorIs(t, err, domain.ErrInvalidConfig)
			if c.is != nil {
				assert.ErrorIs(t, err, c.is)
			}
		})
	}
}

// TestDuplicateDomains: one domain in two files, or two domains that
// would share a route key (and so keys), are refused.
func TestDuplicateDomains(t *testing.T) {
	a, err := os.ReadFile("testdata/envoyproxy/example1.yaml")
	require.NoError(t, err)
	_, err = envoyrls.ParseConfig(a, a)
	assert.ErrorIs(t, err, envoyrls.ErrDuplicateDomain)
	_, err = envoyrls.ParseConfig([]byte("domain: a.b\n"), []byte("domain: a_b\n"))
	assert.ErrorIs(t, err, envoyrls.ErrDuplicateDomain)
	_, err = envoyrls.LoadConfig("testdata/none")
	assert.True(t, errors.Is(err, domain.ErrInvalidConfig))
}

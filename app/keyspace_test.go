package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisKeyspaceHoldsNoRawIdentifier drives every path that writes to
// the store (the nine-key pipeline, an anonymous route, both ADR-002
// façades with a user and an api key) against a dedicated real Redis, then
// reads the whole keyspace back: every key is sluice's (rl:{…}), carries a
// TTL, and holds no raw identifier in any form.
func TestRedisKeyspaceHoldsNoRawIdentifier(t *testing.T) {
	srv := redistest.NewServer(t)
	s, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second, Time: redis.CallerTime})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	cfg := testConfig()
	cfg.StoreTimeout = 2 * time.Second
	r := newRigWith(t, cfg, newFaulty(s), newLocal(t))

	assert.Equal(t, domain.Allowed, r.eval(t, fullRequest(routeRead)).State)
	assert.Equal(t, domain.Allowed, r.eval(t, app.Request{Route: routeLogin, ClientIP: rawIP}).State)
	ok, _, _, err := r.l.AllowDual(rawTenant, 10, rawUser, 10)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, _, _, err = r.l.AllowDual(rawTenant, 10, app.APIKeyPrefix+rawAPIKey, 10)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, _, err = r.l.Allow(rawUser, 10)
	require.NoError(t, err)
	assert.True(t, ok)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	cursor := "0"
	for {
		v, err := redistest.Do(ctx, srv.Addr(), "SCAN", cursor, "COUNT", "1000")
		require.NoError(t, err)
		page := v.([]any)
		for _, k := range page[1].([]any) {
			keys = append(keys, k.(string))
		}
		if cursor = page[0].(string); cursor == "0" {
			break
		}
	}
	// 6 pipeline keys (shared logs, docs/adr/015: one log for the
	// ip's, the api key's and the tenant's burst and sustained, the
	// user's burst log and GCRA sustained key, the tenant-global log), 1
	// for the anonymous login (its ip log), 2 + 1 for the façades (one
	// tenant key shared by both AllowDual calls, a user key, an api-key
	// key) and 1 for Allow.
	require.Len(t, keys, 6+1+3+1, "keys: %q", keys)
	assertNoRawIdentifier(t, keys)
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, domain.KeyPrefix+":{"), "key %q is not sluice's", k)
		pttl, err := redistest.Do(ctx, srv.Addr(), "PTTL", k)
		require.NoError(t, err)
		assert.Greater(t, pttl.(int64), int64(0), "key %q has no TTL", k)
	}
}

package redis_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
)

// TestMalformedURLErrorHoldsNoPassword: a URL that does not parse is a
// boot error, which goes to logs; the parser quotes the whole URL, so the
// store must not pass its message on as is.
func TestMalformedURLErrorHoldsNoPassword(t *testing.T) {
	const secret = "S3cret-Pw-42"
	for _, u := range []string{
		"redis://:" + secret + "@127.0.0.1:notaport",
		"redis://sluice:" + secret + "@bad host:6379",
		"rediss://:" + secret + "@127.0.0.1:6379/notadb",
		"redis://user:" + secret + "@[::1",
	} {
		for name, err := range map[string]error{
			"Validate": redis.Config{URL: u}.Validate(),
			"New":      func() error { _, err := redis.New(redis.Config{URL: u}); return err }(),
		} {
			var ce *domain.ConfigError
			require.True(t, errors.As(err, &ce), "%s(%q): %v", name, u, err)
			assert.Equal(t, "redis.url", ce.Field)
			assert.NotContains(t, err.Error(), secret, "%s prints the password", name)
			assert.True(t, strings.HasPrefix(ce.Reason, "not a redis URL"), ce.Reason)
		}
	}
}

// TestURLWithoutAHostIsRefused (38.3): "redis:6379", the peer's
// host:port of a host named redis, parses as the scheme redis with no
// host, which the client would dial as localhost:6379. Any URL that names
// no host is refused, never dialled elsewhere; no password is printed.
func TestURLWithoutAHostIsRefused(t *testing.T) {
	for _, u := range []string{"redis:6379", "rediss:6380", "redis://", "redis://:S3cret-Pw-42@/0", "redis:S3cret-Pw-42@redis:6379"} {
		err := redis.Config{URL: u}.Validate()
		var ce *domain.ConfigError
		require.True(t, errors.As(err, &ce), "%q: %v", u, err)
		assert.Equal(t, "redis.url", ce.Field)
		assert.NotContains(t, err.Error(), "S3cret-Pw-42")
	}
	require.NoError(t, redis.Config{URL: "unix:///var/run/redis.sock"}.Validate(), "a socket has a path, no host")
	require.NoError(t, redis.Config{URL: "redis://redis:6379"}.Validate())
}

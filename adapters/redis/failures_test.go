package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
)

// TestForeignTypeIsARequestFault is issue 22 item 3 at the store: a key
// of a request holding a LIST, HASH, SET or STREAM made the call fail as
// store unavailable (counted toward the breaker). It is a
// *domain.StoreValueError naming the limit and its key; the other keys of
// the call are untouched, and another request is served as usual.
func TestForeignTypeIsARequestFault(t *testing.T) {
	w := domain.Window{Name: "w", Limit: 5, Period: time.Minute}
	for _, topo := range topologies {
		for typ, write := range map[string][]string{
			"list": {"RPUSH", "", "x"}, "hash": {"HSET", "", "f", "v"}, "set": {"SADD", "", "m"}, "stream": {"XADD", "", "*", "f", "v"},
		} {
			t.Run(topo.name+"/"+typ, func(t *testing.T) {
				cfg := topo.cfg(t)
				s := newStore(t, cfg)
				tg := tag(t)
				limits := []domain.Limit{
					{Key: fmt.Sprintf("rl:{%s}:ok", tg), Window: w, Cost: 1},
					{Key: fmt.Sprintf("rl:{%s}:foreign", tg), Window: w, Cost: 1},
				}
				write[1] = limits[1].Key
				_, err := s.Client().Do(context.Background(), s.Client().B().Arbitrary(write[0]).Keys(write[1]).Args(write[2:]...).Build()).ToAny()
				require.NoError(t, err)
				_, err = s.Evaluate(context.Background(), time.Now(), limits)
				var sve *domain.StoreValueError
				require.True(t, errors.As(err, &sve), "got %v", err)
				assert.Equal(t, 1, sve.Index)
				assert.Equal(t, limits[1].Key, sve.Key)
				assert.Equal(t, domain.CodeStoreValue, domain.CodeOf(err))
				assert.NotErrorIs(t, err, domain.ErrStoreUnavailable, "not an outage")
				res, err := s.Evaluate(context.Background(), time.Now(), limits[:1])
				require.NoError(t, err)
				assert.Equal(t, int64(4), res.Remaining, "the other key was not written by the refused call")
			})
		}
	}
}

func TestMaxRedirectionsValidated(t *testing.T) {
	err := redis.Config{Addrs: []string{"127.0.0.1:1"}, MaxRedirections: -1}.Validate()
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "redis.max_redirections", ce.Field)
}

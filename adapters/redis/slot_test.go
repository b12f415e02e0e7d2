package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

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
		assert.Equal(t, tag, hashTag(key), key)
	}
}

func TestSlot(t *testing.T) {
	// Reference values from the Redis Cluster specification and CLUSTER
	// KEYSLOT.
	assert.Equal(t, uint16(12739), Slot("123456789"))
	assert.Equal(t, uint16(12182), Slot("foo"))
	assert.Equal(t, Slot("bar"), Slot("{bar}baz"))
	assert.Equal(t, Slot(domain.TenantKey("t1")), Slot(domain.TenantUserKey("t1", "u1")),
		"ADR-002 keys of one tenant share a slot")
	w := domain.Window{Limit: 1, Period: time.Second}
	ok, i := sameSlot([]domain.Limit{{Key: "{a}1", Window: w}, {Key: "{a}2", Window: w}})
	assert.True(t, ok)
	assert.Equal(t, -1, i)
	ok, i = sameSlot([]domain.Limit{{Key: "{a}1", Window: w}, {Key: "{a}2", Window: w}, {Key: "{b}3", Window: w}})
	assert.False(t, ok)
	assert.Equal(t, 2, i)
}

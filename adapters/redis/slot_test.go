package redis

import (
	"strconv"
	"strings"
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

// TestSameSlotAcrossTags: keys of one tag share a slot without a CRC, but
// keys of two tags are compared by slot, not by tag: two tags that land in
// one slot may share a call, as Redis Cluster allows.
func TestSameSlotAcrossTags(t *testing.T) {
	w := domain.Window{Limit: 1, Period: time.Second}
	// Another tag in tag "a"'s slot, found by search.
	var twin string
	for i := 0; twin == ""; i++ {
		if c := "t" + strconv.Itoa(i); Slot(c) == Slot("a") {
			twin = c
		}
	}
	cases := []struct {
		name  string
		keys  []string
		ok    bool
		index int
	}{
		{"one key", []string{"{a}1"}, true, -1},
		{"one tag", []string{"{a}1", "{a}2", "{a}3"}, true, -1},
		{"two tags, one slot", []string{"{a}1", "{" + twin + "}2", "{a}3"}, true, -1},
		{"no tag, the key's own slot", []string{"a", "{a}2"}, true, -1},
		{"another slot after a twin", []string{"{a}1", "{" + twin + "}2", "{b}3"}, false, 2},
		{"another slot first", []string{"{a}1", "{b}2", "{a}3"}, false, 1},
	}
	for _, tc := range cases {
		limits := make([]domain.Limit, len(tc.keys))
		for i, k := range tc.keys {
			limits[i] = domain.Limit{Key: k, Window: w}
		}
		ok, i := sameSlot(limits)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.index, i, tc.name)
	}
}

// BenchmarkSameSlot checks a nine-key request of one tag, as the Limiter
// builds it (docs/adr/004), before every call.
//
//	go test -run '^$' -bench SameSlot -benchmem ./adapters/redis/
func BenchmarkSameSlot(b *testing.B) {
	tag, id := strings.Repeat("d", domain.PseudonymLen), strings.Repeat("a", domain.PseudonymLen)
	w := domain.Window{Limit: 1000, Period: time.Second}
	var limits []domain.Limit
	for _, dim := range []string{"ip", "user", "apikey", "tenant"} {
		for _, win := range []string{"burst", "sustained"} {
			limits = append(limits, domain.Limit{Key: "rl:{" + tag + "}:" + dim + ":" + id + ":read:" + win, Window: w, Cost: 1})
		}
	}
	limits = append(limits, domain.Limit{Key: "rl:{" + tag + "}:tenant_global:" + tag + ":__global__:burst", Window: w, Cost: 1})
	for b.Loop() {
		if ok, _ := sameSlot(limits); !ok {
			b.Fatal("one tag, two slots")
		}
	}
}

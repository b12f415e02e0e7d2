package app

import (
	"bytes"
	"hash/maphash"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

// TestFingerprintKeysInOneWrite: the Limiter hashes a key set's keys in one
// write of the string they were cut from (evaluation.keys); any other
// evaluation writes them one by one. Both must give one sum, or the
// coalescer and the refusal cache would miss the same key set reached by
// the two paths; and keys cut at other places must not.
func TestFingerprintKeysInOneWrite(t *testing.T) {
	seed := maphash.MakeSeed()
	w := domain.Window{Name: "w", Limit: 10, Period: time.Second, Algorithm: domain.SlidingLog}
	build := func(keys ...string) *evaluation {
		ev := &evaluation{}
		for _, k := range keys {
			ev.add(domain.Limit{Key: k, Window: w, Cost: 1}, domain.DimensionUser)
		}
		return ev
	}
	cut := func(ev *evaluation) *evaluation {
		for i := range ev.n {
			ev.keys += ev.limits[i].Key
		}
		return ev
	}
	oneByOne := build("rl:{t}:user:a:r:w", "rl:{t}:user:a:r:x", "rl:{t}:tenant:t:r:w")
	inOne := cut(build("rl:{t}:user:a:r:w", "rl:{t}:user:a:r:x", "rl:{t}:tenant:t:r:w"))
	assert.NotEmpty(t, inOne.keys)
	assert.Equal(t, fingerprint(seed, oneByOne), fingerprint(seed, inOne), "one write and many give one sum")

	assert.NotEqual(t, fingerprint(seed, cut(build("k:ab", "c"))), fingerprint(seed, cut(build("k:a", "bc"))),
		"the same bytes cut at another place are another key set")
	other := build("rl:{t}:user:a:r:w", "rl:{t}:user:a:r:x", "rl:{t}:tenant:t:r:w")
	other.limits[2].Window.Limit = 11
	assert.NotEqual(t, fingerprint(seed, oneByOne), fingerprint(seed, other), "a window's limit is part of the key set")
	other = build("rl:{t}:user:a:r:w", "rl:{t}:user:a:r:x", "rl:{t}:tenant:t:r:w")
	other.limits[0].Cost = 2
	assert.NotEqual(t, fingerprint(seed, oneByOne), fingerprint(seed, other), "a cost is part of the key set")
}

// TestAddProfileKeysSetsKeys: the keys string addProfileKeys leaves is
// exactly its limits' keys end to end, and an add after it clears it.
func TestAddProfileKeysSetsKeys(t *testing.T) {
	w := domain.Window{Name: "burst", Limit: 10, Period: time.Second, Algorithm: domain.GCRA}
	p := &profile{RouteProfile: domain.RouteProfile{Name: "items", Dimensions: []domain.DimensionWindows{
		{Dimension: domain.DimensionIP, Windows: []domain.Window{w}},
		{Dimension: domain.DimensionUser, Windows: []domain.Window{w, {Name: "sustained", Limit: 100, Period: time.Minute}}},
		{Dimension: domain.DimensionTenant, Windows: []domain.Window{w}},
	}}}
	var ev evaluation
	ev.addProfileKeys(p, identity{ip: "ip1", user: "u1"}, 1, false)
	assert.Equal(t, 3, ev.n, "no tenant: its window is left out")
	var all string
	for i := range ev.n {
		tag := map[domain.Dimension]string{domain.DimensionIP: "ip1", domain.DimensionUser: "u1"}[ev.dims[i]]
		assert.Equal(t, ev.limits[i].Key, domain.KeyParts{Tag: tag, Dimension: ev.dims[i], ID: map[domain.Dimension]string{
			domain.DimensionIP: "ip1", domain.DimensionUser: "u1"}[ev.dims[i]], RouteKey: "items", Window: ev.limits[i].Window.Name}.Key())
		all += ev.limits[i].Key
	}
	assert.Equal(t, all, ev.keys)
	ev.add(domain.Limit{Key: "k", Window: w, Cost: 1}, domain.DimensionIP)
	assert.Empty(t, ev.keys)
}

// BenchmarkFingerprint hashes a nine-key decision's key set, as the
// coalescer does for every decision it sees.
//
//	go test -run '^$' -bench Fingerprint -benchmem ./app/
func BenchmarkFingerprint(b *testing.B) {
	w := domain.Window{Name: "burst", Limit: 10, Period: time.Second, Algorithm: domain.GCRA}
	p := &profile{RouteProfile: domain.RouteProfile{Name: "items"}}
	for _, d := range []domain.Dimension{domain.DimensionIP, domain.DimensionUser, domain.DimensionAPIKey, domain.DimensionTenant} {
		p.Dimensions = append(p.Dimensions, domain.DimensionWindows{Dimension: d, Windows: []domain.Window{w, {Name: "sustained", Limit: 100, Period: time.Minute}}})
	}
	p.Dimensions = append(p.Dimensions, domain.DimensionWindows{Dimension: domain.DimensionTenantGlobal, Windows: []domain.Window{w}})
	pseudo := func(c byte) string { return string(bytes.Repeat([]byte{c}, domain.PseudonymLen)) }
	var ev evaluation
	ev.addProfileKeys(p, identity{ip: pseudo('a'), user: pseudo('b'), apiKey: pseudo('c'), tenant: pseudo('d')}, 1, false)
	if ev.n != 9 {
		b.Fatalf("%d keys", ev.n)
	}
	seed := maphash.MakeSeed()
	b.Run("cut", func(b *testing.B) {
		for b.Loop() {
			fingerprint(seed, &ev)
		}
	})
	b.Run("one-by-one", func(b *testing.B) {
		ev := ev
		ev.keys = ""
		for b.Loop() {
			fingerprint(seed, &ev)
		}
	})
}

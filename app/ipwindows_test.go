package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// ipConfig is the search route: ip burst 20 per 1 s, and a user
// window of 5 per 1 s.
func ipConfig() app.Config {
	return app.Config{
		HMACSecret: testSecret,
		InstanceID: "test-ip",
		Profiles: []app.ProfileConfig{{
			Name: "search", Family: domain.FamilyRead, Routes: []string{"GET /search"},
			Windows: app.WindowsConfig{
				IP:     []app.WindowConfig{{Name: "burst", Limit: 20, Period: time.Second}},
				User:   []app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}},
				APIKey: []app.WindowConfig{{Name: "burst", Limit: 5, Period: time.Second}},
				Tenant: []app.WindowConfig{{Name: "burst", Limit: 50, Period: time.Second}},
			},
		}},
	}
}

// ipBackends are the primary stores of the ip-window tests: the
// conformance reference store (one partition: one call per decision) and
// a partitioned Reserver (each hash tag its own partition, as a cluster's
// slots: decisions span two).
func ipBackends() []struct {
	name string
	new  func() ports.Store
} {
	return []struct {
		name string
		new  func() ports.Store
	}{
		{"reference", conformance.NewReferenceStore},
		{"partitioned", func() ports.Store { return newMemReserver(true) }},
	}
}

// TestIPWindowBoundsTheIPAcrossIdentities is the regression test of issue
// 18's ip finding: one address that changes its user id (or api key, or
// tenant) on every request passed its ip limit once per identity, since
// the ip window was keyed under the principal's tag. An ip window now
// counts per ip whoever sends: exactly 20 of 200 pass in one second.
func TestIPWindowBoundsTheIPAcrossIdentities(t *testing.T) {
	rotations := []struct {
		name string
		req  func(i int) app.Request
	}{
		{"user", func(i int) app.Request { return app.Request{User: fmt.Sprintf("user-%d", i)} }},
		{"api key", func(i int) app.Request { return app.Request{APIKey: fmt.Sprintf("key-%d", i)} }},
		{"tenant and user", func(i int) app.Request {
			return app.Request{Tenant: fmt.Sprintf("t-%d", i), User: fmt.Sprintf("user-%d", i)}
		}},
		{"anonymous and not", func(i int) app.Request {
			if i%2 == 0 {
				return app.Request{}
			}
			return app.Request{User: fmt.Sprintf("user-%d", i)}
		}},
	}
	for _, b := range ipBackends() {
		for _, rot := range rotations {
			t.Run(b.name+"/"+rot.name, func(t *testing.T) {
				r := newRigOn(t, ipConfig(), b.new())
				passed := 0
				for i := range 200 {
					req := rot.req(i)
					req.Route, req.ClientIP = "GET /search", rawIP
					d := r.eval(t, req)
					require.False(t, d.Degraded, "decided by the primary store: %+v", d)
					if d.State == domain.Allowed {
						passed++
					} else {
						assert.Equal(t, domain.DimensionIP, d.LimitingDimension)
					}
				}
				assert.Equal(t, 20, passed, "the ip's limit, whatever identities it rotates")
				r.clock.Advance(time.Second)
				d := r.eval(t, app.Request{Route: "GET /search", ClientIP: rawIP, User: "fresh"})
				assert.Equal(t, domain.Allowed, d.State, "the window slides")
			})
		}
	}
}

// newRigOn is a rig on any primary store, with a reference fallback.
func newRigOn(t *testing.T, cfg app.Config, primary ports.Store) *reserveRig {
	t.Helper()
	var fallback ports.Store = conformance.NewReferenceStore()
	if _, ok := primary.(*memReserver); ok {
		fallback = newMemReserver(false)
	}
	return newReserveRig(t, cfg, primary, fallback)
}

func (r *reserveRig) eval(t *testing.T, req app.Request) domain.Decision {
	t.Helper()
	d, err := r.l.Evaluate(context.Background(), req)
	require.NoError(t, err)
	return d
}

// TestSplitRefusalConsumesNothingAnywhere: on a partitioned store, the ip
// side and the principal's side are reserved apart; when one refuses, the
// other is released: no key holds a unit of a refused request.
func TestSplitRefusalConsumesNothingAnywhere(t *testing.T) {
	store := newMemReserver(true)
	r := newRigOn(t, ipConfig(), store)
	req := app.Request{Route: "GET /search", ClientIP: rawIP, User: "bob"}
	for range 5 {
		require.Equal(t, domain.Allowed, r.eval(t, req).State)
	}
	keys := store.keys()
	require.Len(t, keys, 2, "the ip's key and bob's")
	ipKey, userKey := keys[0], keys[1]
	if dimOf(ipKey) != domain.DimensionIP {
		ipKey, userKey = userKey, ipKey
	}
	require.NotEqual(t, hashTag(ipKey), hashTag(userKey), "two partitions")
	settles := store.calls[ports.OpSettle].Load()

	// bob's window refuses: the ip side admitted and is given back.
	d := r.eval(t, req)
	assert.Equal(t, domain.Throttled, d.State)
	assert.Equal(t, domain.DimensionUser, d.LimitingDimension)
	assert.Equal(t, int64(5), store.keyUnits(ipKey, r.clock.Now(), time.Second), "the ip keeps 5")
	assert.Equal(t, int64(5), store.keyUnits(userKey, r.clock.Now(), time.Second))
	assert.Equal(t, settles+1, store.calls[ports.OpSettle].Load(), "one release")
	// The decision lists every window in request order, the ip's as
	// before the refused request.
	require.Equal(t, 2, d.Windows.Len())
	assert.Equal(t, domain.DimensionIP, d.Windows.All()[0].Dimension)
	assert.Equal(t, int64(15), d.Windows.All()[0].Remaining)
	assert.True(t, d.Windows.All()[0].Allowed)

	// 15 others fill the ip; the 16th refuses on the ip and its user
	// side is released.
	for i := range 15 {
		require.Equal(t, domain.Allowed, r.eval(t, app.Request{Route: "GET /search", ClientIP: rawIP, User: fmt.Sprint("u", i)}).State)
	}
	d = r.eval(t, app.Request{Route: "GET /search", ClientIP: rawIP, User: "carol"})
	assert.Equal(t, domain.Throttled, d.State)
	assert.Equal(t, domain.DimensionIP, d.LimitingDimension)
	assert.Len(t, store.keys(), 1+1+15, "the ip, bob and the 15: carol's refused request left nothing")
	assert.Equal(t, int64(20), store.keyUnits(ipKey, r.clock.Now(), time.Second))
}

// TestSplitStoreErrorOnOneSide: when one partition fails, the decision is
// degraded as for any store error, and the side that admitted is
// released.
func TestSplitStoreErrorOnOneSide(t *testing.T) {
	store := newMemReserver(true)
	cfg := ipConfig()
	cfg.Degraded.Read = domain.ActionDeny
	r := newRigOn(t, cfg, store)
	req := app.Request{Route: "GET /search", ClientIP: rawIP, User: "dave"}
	require.Equal(t, domain.Allowed, r.eval(t, req).State)
	keys := store.keys()
	require.Len(t, keys, 2)
	ipKey, userKey := keys[0], keys[1]
	if dimOf(ipKey) != domain.DimensionIP {
		ipKey, userKey = userKey, ipKey
	}
	store.mu.Lock()
	store.failTag = hashTag(userKey)
	store.mu.Unlock()

	d := r.eval(t, req)
	assert.Equal(t, domain.DeniedDegraded, d.State)
	assert.True(t, d.Degraded)
	assert.Equal(t, domain.CauseStoreUnavailable, d.Cause)
	assert.Equal(t, int64(1), store.keyUnits(ipKey, r.clock.Now(), time.Second), "the ip side was released")
	assert.ErrorIs(t, r.rec.last().Err, domain.ErrStoreUnavailable)
	ops := map[ports.StoreOp]int{}
	for _, c := range r.rec.StoreCalls() {
		ops[c.Op]++
	}
	assert.Equal(t, map[ports.StoreOp]int{ports.OpReserve: 4, ports.OpSettle: 1}, ops, "every side's call recorded")
}

// TestSplitRefusalIsRemembered: a refusal decided across partitions is
// repeated by the refusal cache as a one-call refusal is (docs/adr/013):
// its limiting window refused on its own side, the others hold nothing
// once released, so until its retry-after the store could only refuse.
// The repeat calls no store and consumes nothing; once the window slides,
// the store decides again.
func TestSplitRefusalIsRemembered(t *testing.T) {
	store := newMemReserver(true)
	r := newRigOn(t, ipConfig(), store)
	req := app.Request{Route: "GET /search", ClientIP: rawIP, User: "erin"}
	for range 5 {
		require.Equal(t, domain.Allowed, r.eval(t, req).State)
	}
	d := r.eval(t, req)
	require.Equal(t, domain.Throttled, d.State)
	require.Equal(t, domain.SourcePrimary, d.Source)
	reserves, settles := store.calls[ports.OpReserve].Load(), store.calls[ports.OpSettle].Load()
	for range 10 {
		d = r.eval(t, req)
		assert.Equal(t, domain.Throttled, d.State)
		assert.Equal(t, domain.SourceRefusalCache, d.Source)
		assert.Equal(t, domain.DimensionUser, d.LimitingDimension)
	}
	assert.Equal(t, reserves, store.calls[ports.OpReserve].Load(), "no store call")
	assert.Equal(t, settles, store.calls[ports.OpSettle].Load())
	p, err := r.l.Peek(context.Background(), app.Request{Route: "GET /search", ClientIP: rawIP})
	require.NoError(t, err)
	assert.Equal(t, int64(15), p.Remaining, "the ip holds erin's 5 admitted requests only")
	r.clock.Advance(d.RetryAfter)
	d = r.eval(t, req)
	assert.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, domain.SourcePrimary, d.Source)
}

package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ports"
)

// Routes of reserveConfig.
const (
	routeExports = "GET /exports"
	routeReports = "GET /reports"
	routeSlow    = "GET /slow"
)

// reserveConfig has a charged route (settle rules, cost 5 of a user
// window of 10 per minute), a route with a concurrency window of 2 (lease
// TTL 30 s) beside a rate window, and one with a concurrency window only.
func reserveConfig() app.Config {
	return app.Config{
		HMACSecret: testSecret,
		InstanceID: "test-reserve",
		Profiles: []app.ProfileConfig{
			{
				Name: "exports", Family: domain.FamilyCostly, Routes: []string{routeExports}, Cost: 5,
				Windows: app.WindowsConfig{User: []app.WindowConfig{{Name: "sustained", Limit: 10, Period: time.Minute}}},
				Settle:  &app.SettleConfig{RefundFailures: true, CostHeader: "X-Cost", RefundStatuses: []int{409}, RefundCodes: []string{"AlreadyExists"}},
			},
			{
				Name: "reports", Family: domain.FamilyRead, Routes: []string{routeReports},
				Windows: app.WindowsConfig{User: []app.WindowConfig{
					{Name: "burst", Limit: 100, Period: time.Minute},
					{Name: "inflight", Limit: 2, Period: 30 * time.Second, Algorithm: domain.Concurrency},
				}},
			},
			{
				Name: "slow", Family: domain.FamilyRead, Routes: []string{routeSlow},
				Windows: app.WindowsConfig{IP: []app.WindowConfig{{Name: "inflight", Limit: 1, Period: 10 * time.Second, Algorithm: domain.Concurrency}}},
			},
		},
	}
}

func (r *reserveRig) reserve(t *testing.T, req app.Request) (domain.Decision, *app.Reservation) {
	t.Helper()
	d, res, err := r.l.Reserve(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, d.State.Passes() || d.Shadow, res != nil, "a Reservation exactly when the decision passes")
	return d, res
}

func userReq(route, user string) app.Request {
	return app.Request{Route: route, ClientIP: rawIP, User: user}
}

// TestReserveSettleRefundsAndCharges: a reservation takes its cost at
// once; Settle replaces it by the actual cost, once.
func TestReserveSettleRefundsAndCharges(t *testing.T) {
	for _, b := range reserverBackends() {
		t.Run(b.name, func(t *testing.T) { settleScenario(t, b.open(t)) })
	}
}

func settleScenario(t *testing.T, store ports.Store) {
	r := newReserveRig(t, reserveConfig(), store, nil)
	ctx := context.Background()
	id := runID(t)
	assert.True(t, r.l.Reserving(routeExports))
	assert.True(t, r.l.Reserving(routeReports))
	assert.False(t, r.l.Reserving("GET /unknown"))

	d, res := r.reserve(t, userReq(routeExports, id+"u1"))
	require.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, int64(5), d.Remaining)
	assert.Equal(t, int64(5), res.Cost())
	assert.Equal(t, "X-Cost", res.CostHeader())
	assert.Equal(t, app.DefaultReservationTTL/3, res.RenewEvery(), "no concurrency window: the default TTL")

	s, err := res.Settle(ctx, 2)
	require.NoError(t, err)
	assert.Equal(t, domain.Settled, s)
	s, err = res.Settle(ctx, 9)
	require.NoError(t, err)
	assert.Equal(t, domain.AlreadySettled, s, "settling twice settles once")
	p, err := r.l.Peek(ctx, userReq(routeExports, id+"u1"))
	require.NoError(t, err)
	assert.Equal(t, int64(8), p.Remaining, "3 of the 5 reserved were refunded")

	// A handler that reports 7: charged 2 more than reserved, recorded
	// even past what a request could take.
	_, res = r.reserve(t, userReq(routeExports, id+"u1"))
	s, err = res.Finish(ctx, app.Outcome{Cost: 7, Reported: true})
	require.NoError(t, err)
	assert.Equal(t, domain.Settled, s)
	p, err = r.l.Peek(ctx, userReq(routeExports, id+"u1"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.Remaining, "2 + 7 counted")

	// A failure is refunded whole by the profile's rule.
	_, res = r.reserve(t, userReq(routeExports, id+"u2"))
	_, err = res.Finish(ctx, app.Outcome{Failed: true})
	require.NoError(t, err)
	p, err = r.l.Peek(ctx, userReq(routeExports, id+"u2"))
	require.NoError(t, err)
	assert.Equal(t, int64(10), p.Remaining)

	// A status or gRPC code the profile lists is refunded whole; another
	// keeps the cost reserved.
	for i, o := range []app.Outcome{{Status: 409}, {Code: "AlreadyExists"}, {Status: 404}, {Code: "NotFound"}} {
		user := id + "s" + string(rune('a'+i))
		_, res = r.reserve(t, userReq(routeExports, user))
		_, err = res.Finish(ctx, o)
		require.NoError(t, err)
		p, err = r.l.Peek(ctx, userReq(routeExports, user))
		require.NoError(t, err)
		want := int64(10)
		if i >= 2 {
			want = 5
		}
		assert.Equal(t, want, p.Remaining, "%+v", o)
	}

	// A reported cost Settle cannot take settles at the cost reserved.
	_, res = r.reserve(t, userReq(routeExports, id+"u3"))
	s, err = res.Finish(ctx, app.Outcome{Cost: -1, Reported: true})
	var le *domain.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, domain.Settled, s)
	p, err = r.l.Peek(ctx, userReq(routeExports, id+"u3"))
	require.NoError(t, err)
	assert.Equal(t, int64(5), p.Remaining)

	calls := map[ports.StoreOp]int{}
	for _, c := range r.rec.StoreCalls() {
		calls[c.Op]++
	}
	assert.Equal(t, 8, calls[ports.OpReserve])
	assert.Equal(t, 8, calls[ports.OpSettle], "one recorded call per Settle that reached the store")
}

// TestConcurrencyWindowHoldsSlots: at most 2 in flight; a slot comes back
// on Settle, or when its lease expires; Renew keeps it; Evaluate leaves
// concurrency windows out.
func TestConcurrencyWindowHoldsSlots(t *testing.T) {
	for _, b := range reserverBackends() {
		t.Run(b.name, func(t *testing.T) { concurrencyScenario(t, b.open(t)) })
	}
}

// reserverBackends are the primary stores the Limiter's reservations are
// tested on: the test Reserver, the conformance reference store, the local
// store, and Redis standalone and cluster on the caller's instants.
func reserverBackends() []struct {
	name string
	open func(t *testing.T) ports.Store
} {
	return []struct {
		name string
		open func(t *testing.T) ports.Store
	}{
		{"mem", func(*testing.T) ports.Store { return newMemReserver(false) }},
		{"reference", func(*testing.T) ports.Store { return conformance.NewReferenceStore() }},
		{"local", func(t *testing.T) ports.Store {
			s, err := local.New(local.Config{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) ports.Store {
			return openRedis(t, redis.Config{URL: redistest.StandaloneURL(t)})
		}},
		{"cluster", func(t *testing.T) ports.Store { return clusterStore(t) }},
	}
}

func concurrencyScenario(t *testing.T, store ports.Store) {
	r := newReserveRig(t, reserveConfig(), store, nil)
	ctx := context.Background()
	req := userReq(routeReports, runID(t))
	_, a := r.reserve(t, req)
	assert.Equal(t, 10*time.Second, a.RenewEvery(), "a third of the window's lease TTL")
	r.clock.Advance(5 * time.Second)
	_, b := r.reserve(t, req)
	r.clock.Advance(5 * time.Second)
	d, c := r.reserve(t, req)
	assert.Equal(t, domain.Throttled, d.State)
	assert.Nil(t, c)
	assert.Equal(t, "inflight", d.LimitingWindow)
	assert.Equal(t, 20*time.Second, d.RetryAfter, "until the earliest lease expires")
	assert.Equal(t, 25*time.Second, d.ResetAfter, "until the last one does")

	// Evaluate counts the rate window only.
	e := r.eval(t, req)
	assert.Equal(t, domain.Allowed, e.State)
	assert.Equal(t, 1, e.Windows.Len())

	p, err := r.l.Peek(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, int64(0), p.Remaining, "Peek shows the slots")

	s, err := a.Finish(ctx, app.Outcome{})
	require.NoError(t, err)
	assert.Equal(t, domain.Settled, s)
	_, c = r.reserve(t, req)
	require.NotNil(t, c, "a settled slot comes back at once")

	// b renews; c's holder dies: its slot comes back at its lease's end.
	r.clock.Advance(15 * time.Second)
	require.NoError(t, b.Renew(ctx))
	r.clock.Advance(20 * time.Second)
	d, _ = r.reserve(t, req)
	assert.Equal(t, domain.Allowed, d.State, "c expired; b renewed holds the other slot")
	d, _ = r.reserve(t, req)
	assert.Equal(t, domain.Throttled, d.State)
	s, err = c.Settle(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, domain.Expired, s)
	require.NoError(t, b.Renew(ctx))
	_, err = a.Settle(ctx, 1)
	require.NoError(t, err)
	assert.ErrorIs(t, a.Renew(ctx), domain.ErrLeaseEnded)
}

// TestConcurrencyRefusalIsNeverRemembered: slots come back when a holder
// settles, not with time, so a refusal by a concurrency window must not
// be repeated by the refusal cache; a rate window's refusal still is.
func TestConcurrencyRefusalIsNeverRemembered(t *testing.T) {
	r := newReserveRig(t, reserveConfig(), newMemReserver(false), nil)
	ctx := context.Background()
	req := app.Request{Route: routeSlow, ClientIP: rawIP}
	_, held := r.reserve(t, req)
	d, _ := r.reserve(t, req)
	require.Equal(t, domain.Throttled, d.State)
	_, err := held.Finish(ctx, app.Outcome{})
	require.NoError(t, err)
	d, again := r.reserve(t, req)
	assert.Equal(t, domain.Allowed, d.State, "the slot is back at once: no remembered refusal")
	assert.Equal(t, domain.SourcePrimary, d.Source)
	require.NotNil(t, again)

	// A rate window's refusal is remembered as before.
	for range 2 {
		_, _ = r.reserve(t, userReq(routeExports, "u9"))
	}
	d, _ = r.reserve(t, userReq(routeExports, "u9"))
	require.Equal(t, domain.Throttled, d.State)
	d, _ = r.reserve(t, userReq(routeExports, "u9"))
	assert.Equal(t, domain.SourceRefusalCache, d.Source)
}

// TestNewRefusesReservingProfilesOnAStoreThatCannotReserve: the check is
// at boot, not on the first request.
func TestNewRefusesReservingProfilesOnAStoreThatCannotReserve(t *testing.T) {
	plain := struct{ ports.Store }{conformance.NewReferenceStore()} // no Reserver
	_, err := app.New(reserveConfig(), app.Deps{Store: plain, Fallback: conformance.NewReferenceStore(), Recorder: &recorder{}})
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "profiles[exports]", ce.Field)
}

// TestReserveOnAStoreThatCannotReserve: a profile that needs no
// reservation may still be reserved (a door's cost function does) on a
// primary store that takes none: Reserve decides as Evaluate and the
// Reservation holds nothing. It used to dereference a nil Reserver.
func TestReserveOnAStoreThatCannotReserve(t *testing.T) {
	cfg := reserveConfig()
	cfg.Profiles = cfg.Profiles[:1]
	cfg.Profiles[0].Settle = nil
	store := conformance.NewReferenceStore()
	l, err := app.New(cfg, app.Deps{Store: struct{ ports.Store }{store}, Fallback: conformance.NewReferenceStore(), Recorder: &recorder{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.False(t, l.CanReserve())
	ctx := context.Background()
	for i := range 3 {
		d, res, err := l.Reserve(ctx, userReq(routeExports, "u1"))
		require.NoError(t, err)
		if i < 2 {
			require.Equal(t, domain.Allowed, d.State, "reservation %d", i)
			require.NotNil(t, res)
			st, err := res.Settle(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, domain.Settled, st)
			continue
		}
		// Nothing was refunded: two reservations of 5 spent the 10.
		assert.Equal(t, domain.Throttled, d.State)
		assert.Nil(t, res)
	}
}

// TestReserveDegraded: the degraded matrix, for a reservation.
func TestReserveDegraded(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		action domain.DegradedAction
		state  domain.State
	}{
		{"bypass", domain.ActionBypass, domain.BypassDegraded},
		{"deny", domain.ActionDeny, domain.DeniedDegraded},
		{"local", domain.ActionLocal, domain.Allowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := reserveConfig()
			cfg.Degraded.Read = c.action
			primary := newMemReserver(false)
			fallback := newMemReserver(false)
			r := newReserveRig(t, cfg, primary, fallback)
			require.NoError(t, primary.Close()) // every call now fails
			d, res, err := r.l.Reserve(ctx, userReq(routeReports, "u1"))
			require.NoError(t, err)
			assert.Equal(t, c.state, d.State)
			assert.True(t, d.Degraded)
			switch c.action {
			case domain.ActionDeny:
				assert.Nil(t, res)
			case domain.ActionBypass:
				require.NotNil(t, res)
				assert.Zero(t, res.RenewEvery(), "holds nothing")
				s, err := res.Settle(ctx, 1)
				require.NoError(t, err)
				assert.Equal(t, domain.Settled, s)
			case domain.ActionLocal:
				require.NotNil(t, res)
				assert.Equal(t, int64(1), fallback.calls[ports.OpReserve].Load(), "reserved on the fallback")
				s, err := res.Settle(ctx, 1)
				require.NoError(t, err)
				assert.Equal(t, domain.Settled, s)
				assert.Equal(t, int64(1), fallback.calls[ports.OpSettle].Load(), "settled where it was reserved")
			}
		})
	}
}

// TestReserveAcrossPartitions: a reservation whose keys span partitions
// holds one lease per partition and settles them all; a refusal on one
// side releases the other.
func TestReserveAcrossPartitions(t *testing.T) {
	cfg := reserveConfig()
	cfg.Profiles[0].Windows.IP = []app.WindowConfig{{Name: "burst", Limit: 30, Period: time.Minute}}
	store := newMemReserver(true)
	r := newReserveRig(t, cfg, store, nil)
	ctx := context.Background()
	d, res := r.reserve(t, userReq(routeExports, "u1"))
	require.Equal(t, domain.Allowed, d.State)
	assert.Equal(t, int64(2), store.calls[ports.OpReserve].Load(), "one reservation per partition")
	_, err := res.Settle(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(2), store.calls[ports.OpSettle].Load(), "both leases settled")
	p, err := r.l.Peek(ctx, userReq(routeExports, "u1"))
	require.NoError(t, err)
	require.Equal(t, 2, p.Windows.Len())
	assert.Equal(t, int64(29), p.Windows.All()[0].Remaining, "the ip counts the actual cost")
	assert.Equal(t, int64(9), p.Windows.All()[1].Remaining)

	// u1 has 9 left: 5, then a refusal whose ip side is given back.
	_, res = r.reserve(t, userReq(routeExports, "u1"))
	require.NotNil(t, res)
	d, res = r.reserve(t, userReq(routeExports, "u1"))
	require.Equal(t, domain.Throttled, d.State)
	assert.Nil(t, res)
	p, err = r.l.Peek(ctx, userReq(routeExports, "u1"))
	require.NoError(t, err)
	assert.Equal(t, int64(24), p.Windows.All()[0].Remaining, "the refused request holds nothing on the ip")
}

// TestReserveRenewAndSettleErrors: Renew after Settle is ErrLeaseEnded,
// and a Settle the store cannot answer may be retried.
func TestReserveRenewAndSettleErrors(t *testing.T) {
	store := newMemReserver(false)
	r := newReserveRig(t, reserveConfig(), store, nil)
	ctx := context.Background()
	_, res := r.reserve(t, userReq(routeReports, "u1"))
	tag := hashTag(store.keys()[0])
	store.mu.Lock()
	store.failTag = tag
	store.mu.Unlock()
	_, err := res.Settle(ctx, 1)
	require.ErrorIs(t, err, domain.ErrStoreUnavailable)
	store.mu.Lock()
	store.failTag = ""
	store.mu.Unlock()
	// A cancelled context does not stop a Settle: the client that went
	// away must still give its slot back.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s, err := res.Settle(cctx, 1)
	require.NoError(t, err)
	assert.Equal(t, domain.Settled, s, "the failed Settle settled nothing: the retry does")
	assert.ErrorIs(t, res.Renew(ctx), domain.ErrLeaseEnded)
	_, err = res.Settle(ctx, -1)
	var le *domain.LimitError
	assert.ErrorAs(t, err, &le)
}

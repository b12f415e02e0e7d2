package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// Routes of layoutConfig.
const (
	routeNine = "GET /api/v1/nine"
	routePair = "GET /api/v1/pair"
)

// layoutConfig has the nine-window profile of issue 17 in sliding logs
// (ip, user, api key and tenant × burst and sustained, and the
// tenant-global window) and a pair profile: an ip burst of 5 per second
// and sustained of 8 per 10 s, listed longest first so that the log is
// named by the first window.
func layoutConfig() app.Config {
	pair := func(burst, sustained int64) []app.WindowConfig {
		return []app.WindowConfig{{Name: "burst", Limit: burst, Period: time.Second}, {Name: "sustained", Limit: sustained, Period: time.Minute}}
	}
	return app.Config{
		HMACSecret: testSecret,
		InstanceID: "test-layout",
		// Every answer comes from the store: the instances are compared
		// call by call.
		RefusalCacheSize: -1,
		// A comparison, not a test of deadlines: under the race detector
		// on a loaded machine a call split across partitions once took
		// longer than the default 50 ms, and that one answer was degraded.
		StoreTimeout: 10 * time.Second,
		Profiles: []app.ProfileConfig{
			{Name: "nine", Family: domain.FamilyRead, Routes: []string{routeNine}, Windows: app.WindowsConfig{
				IP: pair(50, 500), User: pair(5, 100), APIKey: pair(20, 200), Tenant: pair(40, 400),
				TenantGlobal: []app.WindowConfig{{Name: "sustained", Limit: 1000, Period: time.Minute}},
			}},
			{Name: "pair", Family: domain.FamilyRead, Routes: []string{routePair}, Windows: app.WindowsConfig{
				IP: []app.WindowConfig{{Name: "sustained", Limit: 8, Period: 10 * time.Second}, {Name: "burst", Limit: 5, Period: time.Second}},
			}},
		},
	}
}

// newLayoutLimiter is a Limiter on store with clock, the fallback a
// reference store of its own.
func newLayoutLimiter(t *testing.T, cfg app.Config, store ports.Store, clock ports.Clock) *app.Limiter {
	t.Helper()
	l, err := app.New(cfg, app.Deps{Store: store, Fallback: conformance.NewReferenceStore(), Clock: clock, Recorder: &recorder{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// keyWindow is the last part of a key: the name of the window it is
// named after.
func keyWindow(key string) string { return key[strings.LastIndexByte(key, ':')+1:] }

// keyDim is the dimension part of a key (rl:{tag}:dimension:…).
func keyDim(key string) string {
	_, rest, _ := strings.Cut(key, "}:")
	dim, _, _ := strings.Cut(rest, ":")
	return dim
}

// TestLogLayoutKeys checks which keys a decision names: a principal's
// sliding-log windows on the key of its longest, GCRA windows on their
// own.
func TestLogLayoutKeys(t *testing.T) {
	withGCRA := func(c *app.Config) {
		c.Profiles[0].Windows.User[1].Algorithm = domain.GCRA
	}
	tests := []struct {
		name   string
		mutate func(*app.Config)
		route  string
		// want lists each limit's dimension and key window, in request
		// order; distinct is how many keys they name.
		want     []string
		distinct int
	}{
		{"shared, nine windows in five logs", nil, routeNine, []string{
			"ip:sustained", "ip:sustained", "user:sustained", "user:sustained", "apikey:sustained", "apikey:sustained",
			"tenant:sustained", "tenant:sustained", "tenant_global:sustained"}, 5},
		{"a GCRA window keeps its key; a lone log its own name", withGCRA, routeNine, []string{
			"ip:sustained", "ip:sustained", "user:burst", "user:sustained", "apikey:sustained", "apikey:sustained",
			"tenant:sustained", "tenant:sustained", "tenant_global:sustained"}, 6},
		{"the longest names the log wherever it is listed", nil, routePair, []string{
			"ip:sustained", "ip:sustained"}, 1},
		{"a tie of periods: the first listed", func(c *app.Config) {
			c.Profiles[1].Windows.IP[1].Period = 10 * time.Second
		}, routePair, []string{"ip:sustained", "ip:sustained"}, 1},
		{"a tie of periods, the other order", func(c *app.Config) {
			ws := c.Profiles[1].Windows.IP
			ws[0], ws[1] = ws[1], ws[0]
			ws[0].Period = 10 * time.Second
		}, routePair, []string{"ip:burst", "ip:burst"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := layoutConfig()
			if tt.mutate != nil {
				tt.mutate(&cfg)
			}
			r := newRigWith(t, cfg, newFaulty(newLocal(t)), conformance.NewReferenceStore())
			d := r.eval(t, app.Request{Route: tt.route, ClientIP: rawIP, User: rawUser, Tenant: rawTenant, APIKey: rawAPIKey})
			require.Equal(t, domain.Allowed, d.State, "cause %s", d.Cause)
			keys := r.store.seen()
			got := make([]string, len(keys))
			for i, k := range keys {
				got[i] = keyDim(k) + ":" + keyWindow(k)
			}
			assert.Equal(t, tt.want, got)
			assert.Len(t, slices.Compact(slices.Sorted(slices.Values(keys))), tt.distinct)
			assertNoRawIdentifier(t, keys)
			assert.Len(t, d.Windows.All(), len(tt.want))
		})
	}
}

// TestSharedLogCountsExactly runs burst 5/s and sustained 8/10 s, one
// log, through the Limiter on the reference and the local store: 5 pass,
// the 6th is refused by the burst, 3 more pass a second later and the
// next is refused by the sustained window, on every store alike, window
// by window.
func TestSharedLogCountsExactly(t *testing.T) {
	type step struct {
		at      time.Duration
		allowed bool
		window  string
		remain  int64
	}
	script := []step{
		{0, true, "burst", 4}, {0, true, "burst", 3}, {0, true, "burst", 2}, {0, true, "burst", 1}, {0, true, "burst", 0},
		{0, false, "burst", 0},
		{time.Second, true, "sustained", 2}, {time.Second, true, "sustained", 1}, {time.Second, true, "sustained", 0},
		{time.Second, false, "sustained", 0},
		{10 * time.Second, true, "sustained", 4},
	}
	stores := map[string]func(t *testing.T) ports.Store{
		"reference": func(*testing.T) ports.Store { return conformance.NewReferenceStore() },
		"local":     func(t *testing.T) ports.Store { return newLocal(t) },
		"redis": func(t *testing.T) ports.Store {
			srv := redistest.NewServer(t) // a server of its own: every run uses the same keys
			s, err := redis.New(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone, Time: redis.CallerTime})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for sname, open := range stores {
		t.Run(sname, func(t *testing.T) {
			clock := fakeclock.New(t0)
			l := newLayoutLimiter(t, layoutConfig(), open(t), clock)
			var at time.Duration
			for i, s := range script {
				clock.Advance(s.at - at)
				at = s.at
				d, err := l.Evaluate(context.Background(), app.Request{Route: routePair, ClientIP: rawIP})
				require.NoError(t, err)
				assert.Equal(t, s.allowed, d.State == domain.Allowed, "step %d", i)
				assert.Equal(t, s.window, d.LimitingWindow, "step %d", i)
				assert.Equal(t, s.remain, d.Remaining, "step %d", i)
				require.Len(t, d.Windows.All(), 2, "step %d", i)
			}
		})
	}
}

// TestSharedLogAlgorithmChange is what ADR-015 says of a window that
// changes algorithm: the window that leaves the log starts on a key of
// its own, empty unless it named the log; the windows that stay keep
// their units, on a key that is the old log only when the longest of them
// still names it.
func TestSharedLogAlgorithmChange(t *testing.T) {
	// burst 5 per second and sustained 20 per 10 s, one log.
	cfg := func(burst, sustained domain.Algorithm) app.Config {
		c := layoutConfig()
		c.Profiles[1].Windows.IP = []app.WindowConfig{
			{Name: "burst", Limit: 5, Period: time.Second, Algorithm: burst},
			{Name: "sustained", Limit: 20, Period: 10 * time.Second, Algorithm: sustained},
		}
		return c
	}
	req := app.Request{Route: routePair, ClientIP: rawIP}
	tests := []struct {
		name             string
		burst, sustained domain.Algorithm
		// passes is how many requests the new configuration admits at the
		// instant of the change, after 4 under the old one; window is its
		// limiting window then.
		passes int
		window string
	}{
		// The burst leaves the log for an empty GCRA key: 5 more pass in
		// the same second (9 in all, over its 5); the sustained window
		// kept its 4 units.
		{"the shorter window leaves the log", domain.GCRA, domain.SlidingLog, 5, "burst"},
		// The sustained window's key is the log, which the store reads in
		// GCRA (S6): its 4 units stay. The burst, alone on a log, now
		// names a key of its own, empty: 5 pass.
		{"the longest window leaves the log", domain.SlidingLog, domain.GCRA, 5, "burst"},
		// Nothing moves: the burst holds 4 of 5 units.
		{"no change", domain.SlidingLog, domain.SlidingLog, 1, "burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			store := newLocal(t)
			before := newLayoutLimiter(t, cfg(domain.SlidingLog, domain.SlidingLog), store, clock)
			for range 4 {
				d, err := before.Evaluate(context.Background(), req)
				require.NoError(t, err)
				require.Equal(t, domain.Allowed, d.State)
			}
			after := newLayoutLimiter(t, cfg(tt.burst, tt.sustained), store, clock)
			passed := 0
			var last domain.Decision
			for {
				d, err := after.Evaluate(context.Background(), req)
				require.NoError(t, err)
				if d.State != domain.Allowed {
					last = d
					break
				}
				passed++
				require.Less(t, passed, 30)
			}
			assert.Equal(t, tt.passes, passed)
			assert.Equal(t, tt.window, last.LimitingWindow)
			// The sustained window kept the 4 units of before in every
			// case: 20 - 4 - passed remain.
			sus := last.Windows.All()[1]
			assert.Equal(t, "sustained", sus.Window.Name)
			assert.Equal(t, int64(20-4-passed), sus.Remaining)
		})
	}
}

// TestSharedLogConfig checks what the shared logs refuse at boot: two
// windows of one log with one limit and period, in a profile or a plan.
func TestSharedLogConfig(t *testing.T) {
	invalid := []struct {
		name   string
		mutate func(*app.Config)
		field  string
	}{
		{"two windows of one log with one limit and period", func(c *app.Config) {
			c.Profiles[1].Windows.IP[1] = app.WindowConfig{Name: "burst", Limit: 8, Period: 10 * time.Second}
		}, "profiles[pair].windows.ip[burst]"},
		{"a plan that makes two windows of one log the same", func(c *app.Config) {
			c.Profiles[1].Windows.IP[1] = app.WindowConfig{Name: "burst", Limit: 5, Period: 10 * time.Second}
			c.Plans = []app.PlanConfig{{Name: "pro", Tenants: []string{"t"}, Profiles: map[string]app.PlanProfileConfig{
				"pair": {Windows: app.PlanWindowsConfig{IP: []app.PlanWindowConfig{{Name: "burst", Limit: 8}}}},
			}}}
		}, "plans[pro].profiles.pair.windows.ip[burst]"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			c := layoutConfig()
			tt.mutate(&c)
			err := c.WithDefaults().Validate()
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.field, ce.Field, "%v", err)
			assert.True(t, errors.Is(err, domain.ErrInvalidConfig))
		})
	}
}

// TestTenantGlobalLogAcrossProfiles: the tenant-global keys are the same
// in every profile, so their windows share a log only when every profile
// counts the same ones; otherwise each keeps its own key.
func TestTenantGlobalLogAcrossProfiles(t *testing.T) {
	global := []app.WindowConfig{{Name: "minute", Limit: 100, Period: time.Minute}, {Name: "hour", Limit: 1000, Period: time.Hour}}
	for _, tt := range []struct {
		name  string
		other []app.WindowConfig
		want  []string
	}{
		{"the same windows: one log", global, []string{"hour", "hour"}},
		{"another profile with fewer: a key each", global[:1], []string{"minute", "hour"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := layoutConfig()
			cfg.Profiles[0].Windows = app.WindowsConfig{TenantGlobal: global}
			cfg.Profiles[1].Windows = app.WindowsConfig{TenantGlobal: tt.other}
			r := newRigWith(t, cfg, newFaulty(newLocal(t)), conformance.NewReferenceStore())
			d := r.eval(t, app.Request{Route: routeNine, ClientIP: rawIP, Tenant: rawTenant})
			require.Equal(t, domain.Allowed, d.State)
			var got []string
			for _, k := range r.store.seen() {
				got = append(got, keyWindow(k))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestResetForgetsTheSharedLog: a reset lists every window's own key,
// among which each shared log is, so one reset forgets a principal's
// counts in every window.
func TestResetForgetsTheSharedLog(t *testing.T) {
	clock := fakeclock.New(t0)
	store := newLocal(t)
	l := newLayoutLimiter(t, layoutConfig(), store, clock)
	req := app.Request{Route: routePair, ClientIP: rawIP}
	for range 3 {
		d, err := l.Evaluate(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, domain.Allowed, d.State)
	}
	res, err := l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP, Profiles: []string{"pair"}})
	require.NoError(t, err)
	// burst, sustained (the shared log) and the bypass cap; only the
	// shared log counted anything.
	assert.Equal(t, app.ResetResult{Keys: 3, Deleted: 1}, res)
	d, err := l.Peek(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, int64(5), d.Remaining, "a window kept units after the reset")
}

// TestSharedLogRefusalCache: the refusal cache repeats a refusal of a
// window on a shared log only while the store would give it. Against an
// instance on a store of its own, without a cache, every decision agrees
// on its state, limiting window and retry-after.
func TestSharedLogRefusalCache(t *testing.T) {
	clock := fakeclock.New(t0)
	cfg := layoutConfig()
	cfg.RefusalCacheSize = 64
	cached := newLayoutLimiter(t, cfg, newLocal(t), clock)
	ref := newLayoutLimiter(t, layoutConfig(), newLocal(t), clock)
	req := app.Request{Route: routePair, ClientIP: rawIP}
	repeated := 0
	for i := range 60 {
		clock.Advance(100 * time.Millisecond)
		for range 2 {
			got, err := cached.Evaluate(context.Background(), req)
			require.NoError(t, err)
			want, err := ref.Evaluate(context.Background(), req)
			require.NoError(t, err)
			if got.Source == domain.SourceRefusalCache {
				repeated++
			}
			assert.Equal(t, want.State, got.State, "step %d", i)
			assert.Equal(t, want.LimitingWindow, got.LimitingWindow, "step %d", i)
			assert.Equal(t, want.RetryAfter, got.RetryAfter, "step %d", i)
		}
	}
	assert.Positive(t, repeated, "the cache never answered: the test proves nothing")
}

// TestSharedLogCoalesced: decisions released together on one shared log
// are admitted exactly to the burst, coalesced or not.
func TestSharedLogCoalesced(t *testing.T) {
	clock := fakeclock.New(t0)
	l := newLayoutLimiter(t, layoutConfig(), newLocal(t), clock)
	req := app.Request{Route: routePair, ClientIP: rawIP}
	const n = 40
	start := make(chan struct{})
	results := make(chan domain.State, n)
	for range n {
		go func() {
			<-start
			d, err := l.Evaluate(context.Background(), req)
			if err != nil {
				t.Error(err)
			}
			results <- d.State
		}()
	}
	close(start)
	admitted := 0
	for range n {
		if <-results == domain.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 5, admitted)
	d, err := l.Peek(context.Background(), req)
	require.NoError(t, err)
	w := d.Windows.All()
	assert.Equal(t, int64(3), w[0].Remaining, "sustained: 8 - 5")
	assert.Equal(t, int64(0), w[1].Remaining, "burst")
}

// TestSharedLogSettlesOnce: a reservation on a shared log holds its cost
// once, and settling refunds it once: each window then reads the actual
// cost.
func TestSharedLogSettlesOnce(t *testing.T) {
	clock := fakeclock.New(t0)
	cfg := layoutConfig()
	cfg.Profiles[1].Settle = &app.SettleConfig{}
	l := newLayoutLimiter(t, cfg, newLocal(t), clock)
	req := app.Request{Route: routePair, ClientIP: rawIP, Cost: 3}
	d, res, err := l.Reserve(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, domain.Allowed, d.State)
	w := d.Windows.All()
	require.Len(t, w, 2)
	assert.Equal(t, []int64{5, 2}, []int64{w[0].Remaining, w[1].Remaining})
	_, err = res.Settle(context.Background(), 1)
	require.NoError(t, err)
	p, err := l.Peek(context.Background(), app.Request{Route: routePair, ClientIP: rawIP, Cost: 1})
	require.NoError(t, err)
	w = p.Windows.All()
	assert.Equal(t, []int64{7, 4}, []int64{w[0].Remaining, w[1].Remaining}, "each window counts the 1 unit settled")
}

// TestSharedLogMoves: a change that names another key for a window's log
// under shared (a period change that makes another window the longest,
// an algorithm change of the longest) leaves the old log's units behind
// (docs/adr/015, "Consequences").
func TestSharedLogMoves(t *testing.T) {
	windows := func(burstPeriod time.Duration, sustained domain.Algorithm) []app.WindowConfig {
		return []app.WindowConfig{
			{Name: "burst", Limit: 5, Period: burstPeriod},
			{Name: "sustained", Limit: 8, Period: 10 * time.Second, Algorithm: sustained},
		}
	}
	req := app.Request{Route: routePair, ClientIP: rawIP}
	tests := []struct {
		name  string
		after []app.WindowConfig
		// passes is how many requests pass at the change's instant after 4.
		passes int
	}{
		{"the burst becomes the longest: its key is new", windows(20*time.Second, domain.SlidingLog), 5},
		{"the sustained leaves the log: the burst's key is new (the sustained window kept its 4)", windows(time.Second, domain.GCRA), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			store := newLocal(t)
			cfg := layoutConfig()
			cfg.Profiles[1].Windows.IP = windows(time.Second, domain.SlidingLog)
			before := newLayoutLimiter(t, cfg, store, clock)
			for range 4 {
				d, err := before.Evaluate(context.Background(), req)
				require.NoError(t, err)
				require.Equal(t, domain.Allowed, d.State)
			}
			cfg = layoutConfig()
			cfg.Profiles[1].Windows.IP = tt.after
			after := newLayoutLimiter(t, cfg, store, clock)
			passed := 0
			for {
				d, err := after.Evaluate(context.Background(), req)
				require.NoError(t, err)
				if d.State != domain.Allowed {
					break
				}
				passed++
				require.Less(t, passed, 30)
			}
			assert.Equal(t, tt.passes, passed)
		})
	}
}

// partitionedLocal is a local store that says each hash tag is a
// partition of its own, as a Redis Cluster's slots: the Limiter then
// decides a request whose keys carry two tags through one reservation
// per tag (docs/adr/013).
type partitionedLocal struct {
	*local.Store
	mu  sync.Mutex
	ids map[string]int
}

func (p *partitionedLocal) Partition(key string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tag := hashTag(key)
	id, ok := p.ids[tag]
	if !ok {
		id = len(p.ids)
		p.ids[tag] = id
	}
	return id, true
}

// splitView is what must be identical between two instances, without
// the reset-afters: a side released after a refusal elsewhere reports the
// reset-after its reservation saw (split.go's release restores the
// remaining counts only).
func splitView(d domain.Decision) string {
	s := fmt.Sprintf("%s %s rem=%d retry=%s", d.State, d.LimitingWindow, d.Remaining, d.RetryAfter)
	for _, w := range d.Windows.All() {
		s += fmt.Sprintf(" [%s %s %t %d %s]", w.Dimension, w.Window.Name, w.Allowed, w.Remaining, w.RetryAfter)
	}
	return s
}

// TestSharedLogAcrossPartitions: the ip's log lives under the ip's tag,
// the other principals' under the tenant's (docs/adr/013). Split into one
// reservation per tag, and released when one side refuses, the nine
// windows answer as an instance on one partition does.
func TestSharedLogAcrossPartitions(t *testing.T) {
	clock := fakeclock.New(t0)
	store := &partitionedLocal{Store: newLocal(t), ids: map[string]int{}}
	split := newLayoutLimiter(t, layoutConfig(), store, clock)
	ref := newLayoutLimiter(t, layoutConfig(), newLocal(t), clock)
	req := app.Request{Route: routeNine, ClientIP: rawIP, User: rawUser, Tenant: rawTenant, APIKey: rawAPIKey}
	refused := 0
	for i := range 40 {
		clock.Advance(100 * time.Millisecond)
		want, err := ref.Evaluate(context.Background(), req)
		require.NoError(t, err)
		got, err := split.Evaluate(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, splitView(want), splitView(got), "step %d", i)
		if got.State == domain.Throttled {
			refused++
		}
	}
	assert.Positive(t, refused, "nothing refused: the release path went untested")
	assert.Len(t, store.ids, 2, "the ip's tag and the tenant's")
}

// BenchmarkEvaluateSharedLogs measures one nine-window decision (every
// window a sliding log: 9 limits on 5 shared logs) through the Limiter on
// the local store. Identities rotate over 256 users of 16 tenants; the
// clock moves 1 ms a decision.
//
//	go test -run '^$' -bench EvaluateSharedLogs -benchmem ./app/
func BenchmarkEvaluateSharedLogs(b *testing.B) {
	cfg := layoutConfig()
	w := &cfg.Profiles[0].Windows
	for _, ws := range [][]app.WindowConfig{w.IP, w.User, w.APIKey, w.Tenant, w.TenantGlobal} {
		for i := range ws {
			ws[i].Limit = domain.MaxSlidingLogLimit - int64(i)
		}
	}
	clock := fakeclock.New(t0)
	l, err := app.New(cfg, app.Deps{Store: newLocal(b), Fallback: newLocal(b), Clock: clock, Recorder: recordertest.Discard{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	reqs := make([]app.Request, 256)
	for i := range reqs {
		reqs[i] = app.Request{
			Route:    routeNine,
			ClientIP: netip.AddrFrom4([4]byte{10, 1, byte(i / 16), byte(i)}),
			User:     "user-" + strconv.Itoa(i) + "@example.org",
			Tenant:   "tenant-" + strconv.Itoa(i%16),
			APIKey:   "key-" + strconv.Itoa(i),
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clock.Advance(time.Millisecond)
		d, err := l.Evaluate(context.Background(), reqs[i%len(reqs)])
		if err != nil || d.State != domain.Allowed {
			b.Fatalf("decision %s (%s), err %v", d.State, d.Cause, err)
		}
		i++
	}
}

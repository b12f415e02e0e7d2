package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
	"github.com/sluicehq/sluice/ports/fakeclock"
	"github.com/sluicehq/sluice/ports/recordertest"
)

// TestPeekShowsTheQuotaWithoutConsuming: Peek answers as Evaluate would,
// by raw identity, and consumes nothing.
func TestPeekShowsTheQuotaWithoutConsuming(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, down, _ := newBackendRig(t, b, nil)
		req := app.Request{Route: routeLogin, ClientIP: rawIP, User: rawUser}
		ctx := context.Background()

		d, err := r.l.Peek(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, domain.Allowed, d.State)
		assert.Equal(t, int64(3), d.Remaining, "nothing used yet: the whole burst of 3")
		assert.Equal(t, domain.SourcePrimary, d.Source)
		require.Equal(t, 3, d.Windows.Len(), "ip burst, ip sustained, user burst")

		for range 2 {
			r.eval(t, req)
		}
		before := r.rec.count()
		for range 5 {
			d, err = r.l.Peek(ctx, req)
			require.NoError(t, err)
		}
		assert.Equal(t, int64(1), d.Remaining, "3 - 2 evaluated; the peeks took nothing")
		assert.Equal(t, before, r.rec.count(), "a peek is not a decision")
		r.eval(t, req)
		d, err = r.l.Peek(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, domain.Throttled, d.State, "the next request would be refused")
		assert.Positive(t, d.RetryAfter)

		_, err = r.l.Peek(ctx, app.Request{Route: "nope", ClientIP: rawIP})
		var ce *domain.ContextError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, domain.CauseRouteInvalid, ce.Cause)

		down(t)
		_, err = r.l.ProbeOnce(ctx)
		require.NoError(t, err)
		_, err = r.l.Peek(ctx, req)
		assert.ErrorIs(t, err, domain.ErrStoreUnavailable, "no fleet-wide quota to show while the breaker is open")
		assert.ErrorIs(t, err, app.ErrBreakerOpen)
	})
}

// TestResetUnblocksByRawIdentity: support resets a user or an ip by raw
// identity; only that identity's windows start afresh, on the primary and
// the fallback, and the act is recorded for the audit channel.
func TestResetUnblocksByRawIdentity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, _ := newBackendRig(t, b, nil)
		ctx := context.Background()
		alice := app.Request{Route: routeLogin, ClientIP: rawIP, User: rawUser}
		bob := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("198.51.100.9"), User: "bob@example.org"}
		exhaust := func(req app.Request) {
			for range 3 {
				require.Equal(t, domain.Allowed, r.eval(t, req).State)
			}
			require.Equal(t, domain.Throttled, r.eval(t, req).State)
		}
		exhaust(alice)
		exhaust(bob)

		// The user's own windows: alice's user burst is reset, but her
		// requests also count on her ip's windows (3 per second, per ip
		// whoever sends: docs/adr/013), which stay.
		res, err := r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionUser, User: " Alice.Martin@example.org", Actor: "support-42"})
		require.NoError(t, err)
		assert.Equal(t, 1, res.Deleted, "her user burst on the login profile; every other key counted nothing")
		assert.Greater(t, res.Keys, res.Deleted, "the user's windows on every profile and the façades")
		assert.Equal(t, domain.Throttled, r.eval(t, alice).State, "her ip windows still refuse")
		carol := app.Request{Route: routeLogin, ClientIP: rawIP, User: "carol@example.org"}
		assert.Equal(t, domain.Throttled, r.eval(t, carol).State, "so does anyone's from her ip")
		// The ip's windows are the ip's: a reset naming the ip alone
		// forgets them, whoever sent (docs/adr/013).
		res, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP, Actor: "support-42"})
		require.NoError(t, err)
		assert.Positive(t, res.Deleted)
		assert.Equal(t, domain.Allowed, r.eval(t, alice).State, "alice is unblocked")
		assert.Equal(t, domain.Throttled, r.eval(t, bob).State, "bob is not")

		resets := r.rec.Resets()
		require.Len(t, resets, 4, "each reset recorded before and after")
		assert.Equal(t, domain.DimensionUser, resets[0].Dimension)
		assert.Equal(t, "support-42", resets[0].Actor)
		assert.Len(t, resets[0].SubjectID, domain.PseudonymLen, "the subject is a pseudonym")
		assert.NotContains(t, resets[0].SubjectID, "alice")
		assert.False(t, resets[0].ClientIP.IsValid())
		assert.Equal(t, rawIP, resets[3].ClientIP, "an ip reset carries the raw ip for the audit channel")
		assert.NoError(t, resets[3].Err)

		// An anonymous client is reset by ip alone.
		anon := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("192.0.2.7")}
		exhaust(anon)
		_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: anon.ClientIP})
		require.NoError(t, err)
		assert.Equal(t, domain.Allowed, r.eval(t, anon).State)
	})
}

func TestResetRefusesBadRequests(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for name, req := range map[string]app.ResetRequest{
		"no dimension":            {User: rawUser},
		"user reset without user": {Dimension: domain.DimensionUser, ClientIP: rawIP},
		"ip reset without ip":     {Dimension: domain.DimensionIP, User: rawUser},
		"unknown profile":         {Dimension: domain.DimensionUser, User: rawUser, Profiles: []string{"nope"}},
		"invalid identity":        {Dimension: domain.DimensionUser, User: "a\x00b"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.l.Reset(ctx, req)
			var ce *domain.ContextError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, domain.ErrInvalidContext)
		})
	}
	assert.Empty(t, r.rec.Resets(), "nothing was reset")
}

// TestResetOfATenantCoversTheFacade: a tenant reset forgets the tenant's
// windows, its tenant-global windows and the façade's tenant layer.
func TestResetOfATenantCoversTheFacade(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for range 2 {
		ok, _, err := r.l.Allow(rawTenant, 2)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, _, err := r.l.Allow(rawTenant, 2)
	require.NoError(t, err)
	require.False(t, ok)
	d := r.eval(t, fullRequest(routeRead))
	require.Equal(t, int64(39), d.TenantRemaining)

	_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: rawTenant})
	require.NoError(t, err)
	ok, rem, err := r.l.Allow(rawTenant, 2)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1, rem)
	d = r.eval(t, fullRequest(routeRead))
	assert.Equal(t, int64(39), d.TenantRemaining, "the tenant's windows start afresh")

	// Limited to one profile, the façade is left alone.
	_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionTenant, Tenant: rawTenant, Profiles: []string{"users_read"}})
	require.NoError(t, err)
	ok, rem, err = r.l.Allow(rawTenant, 2)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 0, rem, "the façade's count was kept")
}

// TestResetClearsRememberedRefusals: a refusal the instance remembers
// does not outlive a reset of its keys.
func TestResetClearsRememberedRefusals(t *testing.T) {
	r := newRig(t, nil)
	req := app.Request{Route: routeLogin, ClientIP: rawIP}
	for range 3 {
		r.eval(t, req)
	}
	require.Equal(t, domain.Throttled, r.eval(t, req).State)
	d := r.eval(t, req)
	require.Equal(t, domain.SourceRefusalCache, d.Source, "the second refusal is remembered")
	_, err := r.l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP})
	require.NoError(t, err)
	assert.Equal(t, domain.Allowed, r.eval(t, req).State)
}

// TestResetReportsWhatItDeleted: a reset says how many keys held counts
// on the primary store, not how many it named: a user reset without the
// tenant that scopes the user's windows, or of a user already reset,
// deletes nothing and says so; a store that cannot tell is reported as
// such (-1).
func TestResetReportsWhatItDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, _ := newBackendRig(t, b, nil)
		ctx := context.Background()
		r.eval(t, fullRequest(routeRead))
		user := app.ResetRequest{Dimension: domain.DimensionUser, User: rawUser, Actor: "support-42"}

		res, err := r.l.Reset(ctx, user)
		require.NoError(t, err)
		assert.Equal(t, 0, res.Deleted, "the user's windows count within the tenant: without it, nothing matches")
		assert.Positive(t, res.Keys)

		user.Tenant = rawTenant
		res, err = r.l.Reset(ctx, user)
		require.NoError(t, err)
		assert.Equal(t, 2, res.Deleted, "the user's burst log and sustained GCRA key on users_read")
		res, err = r.l.Reset(ctx, user)
		require.NoError(t, err)
		assert.Equal(t, 0, res.Deleted, "already reset")

		resets := r.rec.Resets()
		require.Len(t, resets, 6)
		for i, want := range []int{-1, 0, -1, 2, -1, 0} {
			assert.Equal(t, want, resets[i].Deleted, "record %d", i)
			assert.Equal(t, i%2 == 1, resets[i].Done, "record %d", i)
		}
	})
	t.Run("store without Forgetter", func(t *testing.T) {
		l, _ := newJournaledLimiter(t, plainStore{conformance.NewReferenceStore()}, nil)
		res, err := l.Reset(context.Background(), app.ResetRequest{Dimension: domain.DimensionUser, User: rawUser})
		require.NoError(t, err)
		assert.Equal(t, -1, res.Deleted, "the store cannot say")
		assert.Positive(t, res.Keys)
	})
}

// TestResetIsAuditedBeforeItDeletes: the audit record of a reset is
// written before its first delete and its outcome after the last, so a
// process killed in between leaves the record of a reset begun; when the
// first record cannot be written, nothing is deleted.
func TestResetIsAuditedBeforeItDeletes(t *testing.T) {
	req := app.Request{Route: routeLogin, ClientIP: rawIP, User: rawUser}
	reset := app.ResetRequest{Dimension: domain.DimensionUser, User: rawUser, Actor: "support-42"}
	exhaust := func(t *testing.T, l *app.Limiter) {
		for range 3 {
			d, err := l.Evaluate(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, domain.Allowed, d.State)
		}
	}
	t.Run("order", func(t *testing.T) {
		store := &journalStore{Store: conformance.NewReferenceStore()}
		l, j := newJournaledLimiter(t, store, nil)
		store.j = j
		exhaust(t, l)
		res, err := l.Reset(context.Background(), reset)
		require.NoError(t, err)
		require.Equal(t, 1, res.Deleted)
		events := j.events()
		require.Len(t, events, res.Keys+2, "%v", events)
		assert.Equal(t, fmt.Sprintf("audit: begun, %d keys", res.Keys), events[0])
		for _, e := range events[1 : len(events)-1] {
			assert.True(t, strings.HasPrefix(e, "forget "), "every delete between the records: %v", events)
		}
		assert.Equal(t, "audit: done, 1 deleted", events[len(events)-1])
	})
	t.Run("audit refused", func(t *testing.T) {
		store := &journalStore{Store: conformance.NewReferenceStore()}
		l, j := newJournaledLimiter(t, store, errors.New("audit log full"))
		store.j = j
		exhaust(t, l)
		_, err := l.Reset(context.Background(), reset)
		require.ErrorContains(t, err, "audit log full")
		assert.Equal(t, []string{"audit refused"}, j.events(), "nothing deleted")
		d, err := l.Evaluate(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, domain.Throttled, d.State, "the user is still counted")
	})
}

// TestResetOfAnIPCoversEveryTenantAndItsSlash64: an ip's windows count
// per ip whoever sends (docs/adr/013), an IPv6 address as its /64: a
// reset naming an address and a tenant forgets the windows of every
// address of the /64 in every tenant, and its audit record says so (no
// tenant, the /64).
func TestResetOfAnIPCoversEveryTenantAndItsSlash64(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	a := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("2001:db8:1:2::a"), Tenant: "tenant-a"}
	b := app.Request{Route: routeLogin, ClientIP: netip.MustParseAddr("2001:db8:1:2::b"), Tenant: "tenant-b"}
	for _, req := range []app.Request{a, b, a} {
		require.Equal(t, domain.Allowed, r.eval(t, req).State)
	}
	require.Equal(t, domain.Throttled, r.eval(t, b).State, "one /64, one count across tenants")

	res, err := r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: netip.MustParseAddr("2001:db8:1:2::c"), Tenant: "tenant-a", Actor: "support-42"})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Deleted, "the /64's shared ip log")
	assert.Equal(t, domain.Allowed, r.eval(t, b).State, "tenant b's requests too")
	assert.Equal(t, domain.Allowed, r.eval(t, a).State)
	for _, rec := range r.rec.Resets() {
		assert.Empty(t, rec.TenantID, "an ip reset is not scoped to a tenant")
		assert.Equal(t, netip.MustParsePrefix("2001:db8:1:2::/64"), rec.ClientPrefix)
	}

	_, err = r.l.Reset(ctx, app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: netip.MustParseAddr("::ffff:192.0.2.7")})
	require.NoError(t, err)
	resets := r.rec.Resets()
	assert.Equal(t, netip.MustParsePrefix("192.0.2.7/32"), resets[len(resets)-1].ClientPrefix, "an IPv4 address alone")
}

// journal is the order in which a reset's deletes and audit records
// happened.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.log = append(j.log, fmt.Sprintf(format, args...))
}

func (j *journal) events() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.log...)
}

// journalStore writes each Forget in its journal.
type journalStore struct {
	ports.Store
	j *journal
}

func (s *journalStore) Forget(ctx context.Context, key string) (bool, error) {
	s.j.add("forget %s", key)
	return s.Store.(ports.Forgetter).Forget(ctx, key)
}

// journalRecorder writes each RecordReset in its journal, refusing the
// first record of a reset with fail.
type journalRecorder struct {
	recordertest.Discard
	j    *journal
	fail error
}

func (r *journalRecorder) RecordReset(_ context.Context, rec ports.ResetRecord) error {
	switch {
	case !rec.Done && r.fail != nil:
		r.j.add("audit refused")
		return r.fail
	case !rec.Done:
		r.j.add("audit: begun, %d keys", rec.Keys)
	default:
		r.j.add("audit: done, %d deleted", rec.Deleted)
	}
	return nil
}

// newJournaledLimiter is a Limiter on store whose reset records go to a
// journal.
func newJournaledLimiter(t *testing.T, store ports.Store, fail error) (*app.Limiter, *journal) {
	t.Helper()
	j := &journal{}
	l, err := app.New(testConfig(), app.Deps{Store: store, Fallback: conformance.NewReferenceStore(), Clock: fakeclock.New(t0), Recorder: &journalRecorder{j: j, fail: fail}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, j
}

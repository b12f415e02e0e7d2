package drills

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// TestForeignValues is issue 22 item 3's drill: one key of a user's
// decision holds what sluice did not write (a LIST, HASH, SET or STREAM
// where a sliding log belongs, a string that is no number where a GCRA
// state belongs). Every call on it fails the same way; each used to count
// as a store failure, and five of them opened the breaker for every
// tenant. Now each is that decision's own typed error
// (*domain.StoreValueError, ERR-STORE-05), degraded with cause
// store_value and written to the audit channel (a costly route: denied);
// the breaker never opens and every other user is counted exactly.
func TestForeignValues(t *testing.T) {
	obs := newObservability(t)
	tap := &errTap{}
	r := newRig(t, rigOptions{patient: true, recorder: tee{obs.rec, tap}})
	ctx := context.Background()

	cases := []struct {
		name, route string
		write       func(key string) []string
	}{
		{"list", routeQuota, func(k string) []string { return []string{"RPUSH", k, "x"} }},
		{"hash", routeQuota, func(k string) []string { return []string{"HSET", k, "f", "v"} }},
		{"set", routeQuota, func(k string) []string { return []string{"SADD", k, "m"} }},
		{"stream", routeQuota, func(k string) []string { return []string{"XADD", k, "*", "f", "v"} }},
		{"malformed gcra", routeBursts, func(k string) []string { return []string{"SET", k, "not-a-number"} }},
	}
	const calls = 4 * app.DefaultBreakerFailures
	for _, tc := range cases {
		user := "Foreign." + strings.ReplaceAll(tc.name, " ", "-") + "@Example.COM"
		req := app.Request{Route: tc.route, ClientIP: rawIP(3), User: user}
		before := sluiceKeys(t, r.srv)
		if d, _ := r.lim.Evaluate(ctx, req); d.State != domain.Allowed {
			t.Fatalf("%s: first decision %s (%s)", tc.name, d.State, d.Cause)
		}
		var key string
		for _, k := range sluiceKeys(t, r.srv) {
			if !slices.Contains(before, k) {
				key = k
			}
		}
		if _, err := r.srv.Do(ctx, "DEL", key); err != nil {
			t.Fatal(err)
		}
		if _, err := r.srv.Do(ctx, tc.write(key)...); err != nil {
			t.Fatal(err)
		}
		tap.reset()
		for range calls {
			d, err := r.lim.Evaluate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d.State != domain.DeniedDegraded || d.Cause != domain.CauseStoreValue || !d.Degraded {
				t.Errorf("%s: decision %s cause %s degraded %t; want DENIED_DEGRADED, store_value", tc.name, d.State, d.Cause, d.Degraded)
			}
		}
		for _, err := range tap.all() {
			var sve *domain.StoreValueError
			if !errors.As(err, &sve) || domain.CodeOf(err) != domain.CodeStoreValue {
				t.Errorf("%s: recorded error %v, want a *domain.StoreValueError (%s)", tc.name, err, domain.CodeStoreValue)
				continue
			}
			if tc.name != "malformed gcra" && (sve.Index != 0 || sve.Key != key) {
				t.Errorf("%s: error names limit %d key %q, want 0 %q", tc.name, sve.Index, sve.Key, key)
			}
		}
		figure(t, "foreign."+strings.ReplaceAll(tc.name, " ", "_"), "%d decisions, each DENIED_DEGRADED cause store_value: %v", calls, tap.first())
	}
	if tr := r.journal.allTransitions(); len(tr) != 0 {
		t.Errorf("foreign values opened the breaker: %v", tr)
	}
	audited := 0
	for _, line := range obs.audit.lines() {
		if strings.Contains(line, `"cause":"store_value"`) {
			audited++
		}
	}
	if audited != len(cases)*calls {
		t.Errorf("%d audit records with cause store_value, want %d", audited, len(cases)*calls)
	}
	checkExact(t, r.lim, "Exact.After-Foreign@Example.COM")
}

// errTap is a Recorder that keeps the errors of the decisions.
type errTap struct {
	mu   sync.Mutex
	errs []error
}

func (e *errTap) RecordDecision(_ context.Context, rec ports.DecisionRecord) error {
	if rec.Err != nil {
		e.mu.Lock()
		e.errs = append(e.errs, rec.Err)
		e.mu.Unlock()
	}
	return nil
}

func (e *errTap) RecordTransition(context.Context, domain.StateChange, time.Time) error { return nil }
func (e *errTap) RecordStoreCall(context.Context, ports.StoreCall)                      {}
func (e *errTap) RecordReset(context.Context, ports.ResetRecord) error                  { return nil }

func (e *errTap) reset() {
	e.mu.Lock()
	e.errs = nil
	e.mu.Unlock()
}

func (e *errTap) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

func (e *errTap) first() error {
	if errs := e.all(); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

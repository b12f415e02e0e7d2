package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// rawStrings are what no metric label or application log may hold; the
// audit log may hold the ip (on refusals and resets) and routes only.
var rawIdentities = []string{rawUser, strings.ToLower(rawUser), rawTenant, rawAPIKey}

// TestLogChannels captures both channels through the script and a reset:
// the application log holds no raw ip, identifier or route; the audit log
// holds the raw ip exactly on THROTTLED and DENIED_DEGRADED decisions (and
// the reset), and no raw identifier anywhere.
func TestLogChannels(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	script(t, e)
	// Support resets the ip while the breaker is open (refused, recorded),
	// then again once the store is back.
	reset := app.ResetRequest{Dimension: domain.DimensionIP, ClientIP: rawIP, Actor: "support:bob"}
	_, err := e.lim.Reset(context.Background(), reset)
	require.ErrorIs(t, err, app.ErrBreakerOpen)
	e.primary.down.Store(false)
	for range 3 {
		_, err := e.lim.ProbeOnce(context.Background())
		require.NoError(t, err)
	}
	require.Equal(t, domain.Healthy, e.lim.SystemState())
	res, err := e.lim.Reset(context.Background(), reset)
	require.NoError(t, err)
	require.Positive(t, res.Deleted)

	appText := e.app.text()
	for _, raw := range append([]string{rawIP.String(), "/api/v1", "not a route", `bad\u0000user`, "support:bob"}, rawIdentities...) {
		assert.NotContains(t, appText, raw)
	}
	states := map[string]int{}
	for _, r := range e.app.records(t) {
		if r["msg"] == otel.MsgDecision {
			states[r["decision_state"].(string)]++
		}
	}
	assert.Equal(t, map[string]int{
		"ALLOWED": 6, "THROTTLED": 4, "REJECTED_INVALID_CONTEXT": 4, "BYPASS_DEGRADED": 2, "DENIED_DEGRADED": 2,
	}, states, "every decision reaches the application log")
	var transitions []string
	for _, r := range e.app.records(t) {
		if r["msg"] == otel.MsgTransition {
			transitions = append(transitions, r["from"].(string)+"→"+r["to"].(string))
		}
	}
	assert.Equal(t, []string{"HEALTHY→DEGRADED", "DEGRADED→RECOVERING", "RECOVERING→HEALTHY"}, transitions)
	assert.Contains(t, appText, tenantPseudonym(t), "tenants appear as their pseudonym")

	auditText := e.audit.text()
	for _, raw := range rawIdentities {
		assert.NotContains(t, auditText, raw)
	}
	withIP := map[string]int{}
	for _, r := range e.audit.records(t) {
		ip, hasIP := r["client_ip"]
		line := strings.Join(valuesOf(r), " ")
		switch r["msg"] {
		case otel.MsgRefusal:
			state := r["decision_state"].(string)
			require.Contains(t, []string{"THROTTLED", "DENIED_DEGRADED"}, state)
			require.Equal(t, rawIP.String(), ip)
			withIP[state]++
		case otel.MsgReset:
			require.Equal(t, rawIP.String(), ip)
			require.Equal(t, rawIP.String()+"/32", r["client_prefix"])
			require.Equal(t, "support:bob", r["actor"])
			withIP["reset "+r["phase"].(string)]++
			if r["phase"] == "done" && r["error"] == nil {
				require.EqualValues(t, res.Deleted, r["deleted"], "the keys the store held")
			}
		case otel.MsgInvalid:
			require.False(t, hasIP)
			require.NotContains(t, line, rawIP.String())
			require.Contains(t, r, "route")
		default:
			t.Fatalf("unexpected audit record %v", r)
		}
	}
	assert.Equal(t, map[string]int{"THROTTLED": 4, "DENIED_DEGRADED": 2, "reset begun": 2, "reset done": 2}, withIP, "each reset (one refused, one done) recorded before and after")
	assert.Contains(t, auditText, `"route":"not a route"`)
}

func valuesOf(m map[string]any) []string {
	var out []string
	for _, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestAuditRouteBounded: a hostile route is cut before it reaches the
// audit log.
func TestAuditRouteBounded(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	long := "/" + strings.Repeat("é", 400)
	require.Equal(t, domain.RejectedInvalidContext, e.decide(t, app.Request{Route: long, ClientIP: rawIP}).State)
	recs := e.audit.records(t)
	require.Len(t, recs, 1)
	route := recs[0]["route"].(string)
	assert.LessOrEqual(t, len(route), 300)
	assert.True(t, strings.HasPrefix(long, route))
	assert.Equal(t, true, recs[0]["route_truncated"])
}

// TestRecorderFailureReachesCaller: a log write that fails, on either
// channel, and a closed recorder are errors of Evaluate and ProbeOnce;
// the decision itself is still complete.
func TestRecorderFailureReachesCaller(t *testing.T) {
	diskFull := errors.New("disk full")
	login := app.Request{Route: routeLogin, ClientIP: rawIP}

	t.Run("audit channel on a refusal", func(t *testing.T) {
		e := newEnv(t, testConfig(), nil)
		e.audit.setFail(diskFull)
		for range 2 {
			e.decide(t, login) // allowed: nothing for the audit log
		}
		d, err := e.lim.Evaluate(context.Background(), login)
		require.ErrorIs(t, err, diskFull)
		assert.Contains(t, err.Error(), "audit log")
		assert.Equal(t, domain.Throttled, d.State)
	})
	t.Run("application channel", func(t *testing.T) {
		e := newEnv(t, testConfig(), nil)
		e.app.setFail(diskFull)
		d, err := e.lim.Evaluate(context.Background(), login)
		require.ErrorIs(t, err, diskFull)
		assert.Contains(t, err.Error(), "application log")
		assert.Equal(t, domain.Allowed, d.State)
	})
	t.Run("transition", func(t *testing.T) {
		e := newEnv(t, testConfig(), nil)
		e.primary.down.Store(true)
		e.app.setFail(diskFull)
		_, err := e.lim.ProbeOnce(context.Background())
		require.ErrorIs(t, err, diskFull)
		assert.Equal(t, domain.Degraded, e.lim.SystemState())
	})
	t.Run("closed recorder", func(t *testing.T) {
		e := newEnv(t, testConfig(), nil)
		require.NoError(t, e.rec.Close())
		d, err := e.lim.Evaluate(context.Background(), login)
		require.ErrorIs(t, err, otel.ErrClosed)
		assert.Equal(t, domain.Allowed, d.State)
		require.ErrorIs(t, e.rec.RecordReset(context.Background(), ports.ResetRecord{}), otel.ErrClosed)
		require.ErrorIs(t, e.rec.RecordTransition(context.Background(), domain.StateChange{From: domain.Healthy, To: domain.Degraded}, t0), otel.ErrClosed)
	})
}

// TestAuditUnknownRouteNamesTheRequest (issue 15 item 2): a request no
// route matches is audited with the method and the path asked for, cut to
// their bound and with control characters escaped; neither reaches the
// application log nor a metric.
func TestAuditUnknownRouteNamesTheRequest(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	cases := []struct {
		method, path         string
		wantMethod, wantPath string
		methodCut, pathCut   bool
	}{
		{"GET", "/api/v1/nowhere", "GET", "/api/v1/nowhere", false, false},
		{"DELETE", "/a\nforged: line\x1b[31m\u202e\\x41", "DELETE", `/a\u000aforged: line\u001b[31m\u202e\\x41`, false, false},
		{"PUT", "/bad\xffutf8", "PUT", `/bad\xffutf8`, false, false},
		{strings.Repeat("M", 40), "/" + strings.Repeat("é", 200), strings.Repeat("M", 32), "/" + strings.Repeat("é", 127), true, true},
	}
	for _, c := range cases {
		d := e.decide(t, app.Request{ClientIP: rawIP, Method: c.method, Path: c.path})
		require.Equal(t, domain.RejectedInvalidContext, d.State)
		require.Equal(t, domain.CauseRouteInvalid, d.Cause)
		recs := e.audit.records(t)
		r := recs[len(recs)-1]
		assert.Equal(t, otel.MsgInvalid, r["msg"])
		assert.Equal(t, c.wantMethod, r["requested_method"], "%q", c.method)
		assert.Equal(t, c.wantPath, r["requested_path"], "%q", c.path)
		_, cut := r["requested_method_truncated"]
		assert.Equal(t, c.methodCut, cut)
		_, cut = r["requested_path_truncated"]
		assert.Equal(t, c.pathCut, cut)
	}
	assert.NotContains(t, e.audit.text(), "\n/", "no raw line break reaches the audit log")
	appText := e.app.text()
	for _, raw := range []string{"nowhere", "forged", "requested_", "bad"} {
		assert.NotContains(t, appText, raw, "the application log never names the request")
	}
	for name, mf := range scrape(t, e.srv.URL, "") {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.NotContains(t, l.GetValue(), "nowhere", name)
			}
		}
	}
}

package drills

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRestart says what a restart of Redis does to the counts, per
// persistence setting and kind of stop: a user spends the whole quota on
// instance A, Redis goes down and comes back, and a peek tells whether
// the spent quota is remembered. Forgotten counts mean that, within one
// window, a client may pass up to twice its limit. Instance A keeps
// repeating the refusal it got before the restart from its refusal cache
// until that refusal's retry-after, even when Redis has forgotten the
// counts; instance B, which never refused the user, counts afresh.
func TestRestart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		persistence redistest.Persistence
		kill        bool // SIGKILL instead of a graceful stop
		kept        bool
	}{
		{"no persistence, graceful restart", redistest.PersistNone, false, false},
		{"no persistence, killed", redistest.PersistNone, true, false},
		{"RDB, graceful restart (snapshot on shutdown)", redistest.PersistRDB, false, true},
		{"RDB, killed (no snapshot since the writes)", redistest.PersistRDB, true, false},
		{"AOF fsync always, killed", redistest.PersistAOF, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := newRig(t, rigOptions{server: redistest.Config{Persistence: c.persistence}, patient: true})
			b := newRig(t, rigOptions{srv: a.srv, instance: "drill-2", patient: true})
			user := checkExact(t, a.lim, "Restart.User@Example.COM")
			req := app.Request{Route: routeQuota, ClientIP: rawIP(0), User: user}
			stop := a.srv.Stop
			if c.kill {
				stop = a.srv.Kill
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := a.srv.Start(); err != nil {
				t.Fatal(err)
			}
			left := quotaLeft(t, a.lim, user)
			want := int64(quotaLimit)
			if c.kept {
				want = 0
			}
			if left != want {
				t.Fatalf("after the restart %d of %d reports are left, want %d", left, quotaLimit, want)
			}
			if d := decide(t, a.lim, req); d.State != domain.Throttled || d.Source != domain.SourceRefusalCache {
				t.Fatalf("instance A after the restart: %s from %s; want its cached refusal repeated", d.State, d.Source)
			}
			// Instance B counts on from what Redis remembers, exactly.
			waitFor(t, settle, "instance B to reach Redis", func() bool { return quotaLeft(t, b.lim, user) == want })
			for range left {
				if d := decide(t, b.lim, req); d.State != domain.Allowed || d.Source != domain.SourcePrimary {
					t.Fatalf("instance B after the restart: %s from %s (%s)", d.State, d.Source, d.Cause)
				}
			}
			if d := decide(t, b.lim, req); d.State != domain.Throttled || d.Source != domain.SourcePrimary {
				t.Fatalf("instance B past the quota: %s from %s", d.State, d.Source)
			}
			figure(t, "restart."+figureName(c.name), "counts %s; %d reports passed in one %d-report window",
				map[bool]string{true: "kept", false: "forgotten"}[c.kept], quotaLimit+int(want), quotaLimit)
		})
	}
}

// quotaLeft peeks at the quota of user once the Limiter reaches Redis
// again (the store reconnects on the first call after a restart).
func quotaLeft(t *testing.T, lim *app.Limiter, user string) int64 {
	t.Helper()
	var d domain.Decision
	waitFor(t, settle, "Redis to answer a peek", func() bool {
		var err error
		d, err = lim.Peek(context.Background(), app.Request{Route: routeQuota, ClientIP: rawIP(0), User: user})
		return err == nil
	})
	return d.Remaining
}

// decide evaluates req, failing the test on a recorder error.
func decide(t *testing.T, lim *app.Limiter, req app.Request) domain.Decision {
	t.Helper()
	d, err := lim.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// figureName turns a subtest name into a figure key.
func figureName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, s)
}

// TestScriptFlush flushes Redis' script cache under steady traffic: the
// store sends the script again (EVAL) on NOSCRIPT, no decision fails for
// it, and the counts stay exact.
func TestScriptFlush(t *testing.T) {
	r := newRig(t, rigOptions{})
	tr := startTraffic(t, r.lim, 8, standardFlows())
	steady(t, r, time.Second)
	ctx := context.Background()
	evalsBefore := commandCalls(t, r.srv, "eval")
	tr.enter(phaseOutage)
	if _, err := r.srv.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * probeInterval)
	tr.stop()
	tr.checkClean(t)
	evals := commandCalls(t, r.srv, "eval") - evalsBefore
	flushed := tr.tally(phaseOutage)
	if n := flushed.count(func(k outcomeKey) bool { return k.cause == domain.CauseStoreUnavailable }); n > 0 {
		t.Errorf("%d decisions failed with the store unavailable after the flush:%s", n, flushed.summary())
	}
	if evals < 1 {
		t.Errorf("no EVAL after the flush: the script was not sent again")
	}
	all := []int32{phaseSteady, phaseOutage}
	counted := ledgerCount(t, r.lim)
	adm, maybe := tr.sum(admitted, "ledger", all...), tr.sum(uncertain, "ledger", all...)
	if counted < adm || counted > adm+maybe {
		t.Errorf("the ledger holds %d units for %d admitted requests (%d uncertain)", counted, adm, maybe)
	}
	p50, p99, worst := flushed.latencies()
	figure(t, "scriptflush", "%d full-script EVALs after one SCRIPT FLUSH under %d workers; %d decisions, none failed, %d missed the deadline; latency p50 %s p99 %s worst %s",
		evals, tr.workers, flushed.decisions, flushed.count(func(k outcomeKey) bool { return k.cause == domain.CauseStoreTimeout }), ms(p50), ms(p99), ms(worst))
	// The script is cached again: exact decisions from here on send it by
	// its SHA1 only.
	evalsAfter := commandCalls(t, r.srv, "eval")
	checkExact(t, r.lim, "Exact.After-Flush@Example.COM")
	if n := commandCalls(t, r.srv, "eval") - evalsAfter; n != 0 {
		t.Errorf("%d more EVALs once the script was cached again", n)
	}
}

// commandCalls reads calls= of cmdstat_<name> from INFO commandstats.
func commandCalls(t *testing.T, srv *redistest.Server, name string) int {
	t.Helper()
	v, err := srv.Do(context.Background(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(fmt.Sprint(v)) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}

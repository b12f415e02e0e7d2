package drills

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/domain"
)

// outageCauses are the causes of a decision the shared store did not
// make: the breaker was open, or the call failed or timed out.
var outageCauses = []domain.Cause{domain.CauseBreakerOpen, domain.CauseStoreUnavailable, domain.CauseStoreTimeout}

// degradedAnswer reports whether k is what the default degraded matrix
// answers while the store cannot (docs/adr/005): reads bypass under the
// per-client cap, auth and costly routes are denied with Retry-After 1 s;
// a refusal the store gave moments before may be repeated from the
// refusal cache on any route.
func degradedAnswer(k outcomeKey) bool {
	switch {
	case k.state == domain.Throttled && k.source == domain.SourceRefusalCache:
		return true
	case k.family == domain.FamilyRead && k.state == domain.BypassDegraded:
		return k.source == domain.SourceFallback && slices.Contains(outageCauses, k.cause)
	case k.family == domain.FamilyRead && k.state == domain.DeniedDegraded:
		return k.cause == domain.CauseLocalCapExceeded && k.retryAfter >= domain.DeniedRetryAfter
	case k.state == domain.DeniedDegraded:
		return k.retryAfter == domain.DeniedRetryAfter && slices.Contains(outageCauses, k.cause)
	}
	return false
}

// primaryAnswer reports whether the shared store decided k.
func primaryAnswer(k outcomeKey) bool {
	return (k.state == domain.Allowed || k.state == domain.Throttled) && k.source == domain.SourcePrimary
}

// checkDegradedPhase asserts that every decision of tl is a degraded
// answer, but at most straddle decided by the primary store (requests
// that read the breaker closed an instant before it opened, or after it
// closed while the phase had not yet been switched: one per worker at
// most), and that no decision waited past the store deadline plus the
// margin.
func checkDegradedPhase(t *testing.T, name string, tl *tally, straddle int) {
	t.Helper()
	if tl.decisions == 0 {
		t.Errorf("%s: no decision at all", name)
		return
	}
	primary := tl.count(primaryAnswer)
	if primary > straddle {
		t.Errorf("%s: %d decisions from the primary store while it could not answer (at most %d may straddle the switch):%s", name, primary, straddle, tl.summary())
	}
	if other := tl.count(func(k outcomeKey) bool { return !degradedAnswer(k) && !primaryAnswer(k) }); other > 0 {
		t.Errorf("%s: %d decisions outside the degraded matrix:%s", name, other, tl.summary())
	}
	if tl.worst > storeTimeout+latencyMargin {
		t.Errorf("%s: a decision took %s, past the %s deadline plus the %s margin", name, tl.worst, storeTimeout, latencyMargin)
	}
}

// checkBypassCap asserts that no read client was let through more often
// than the per-instance cap over the whole drill (shorter than the cap's
// period), and that some client reached it.
func checkBypassCap(t *testing.T, tr *traffic) {
	t.Helper()
	per := map[string]int{}
	tr.mu.Lock()
	for _, tl := range tr.tallies {
		for c, n := range tl.bypassed {
			per[c] += n
		}
	}
	tr.mu.Unlock()
	reached := false
	for c, n := range per {
		if n > readCap {
			t.Errorf("read client %q bypassed %d times, over the cap of %d", c, n, readCap)
		}
		reached = reached || n == readCap
	}
	if !reached {
		t.Errorf("no read client reached the cap of %d: %v", readCap, per)
	}
}

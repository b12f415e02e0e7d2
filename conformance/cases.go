package conformance

import (
	"time"

	"github.com/sluicehq/sluice/domain"
)

// cases lists the properties every store must have, each named for what it
// proves. Expected values are worked out by hand from the semantics in
// domain (SlidingLog: units inside (now-Period, now]; GCRA: emission
// interval T = Period/Limit truncated to the microsecond) and written down
// literally, so a store that merely shares a bug with the domain package
// still fails.
//
// The cases that are not scripted send every request at t0 and use
// windows of minutes, so they hold on a store that reads its own clock:
// no unit can leave a window, or come back to GCRA, while they run.
func cases() []testCase {
	list := []testCase{
		// At one instant: these hold on any clock.
		{name: "SlidingLogAdmitsExactlyLimit", run: slidingLogAdmitsExactlyLimit},
		{name: "GCRAAdmitsExactlyLimitAsBurst", run: gcraAdmitsExactlyLimitAsBurst},
		{name: "GCRABurstCapacityUsesTruncatedEmissionInterval", run: gcraBurstCapacityUsesTruncatedEmissionInterval},
		{name: "GCRAHandlesTheLargestWindow", run: gcraHandlesTheLargestWindow},
		{name: "CostConsumesThatManyUnits", run: costConsumesThatManyUnits},
		{name: "CostThatDoesNotFitIsRefusedWhileSmallerCostPasses", run: costThatDoesNotFitIsRefusedWhileSmallerCostPasses},
		{name: "KeysAreIsolated", run: keysAreIsolated},
		{name: "AllOrNothingAcrossNineKeys", run: allOrNothingAcrossNineKeys},
		{name: "RefusalReportsLongestRetryAfter", run: refusalReportsLongestRetryAfter},
		{name: "AllowedReportsLeastRemaining", run: allowedReportsLeastRemaining},
		{name: "PeekConsumesNothing", run: peekConsumesNothing},
		{name: "ResetForgetsOnlyThatKey", run: resetForgetsOnlyThatKey},
		{name: "ResetOfUnknownKeyIsNoError", run: resetOfUnknownKeyIsNoError},
		{name: "ForgetReportsWhatTheKeyHeld", run: forgetReportsWhatTheKeyHeld},
		{name: "CancelledContextIsAnErrorAndConsumesNothing", run: cancelledContextIsAnErrorAndConsumesNothing},
		{name: "ExpiredDeadlineIsAnError", run: expiredDeadlineIsAnError},
		{name: "InvalidRequestIsRejectedAndConsumesNothing", run: invalidRequestIsRejectedAndConsumesNothing},
		{name: "RequestsAtTheBoundsAreAccepted", run: requestsAtTheBoundsAreAccepted},
		{name: "ConcurrentRequestsOnOneKeyAdmitExactlyLimit", run: concurrentRequestsOnOneKeyAdmitExactlyLimit},
		{name: "ConcurrentRequestsAcrossTwoKeysAreAllOrNothing", run: concurrentRequestsAcrossTwoKeysAreAllOrNothing},
		{name: "LimitsSliceIsNotKeptAfterTheCall", run: limitsSliceIsNotKeptAfterTheCall},
		{name: "ClosedStoreReturnsErrStoreClosed", run: closedStoreReturnsErrStoreClosed},

		// Timelines: they move the caller's clock.
		{name: "SlidingLogUnitsLeaveExactlyOnePeriodLater", scripted: true, run: slidingLogUnitsLeaveExactlyOnePeriodLater},
		{name: "SlidingLogRetryAfterWaitsForEnoughOldestUnits", scripted: true, run: slidingLogRetryAfterWaitsForEnoughOldestUnits},
		{name: "SlidingLogResetAfterIsWhenNewestUnitLeaves", scripted: true, run: slidingLogResetAfterIsWhenNewestUnitLeaves},
		{name: "GCRARetryAfterUsesTruncatedEmissionInterval", scripted: true, run: gcraRetryAfterUsesTruncatedEmissionInterval},
		{name: "GCRARefillsOneUnitPerEmissionInterval", scripted: true, run: gcraRefillsOneUnitPerEmissionInterval},
		{name: "GCRAEmissionIntervalIsAtLeastOneMicrosecond", scripted: true, run: gcraEmissionIntervalIsAtLeastOneMicrosecond},
		{name: "MinPeriodWindowsRefillAfterOneMillisecond", scripted: true, run: minPeriodWindowsRefillAfterOneMillisecond},
		{name: "SlidingLogAndGCRAInOneRequest", scripted: true, run: slidingLogAndGCRAInOneRequest},
		{name: "PeekAgreesWithEvaluate", scripted: true, run: peekAgreesWithEvaluate},
		{name: "ClockBackwardsNeverAdmitsMoreThanLimit", scripted: true, run: clockBackwardsNeverAdmitsMoreThanLimit},
		{name: "ClockJitterNeverAdmitsMoreThanLimit", scripted: true, run: clockJitterNeverAdmitsMoreThanLimit},

		// Beyond ports.Store: stores of one fleet.
		{name: "TwoStoresShareTheirCounts", shared: true, run: twoStoresShareTheirCounts},
	}
	// The cases above live by theme: algorithms.go, requests.go,
	// clocks.go, contract.go, concurrency.go. Changes of a key's window,
	// and instants out of order (changes.go); the optional ports.Reserver
	// (reservations.go) and ports.Allotter (allotments.go); shared logs
	// (sharedlogs.go), the optional
	// ports.Repeater (repeated.go) and ports.Batcher (batches.go).
	list = append(list, changeCases()...)
	list = append(list, batchCases()...)
	list = append(list, reservationCases()...)
	list = append(list, allotmentCases()...)
	list = append(list, sharedLogCases()...)
	return append(list, testCase{name: "RepeatedRequestsAnswerAsSequentialOnes", run: repeatedRequestsAnswerAsSequentialOnes})
}

// algorithms lists both algorithms, for properties that hold for each.
var algorithms = []domain.Algorithm{domain.SlidingLog, domain.GCRA}

func window(a domain.Algorithm, limit int64, period time.Duration) domain.Window {
	return domain.Window{Name: "w", Limit: limit, Period: period, Algorithm: a}
}

func limitOf(key string, w domain.Window, cost int64) domain.Limit {
	return domain.Limit{Key: key, Window: w, Cost: cost}
}

// forEachAlgorithm runs f once per algorithm, as parallel subtests named
// after it, each with its own keys (the namespace is shared; the key names
// differ).
func (e *env) forEachAlgorithm(f func(e *env, a domain.Algorithm)) {
	for _, a := range algorithms {
		e.t.Run(a.String(), func(t tb) {
			t.Parallel()
			f(e.sub(t, a.String()+":"), a)
		})
	}
}

package main

import (
	"testing"

	"github.com/sluicehq/sluice/bench/internal/report"
)

func TestMedianSetsFailedRoundsAside(t *testing.T) {
	ms := []report.Measurement{
		{PerSecond: 300},
		{PerSecond: 900, Errors: 4, FirstError: "stall"},
		{PerSecond: 100},
		{PerSecond: 200},
	}
	m := median(ms)
	if m.PerSecond != 200 || m.Errors != 0 || m.Rounds != 4 || m.FailedRounds != 1 {
		t.Errorf("median = %v/s, %d errors, %d rounds, %d failed; want 200/s, 0, 4, 1", m.PerSecond, m.Errors, m.Rounds, m.FailedRounds)
	}
	if m.FirstError == "" {
		t.Error("the failure of the round set aside is not told")
	}
	all := median([]report.Measurement{{PerSecond: 5, Errors: 1, FirstError: "x"}, {PerSecond: 7, Errors: 2}})
	if all.Errors == 0 || all.FailedRounds != 2 {
		t.Errorf("every round failed: %d errors, %d failed rounds; want the failure kept", all.Errors, all.FailedRounds)
	}
}

package domain

import "fmt"

// SystemState is the health of the store as seen by one instance.
type SystemState uint8

const (
	// Healthy: probes pass; the breaker is closed.
	Healthy SystemState = iota
	// Degraded: the last probe failed; the breaker is open.
	Degraded
	// Recovering: probes pass again, not yet enough in a row.
	Recovering
)

// String returns "HEALTHY", "DEGRADED" or "RECOVERING".
func (s SystemState) String() string {
	switch s {
	case Healthy:
		return "HEALTHY"
	case Degraded:
		return "DEGRADED"
	case Recovering:
		return "RECOVERING"
	}
	return fmt.Sprintf("SYSTEM_STATE(%d)", uint8(s))
}

// HealthEvent is what drives the machine: the outcome of one probe.
type HealthEvent uint8

const (
	// ProbeOK: the store answered the probe.
	ProbeOK HealthEvent = iota + 1
	// ProbeFailed: the store did not answer the probe.
	ProbeFailed
)

// String returns "probe_ok" or "probe_failed".
func (e HealthEvent) String() string {
	switch e {
	case ProbeOK:
		return "probe_ok"
	case ProbeFailed:
		return "probe_failed"
	}
	return fmt.Sprintf("health_event(%d)", uint8(e))
}

// DefaultClearingProbes is how many consecutive good probes take the
// machine from DEGRADED back to HEALTHY (docs/adr/005:
// degraded_clearing_cycles = 3).
const DefaultClearingProbes = 3

// CheckTransition returns nil for the four transitions the machine lists
// (HEALTHY→DEGRADED, DEGRADED→RECOVERING, RECOVERING→HEALTHY,
// RECOVERING→DEGRADED) and an error wrapping ErrInvalidTransition for any
// other change of state.
func CheckTransition(from, to SystemState) error {
	switch {
	case from == Healthy && to == Degraded,
		from == Degraded && to == Recovering,
		from == Recovering && to == Healthy,
		from == Recovering && to == Degraded:
		return nil
	}
	return fmt.Errorf("%w: %s → %s", ErrInvalidTransition, from, to)
}

// StateChange is one transition of the machine.
type StateChange struct {
	From, To SystemState
}

// HealthMachine is the system health state machine of docs/adr/005. It
// is a value: Apply returns the next machine and never mutates its
// receiver. The zero value is HEALTHY with DefaultClearingProbes.
type HealthMachine struct {
	state    SystemState
	good     int // consecutive good probes while RECOVERING
	clearing int // good probes in a row needed to leave DEGRADED; 0 = default
}

// NewHealthMachine returns a HEALTHY machine that needs clearing consecutive
// good probes (the first one included) to go from DEGRADED back to HEALTHY.
// clearing < 1 means DefaultClearingProbes; 1 behaves as 2, since the path
// DEGRADED → RECOVERING → HEALTHY takes two probes.
func NewHealthMachine(clearing int) HealthMachine {
	return HealthMachine{clearing: clearing}
}

// State returns the current state.
func (m HealthMachine) State() SystemState { return m.state }

func (m HealthMachine) clearingProbes() int {
	if m.clearing < 1 {
		return DefaultClearingProbes
	}
	// The machine lists no DEGRADED → HEALTHY edge, so leaving DEGRADED
	// takes two good probes at least.
	return max(m.clearing, 2)
}

// Apply is the pure transition function: it returns the machine after ev
// and, when the state changed, the change (ok true).
//
//	HEALTHY    + ProbeFailed → DEGRADED
//	DEGRADED   + ProbeOK     → RECOVERING (1 good probe)
//	RECOVERING + ProbeOK     → RECOVERING, or HEALTHY at the clearing count
//	RECOVERING + ProbeFailed → DEGRADED (count reset)
//
// Every other pair leaves the state unchanged. An unknown event is refused
// with ErrInvalidTransition.
func (m HealthMachine) Apply(ev HealthEvent) (next HealthMachine, change StateChange, changed bool, err error) {
	if ev != ProbeOK && ev != ProbeFailed {
		return m, StateChange{}, false, fmt.Errorf("%w: unknown event %s", ErrInvalidTransition, ev)
	}
	next = m
	switch m.state {
	case Healthy:
		if ev == ProbeFailed {
			next.state = Degraded
		}
	case Degraded:
		if ev == ProbeOK {
			next.state, next.good = Recovering, 1
		}
	case Recovering:
		if ev == ProbeFailed {
			next.state, next.good = Degraded, 0
		} else {
			next.good++
			if next.good >= m.clearingProbes() {
				next.state, next.good = Healthy, 0
			}
		}
	default:
		return m, StateChange{}, false, fmt.Errorf("%w: unknown state %s", ErrInvalidTransition, m.state)
	}
	if next.state == m.state {
		return next, StateChange{}, false, nil
	}
	if err := CheckTransition(m.state, next.state); err != nil {
		return m, StateChange{}, false, err
	}
	return next, StateChange{From: m.state, To: next.state}, true, nil
}

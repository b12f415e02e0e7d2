// Package recordertest provides ports.Recorder implementations for tests
// and benchmarks, in the manner of net/http/httptest: Discard records
// nothing, Memory keeps everything it is given. Neither is an observability
// pipeline: production services record through adapters/otel, which
// exports metrics and writes the application and security-audit logs.
package recordertest

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// Discard is a ports.Recorder that drops everything and never fails: for
// benchmarks and for tests that do not look at what is recorded. Its zero
// value is ready to use.
type Discard struct{}

var _ ports.Recorder = Discard{}

// RecordDecision does nothing.
func (Discard) RecordDecision(context.Context, ports.DecisionRecord) error { return nil }

// RecordTransition does nothing.
func (Discard) RecordTransition(context.Context, domain.StateChange, time.Time) error { return nil }

// RecordStoreCall does nothing.
func (Discard) RecordStoreCall(context.Context, ports.StoreCall) {}

// RecordReset does nothing.
func (Discard) RecordReset(context.Context, ports.ResetRecord) error { return nil }

// Transition is one recorded health transition.
type Transition struct {
	Change domain.StateChange
	At     time.Time
}

// Memory is a ports.Recorder that keeps every record, in order, and can be
// told to fail. It is safe for simultaneous use; its zero value is ready to
// use. Memory grows without bound: keep it to tests.
type Memory struct {
	mu          sync.Mutex
	decisions   []ports.DecisionRecord
	transitions []Transition
	calls       []ports.StoreCall
	resets      []ports.ResetRecord
	failDecide  error
	failTrans   error
	failReset   error
}

var _ ports.Recorder = (*Memory)(nil)

// RecordDecision keeps rec and returns the error set by FailDecisions.
func (m *Memory) RecordDecision(_ context.Context, rec ports.DecisionRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decisions = append(m.decisions, rec)
	return m.failDecide
}

// RecordTransition keeps the change and returns the error set by
// FailTransitions.
func (m *Memory) RecordTransition(_ context.Context, c domain.StateChange, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.transitions = append(m.transitions, Transition{Change: c, At: at})
	return m.failTrans
}

// RecordStoreCall keeps call.
func (m *Memory) RecordStoreCall(_ context.Context, call ports.StoreCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, call)
}

// RecordReset keeps rec and returns the error set by FailResets.
func (m *Memory) RecordReset(_ context.Context, rec ports.ResetRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resets = append(m.resets, rec)
	return m.failReset
}

// FailDecisions makes every later RecordDecision return err (nil: succeed).
func (m *Memory) FailDecisions(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failDecide = err
}

// FailTransitions makes every later RecordTransition return err.
func (m *Memory) FailTransitions(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failTrans = err
}

// FailResets makes every later RecordReset return err.
func (m *Memory) FailResets(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failReset = err
}

// Decisions returns a copy of the decisions recorded so far.
func (m *Memory) Decisions() []ports.DecisionRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ports.DecisionRecord(nil), m.decisions...)
}

// LastDecision returns the latest decision record; ok is false when none
// was recorded.
func (m *Memory) LastDecision() (rec ports.DecisionRecord, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.decisions) == 0 {
		return ports.DecisionRecord{}, false
	}
	return m.decisions[len(m.decisions)-1], true
}

// CountStates returns how many decisions of each state were recorded.
func (m *Memory) CountStates() map[domain.State]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[domain.State]int{}
	for _, d := range m.decisions {
		n[d.Decision.State]++
	}
	return n
}

// Transitions returns a copy of the transitions recorded so far.
func (m *Memory) Transitions() []Transition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Transition(nil), m.transitions...)
}

// Changes returns the recorded transitions without their instants.
func (m *Memory) Changes() []domain.StateChange {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]domain.StateChange, len(m.transitions))
	for i, t := range m.transitions {
		out[i] = t.Change
	}
	return out
}

// StoreCalls returns a copy of the store calls recorded so far.
func (m *Memory) StoreCalls() []ports.StoreCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ports.StoreCall(nil), m.calls...)
}

// Resets returns a copy of the resets recorded so far.
func (m *Memory) Resets() []ports.ResetRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ports.ResetRecord(nil), m.resets...)
}

// Clear forgets every record; the failures set stay.
func (m *Memory) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decisions, m.transitions, m.calls, m.resets = nil, nil, nil, nil
}

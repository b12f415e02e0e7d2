package otel

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// LabelNode names a node of the primary store (host:port of a Redis
// Cluster master) in node_state.
const LabelNode = "node"

// MaxNodes bounds the nodes node_state reports: a cluster larger than
// this reports its first MaxNodes nodes by name.
const MaxNodes = 256

var _ ports.NodeRecorder = (*Recorder)(nil)

// nodeStates is the health of each node of the store as recorded by
// RecordNodeTransition (docs/adr/008-failure-classes-and-breaker.md).
type nodeStates struct {
	mu     sync.Mutex
	states map[string]domain.SystemState
}

// RecordNodeTransition updates node_state for node (ports.NodeRecorder)
// and writes the transition to the application log. A node is a store
// address, never an identifier: it is safe as a label and in the log.
func (r *Recorder) RecordNodeTransition(ctx context.Context, node string, change domain.StateChange, at time.Time) error {
	if r.closed.Load() {
		return ErrClosed
	}
	r.nodes.mu.Lock()
	if _, known := r.nodes.states[node]; known || len(r.nodes.states) < MaxNodes {
		r.nodes.states[node] = change.To
	}
	r.nodes.mu.Unlock()
	return r.logs.nodeTransition(ctx, node, change, at)
}

// observeNodes reports node_state: 1 for each node's current state, 0
// for the others.
func (r *Recorder) observeNodes(o metric.Observer, gauge metric.Int64ObservableGauge, instance attribute.KeyValue) {
	r.nodes.mu.Lock()
	names := make([]string, 0, len(r.nodes.states))
	for n := range r.nodes.states {
		names = append(names, n)
	}
	states := make([]domain.SystemState, len(names))
	slices.Sort(names)
	for i, n := range names {
		states[i] = r.nodes.states[n]
	}
	r.nodes.mu.Unlock()
	for i, n := range names {
		for s := range nSystemStates {
			o.ObserveInt64(gauge, boolInt(domain.SystemState(s) == states[i]),
				metric.WithAttributes(instance, attribute.String(LabelNode, n), attribute.String(LabelState, domain.SystemState(s).String())))
		}
	}
}

// MsgNodeTransition is the application log's message for a transition of
// one node's health.
const MsgNodeTransition = "store node health transition"

// nodeTransition writes a node's transition to the application log, at
// warn when the node's breaker opens.
func (c *channels) nodeTransition(ctx context.Context, node string, change domain.StateChange, at time.Time) error {
	lvl := slog.LevelInfo
	if change.To == domain.Degraded {
		lvl = slog.LevelWarn
	}
	if !c.app.Enabled(ctx, lvl) {
		return nil
	}
	r := slog.NewRecord(at, lvl, MsgNodeTransition, 0)
	r.AddAttrs(slog.String("node", node), slog.String("from", change.From.String()), slog.String("to", change.To.String()))
	return joinLogErrors(c.app.Handle(ctx, r), nil)
}

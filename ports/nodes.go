package ports

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/domain"
)

// ErrNotRun is wrapped by a store error that proves the store ran nothing
// and refused for a reason of one key's placement, not of its health: a
// Redis Cluster slot in migration that kept answering TRYAGAIN until the
// deadline, or a slot whose redirections never end. The decision gets no
// answer from the store (the degraded matrix decides it), but the store
// is not at fault: such an error counts toward no breaker
// (docs/adr/008-failure-classes-and-breaker.md).
var ErrNotRun = errors.New("sluice: the store ran nothing and refused for a passing reason")

// NodeProber is an optional capability of a Prober, found by type
// assertion: a store made of several nodes (a Redis Cluster) probes each
// node that serves decisions and says which node serves a key, so that
// one dead node opens the breaker of its own keys only
// (docs/adr/008-failure-classes-and-breaker.md). A store of one node
// names that node. Its methods are safe for simultaneous use.
type NodeProber interface {
	Prober
	// ProbeNodes probes every node that serves decisions (for Redis
	// Cluster, the masters that own slots; never a replica) and returns one
	// outcome per node. err is non-nil only when the set of nodes cannot be
	// known at all (no node answers); every node is then unhealthy.
	ProbeNodes(ctx context.Context) (probes []NodeProbe, err error)
	// NodeOf names the node that serves key, as the last probe saw the
	// topology, without any I/O (it is on the decision path). "" means
	// unknown (no probe has seen the key's node yet).
	NodeOf(key string) string
}

// NodeProbe is the outcome of probing one node.
type NodeProbe struct {
	// Node names the node, e.g. its host:port. It is not an identifier of
	// anyone: safe as a metric label.
	Node string
	// Err is nil when the node answered in time.
	Err error
}

// NodeRecorder is an optional capability of a Recorder, found by type
// assertion: it observes the health transitions of each node of a store
// made of several nodes (NodeProber), beside the instance's aggregate
// state that Recorder.RecordTransition observes.
type NodeRecorder interface {
	// RecordNodeTransition observes one transition of node's health
	// machine. node is "" for a store of one node.
	RecordNodeTransition(ctx context.Context, node string, change domain.StateChange, at time.Time) error
}

// HealthProber is an optional capability of a Store, found by type
// assertion: the store's own health check, with every capability it has
// (a NodeProber for a store of several nodes, such as the Redis
// adapter's). app.Limiter probes through it when it is given no Prober,
// so that the documented wiring (a Store, a Fallback, a Recorder) gets
// per-node health by default.
type HealthProber interface {
	// HealthProber returns the store's Prober. It may read the store's
	// topology once (I/O, under a bound of its own).
	HealthProber() Prober
}

// MemoryChecker is an optional capability of a Store, found by type
// assertion: it compares the store's memory ceiling with a budget at
// boot. app.Limiter runs it when it is given no MemoryCheck.
type MemoryChecker interface {
	// CheckMemory returns a warning for each problem (a ceiling below
	// budgetBytes, unreadable, or a policy that evicts keys); err is for
	// a check that cannot run at all.
	CheckMemory(ctx context.Context, budgetBytes int64) (warnings []string, err error)
}

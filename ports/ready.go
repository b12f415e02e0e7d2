package ports

// Readier is an optional capability of a Store, found by type assertion:
// a store that connects to a server it may not reach at start (the Redis
// adapter, whose New succeeds while no node answers) says whether it is
// connected. app.New probes such a store once before it serves when it is
// not connected yet, and starts DEGRADED when that probe fails, so that
// a service started during an outage reports the state it is in from its
// first request (docs/adr/008).
type Readier interface {
	// Ready returns nil once the store is connected, else why it is not
	// (an error wrapping domain.ErrStoreUnavailable for an outage). It
	// does no I/O: it is read at boot and by health endpoints.
	Ready() error
}

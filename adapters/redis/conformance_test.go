package redis_test

import (
	"testing"

	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/ports"
)

// TestConformance runs the shared store suite on a standalone server and
// on a three-master cluster.
func TestConformance(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			cfg := topo.cfg(t)
			conformance.Run(t, func(t *testing.T) ports.Store { return newStore(t, cfg) })
		})
	}
}

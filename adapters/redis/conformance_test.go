package redis_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/ports"
)

// TestConformance runs the shared store suite on a standalone server and
// on a three-master cluster, each on both time sources:
//
//   - CallerTime runs every case, scripted timelines included. The suite's
//     clock jumps by minutes within milliseconds of wall time while key TTLs
//     run on the server's clock, so MinTTL is raised to a minute: that
//     changes no answer (see Config.MinTTL), and a loaded machine cannot
//     expire a sub-second window's key between two steps.
//   - ServerTime, the default, runs every case that holds on the server's
//     clock; the suite logs the scripted ones it leaves out.
//
// Each declares the grace its Config gives sliding logs for instants out of
// order: DefaultGrace under CallerTime, none under ServerTime (the script
// reads the instant itself, so calls cannot reach a key out of order).
//
// Stores made from one Config share the server's state, as the instances
// of a fleet do: Shared.
func TestConformance(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			caller := topo.cfg(t)
			caller.Time = redis.CallerTime
			caller.MinTTL = time.Minute
			server := topo.cfg(t)
			server.Time = redis.ServerTime
			for _, run := range []struct {
				name     string
				cfg      redis.Config
				features conformance.Features
			}{
				{"CallerTime", caller, conformance.Features{Shared: true, Grace: redis.DefaultGrace}},
				{"ServerTime", server, conformance.Features{ServerTime: true, Shared: true}},
			} {
				t.Run(run.name, func(t *testing.T) {
					conformance.RunWith(t, run.features, func(t testing.TB) ports.Store { return newStore(t, run.cfg) })
				})
			}
		})
	}
}

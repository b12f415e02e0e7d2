package faultproxy_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkPing compares a PING to Redis directly and through the proxy
// in pass-through, so that the proxy's own cost reads as a ratio within
// one run.
func BenchmarkPing(b *testing.B) {
	srv := redistest.NewServer(b)
	p := faultproxy.New(b, srv.Addr())
	for _, bc := range []struct{ name, addr string }{{"direct", srv.Addr()}, {"proxy", p.Addr()}} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{bc.addr}, DisableCache: true})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := b.Context()
			cmd := c.B().Ping().Build().Pin()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Do(ctx, cmd).Error(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

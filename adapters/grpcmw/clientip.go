package grpcmw

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/domain"
)

// forwardedForKey is the metadata key a proxy (Envoy, a gRPC-aware load
// balancer) appends the client's address to.
const forwardedForKey = "x-forwarded-for"

// clientIP resolves the address a call is counted by: the connection's
// peer, or, only when the peer is inside a trusted prefix, the right-most
// hop of x-forwarded-for that is not itself a trusted proxy (the left-most
// when every hop is trusted). A hop that does not parse where the client
// is expected leaves the address unresolved, as does a peer that is not
// an IP connection (a Unix socket).
func clientIP(ctx context.Context, trusted []netip.Prefix) (netip.Addr, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, &domain.ContextError{Cause: domain.CauseIPUnresolved, Detail: "no peer address"}
	}
	var client netip.Addr
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		client = tcp.AddrPort().Addr()
	} else {
		a, err := domain.ParseClientIP(p.Addr.String())
		if err != nil {
			return netip.Addr{}, err
		}
		client = a
	}
	if len(trusted) == 0 {
		return client, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var hops []string
	for _, v := range md.Get(forwardedForKey) {
		hops = append(hops, strings.Split(v, ",")...)
	}
	return domain.ClientIPBehindProxies(client, hops, trusted)
}

// Package grpcmw is sluice's gRPC entry point: unary and stream server
// interceptors that decide every call with an app.Limiter before its
// handler runs.
//
//	rl, err := grpcmw.New(lim, grpcmw.Config{Identity: fromAuth})
//	...
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(authenticate, rl.Unary()),
//		grpc.ChainStreamInterceptor(authenticateStream, rl.Stream()),
//	)
//	healthpb.RegisterHealthServer(srv, health.NewServer())
//	if err := grpcmw.CheckServer(lim, srv); err != nil { // every method has a profile
//		return err
//	}
//
// The route is the full method name ("/grpc.health.v1.Health/Check"),
// which profiles list as is. The client address is the connection's peer;
// only when the peer is inside Config.TrustedProxies is x-forwarded-for
// metadata read, taking the right-most hop that is not itself a trusted
// proxy, so a client cannot choose the address it is counted by. The
// identity comes from Config.Identity, called after the interceptors
// chained before sluice's (authentication first). A stream is decided once,
// when it opens.
//
// A call that passes reaches its handler with the rate-limit metadata set
// as headers (x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset,
// ratelimit-policy and ratelimit, with the values of the HTTP fields of
// adapters/httpmw). A refusal never reaches it:
//
//   - Throttled: codes.ResourceExhausted, with an errdetails.RetryInfo
//     (never earlier than the call would pass) and an
//     errdetails.QuotaFailure naming each violated window
//     ("<dimension>-<window>", see PolicyName); the metadata, with
//     retry-after, comes in the header frame before the status.
//   - DeniedDegraded (the shared store cannot answer and the method's
//     family fails closed): codes.Unavailable with a RetryInfo of 1 s.
//   - RejectedInvalidContext: codes.InvalidArgument with the one fixed
//     message "invalid_context", whatever the cause (unprofiled method,
//     unresolved address, malformed identity); the cause goes to logs and
//     metrics only.
//   - A decision that could not be recorded: codes.Internal; sluice's
//     observability fails closed.
//
// While the shared store cannot answer, the metadata describe the counts
// that decided, which are per instance (the degraded cap of a bypassed
// method, or its own windows on the local action). In shadow mode every
// call passes, with the metadata of what would have been enforced.
//
// A method whose profile has a concurrency window or settle rules (see
// Reserver; every method, with WithCost) is decided by the Limiter's
// Reserve, and its reservation is settled once the handler returns
// (docs/adr/012): at the cost the handler reports in trailer metadata
// (grpc.SetTrailer, or SetTrailer on its stream) under the profile's cost
// header lower-cased, or through WithCost's function; at nothing when the
// call failed on the server's side (Internal, Unavailable, DataLoss,
// Unknown, DeadlineExceeded, or a panic) and the profile refunds
// failures; else at the cost reserved. A stream holds its concurrency
// slot until its handler returns; the lease is renewed every third of its
// TTL meanwhile. The settlement runs on a context detached from the
// call's (Config.SettleTimeout), also when the client cancelled.
package grpcmw

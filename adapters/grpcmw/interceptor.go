package grpcmw

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// Evaluator decides one request; *app.Limiter is one.
type Evaluator interface {
	Evaluate(ctx context.Context, req app.Request) (domain.Decision, error)
}

var _ Evaluator = (*app.Limiter)(nil)

// Identity is who a call comes from, as the service's authentication
// established it. Empty fields are absent identities.
type Identity struct {
	User, Tenant, APIKey string
}

// IdentityFunc returns the identity of an authenticated call, the zero
// Identity for an anonymous one. ctx is the call's context after every
// interceptor chained before sluice's: put the authentication interceptor
// first, and let it store its principal in the context.
type IdentityFunc func(ctx context.Context, fullMethod string) Identity

// Config configures the interceptors. The zero value of every field is
// its documented default.
type Config struct {
	// Identity reads the authenticated identity. nil means every call is
	// anonymous: only the ip dimension applies.
	Identity IdentityFunc
	// TrustedProxies are the prefixes of the proxies whose
	// x-forwarded-for metadata is believed. Empty means none: the client
	// is the connection's peer, and x-forwarded-for is ignored.
	TrustedProxies []netip.Prefix
}

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return &domain.ConfigError{Field: fmt.Sprintf("grpcmw.trusted_proxies[%d]", i), Reason: "invalid prefix"}
		}
	}
	return nil
}

// Status messages. They are fixed: the cause of a refusal goes to logs and
// metrics only, and an invalid context reads the same whatever its cause.
const (
	MessageInvalidContext = "invalid_context"
	MessageThrottled      = "rate limit exceeded"
	MessageDenied         = "rate limiter temporarily unavailable"
	MessageNotRecorded    = "rate limit decision could not be recorded"
)

// Interceptors decide every call with a Limiter before its handler runs.
type Interceptors struct {
	lim Evaluator
	cfg Config
}

// New returns the interceptors of lim.
func New(lim Evaluator, cfg Config) (*Interceptors, error) {
	if lim == nil {
		return nil, &domain.ConfigError{Field: "grpcmw.limiter", Reason: "required"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies)
	for i, p := range cfg.TrustedProxies {
		cfg.TrustedProxies[i] = p.Masked()
	}
	return &Interceptors{lim: lim, cfg: cfg}, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := i.decide(ctx, info.FullMethod)
		if md != nil {
			// Headers travel with the response or, on a refusal, in a
			// header frame before the status.
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: the decision is taken
// once, when the stream opens.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := i.decide(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// decide evaluates one call. It returns the metadata to send and, for a
// call that must not reach its handler, the status error.
func (i *Interceptors) decide(ctx context.Context, method string) (metadata.MD, error) {
	req := app.Request{Route: method}
	// An unresolved address stays the zero Addr: the Limiter rejects it as
	// invalid context (ip_unresolved) and records that.
	req.ClientIP, _ = clientIP(ctx, i.cfg.TrustedProxies)
	if i.cfg.Identity != nil {
		id := i.cfg.Identity(ctx, method)
		req.User, req.Tenant, req.APIKey = id.User, id.Tenant, id.APIKey
	}
	d, err := i.lim.Evaluate(ctx, req)
	if err != nil {
		return nil, status.Error(codes.Internal, MessageNotRecorded)
	}
	md := rateLimitMetadata(&d)
	if !d.Blocks() {
		return md, nil
	}
	switch d.State {
	case domain.Throttled:
		return withRetryAfter(md, &d), throttled(&d)
	case domain.DeniedDegraded:
		return withRetryAfter(md, &d), statusWithDetails(codes.Unavailable, MessageDenied,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter(&d))})
	default:
		return nil, status.Error(codes.InvalidArgument, MessageInvalidContext)
	}
}

// throttled is the ResourceExhausted status of a refusal, with a
// RetryInfo and a QuotaFailure naming each violated window.
func throttled(d *domain.Decision) error {
	qf := &errdetails.QuotaFailure{}
	for _, w := range d.Windows.All() {
		if !w.Allowed {
			qf.Violations = append(qf.Violations, violation(w.Dimension, w.Window.Name, w.Window.Limit, w.Window.Period))
		}
	}
	if len(qf.Violations) == 0 {
		qf.Violations = append(qf.Violations, violation(d.LimitingDimension, d.LimitingWindow, d.Limit, d.LimitingPeriod))
	}
	return statusWithDetails(codes.ResourceExhausted, MessageThrottled,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter(d))}, qf)
}

// statusWithDetails builds a status error carrying details.
func statusWithDetails(c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st, err := status.New(c, msg).WithDetails(details...)
	if err != nil {
		// errdetails messages always marshal.
		panic(err)
	}
	return st.Err()
}

func violation(dim domain.Dimension, window string, limit int64, period time.Duration) *errdetails.QuotaFailure_Violation {
	name := PolicyName(dim, window)
	return &errdetails.QuotaFailure_Violation{
		Subject:     name,
		Description: fmt.Sprintf("quota of %d per %s exceeded", limit, period),
		QuotaId:     name,
		QuotaValue:  limit,
	}
}

func withRetryAfter(md metadata.MD, d *domain.Decision) metadata.MD {
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(MetadataRetryAfter, fmt.Sprint(int64(retryAfter(d).Seconds())))
	return md
}

// ServiceInfoProvider lists a server's services; *grpc.Server is one.
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// Methods returns the full method name ("/pkg.Service/Method") of every
// method registered on srv, sorted: the routes to check at boot.
func Methods(srv ServiceInfoProvider) []string {
	var out []string
	for svc, info := range srv.GetServiceInfo() {
		for _, m := range info.Methods {
			out = append(out, "/"+svc+"/"+m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// RouteChecker checks that routes have profiles; *app.Limiter is one.
type RouteChecker interface {
	CheckRoutes(exposed []string) error
}

// CheckServer is the boot check: every method registered on srv must
// have a profile, or it returns the *domain.ConfigError of CheckRoutes
// (wrapping app.ErrRouteWithoutProfile) naming each method without one.
// Call it after registering every service and before Serve.
func CheckServer(lim RouteChecker, srv ServiceInfoProvider) error {
	return lim.CheckRoutes(Methods(srv))
}

package grpcmw

import (
	"context"
	"fmt"
	"log/slog"
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
	"github.com/sluicehq/sluice/ports"
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
	// SettleTimeout bounds the settlement of a reservation after the
	// handler returns, and each renewal of its lease while the handler
	// runs (default DefaultSettleTimeout). Both run on a context detached
	// from the call's, so that a call the client cancels is still
	// settled; the Limiter's store deadline applies within.
	SettleTimeout time.Duration
	// Clock drives the renewals of a reservation's lease while its
	// handler runs. nil means ports.SystemClock; tests pass the
	// Limiter's fake clock.
	Clock ports.Clock
	// AuditLog receives the cost reports the interceptors ignore (cost
	// trailer metadata that is not one integer between 0 and
	// domain.MaxLimit): the reservation then settles at its reserved
	// cost. nil means slog.Default().
	AuditLog *slog.Logger
}

// DefaultSettleTimeout is Config.SettleTimeout's default.
const DefaultSettleTimeout = 5 * time.Second

// Validate reports a *domain.ConfigError for a configuration New refuses.
func (c Config) Validate() error {
	if c.SettleTimeout < 0 {
		return &domain.ConfigError{Field: "grpcmw.settle_timeout", Reason: "must not be negative"}
	}
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
	// res is lim when it can reserve, else nil.
	res  Reserver
	cost CostFunc
	cfg  Config
}

// New returns the interceptors of lim. When lim is a Reserver, a method
// it says is Reserving (every method, with WithCost) is decided by
// Reserve, and its reservation is settled after the handler returns (see
// Reserver).
func New(lim Evaluator, cfg Config, opts ...Option) (*Interceptors, error) {
	if lim == nil {
		return nil, &domain.ConfigError{Field: "grpcmw.limiter", Reason: "required"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	res, _ := lim.(Reserver)
	if o.cost != nil && (res == nil || !res.CanReserve()) {
		return nil, &domain.ConfigError{Field: "grpcmw.cost", Reason: "the limiter cannot reserve (not a grpcmw.Reserver, or its primary store takes no reservations)"}
	}
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies)
	for i, p := range cfg.TrustedProxies {
		cfg.TrustedProxies[i] = p.Masked()
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = ports.SystemClock{}
	}
	if cfg.AuditLog == nil {
		cfg.AuditLog = slog.Default()
	}
	return &Interceptors{lim: lim, res: res, cost: o.cost, cfg: cfg}, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, rsv, err := i.decide(ctx, info.FullMethod)
		if md != nil {
			// Headers travel with the response or, on a refusal, in a
			// header frame before the status.
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if rsv == nil {
			return handler(ctx, req)
		}
		return i.unaryReserved(ctx, req, info.FullMethod, handler, rsv)
	}
}

// Stream returns the stream server interceptor: the decision is taken
// once, when the stream opens; a reservation's concurrency slot is held
// until the handler returns.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, rsv, err := i.decide(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		if rsv == nil {
			return handler(srv, ss)
		}
		return i.streamReserved(srv, ss, info.FullMethod, handler, rsv)
	}
}

// decide decides one call, by Reserve for a reserving method. It returns
// the metadata to send, the reservation to settle (nil unless reserved)
// and, for a call that must not reach its handler, the status error.
func (i *Interceptors) decide(ctx context.Context, method string) (metadata.MD, *app.Reservation, error) {
	req := app.Request{Route: method}
	// An unresolved address stays the zero Addr: the Limiter rejects it as
	// invalid context (ip_unresolved) and records that.
	req.ClientIP, _ = clientIP(ctx, i.cfg.TrustedProxies)
	if i.cfg.Identity != nil {
		id := i.cfg.Identity(ctx, method)
		req.User, req.Tenant, req.APIKey = id.User, id.Tenant, id.APIKey
	}
	var (
		d   domain.Decision
		rsv *app.Reservation
		err error
	)
	if i.res != nil && (i.cost != nil || i.res.Reserving(method)) {
		d, rsv, err = i.res.Reserve(ctx, req)
	} else {
		d, err = i.lim.Evaluate(ctx, req)
	}
	if err != nil {
		return nil, nil, status.Error(codes.Internal, MessageNotRecorded)
	}
	md := rateLimitMetadata(&d)
	if !d.Blocks() {
		return md, rsv, nil
	}
	switch d.State {
	case domain.Throttled:
		return withRetryAfter(md, &d), nil, throttled(&d)
	case domain.DeniedDegraded:
		return withRetryAfter(md, &d), nil, statusWithDetails(codes.Unavailable, MessageDenied,
			&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter(&d))})
	default:
		return nil, nil, status.Error(codes.InvalidArgument, MessageInvalidContext)
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

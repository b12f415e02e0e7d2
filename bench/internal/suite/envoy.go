package suite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/bench/internal/load"
	"github.com/sluicehq/sluice/domain"
)

// The envoy shape: Envoy's ShouldRateLimit with two descriptors, a tenant
// and its user, each limited to envoyLimit a second (far from reached, as
// every shape's windows but the hot key's), called in process on the
// service (the gRPC hop Envoy adds costs every contender the same).
const (
	envoyLimit  = 1000
	envoyDomain = "bench"
)

// envoyConfig is the envoy shape's domain for sluice: envoyproxy/ratelimit's
// YAML, scoped by the tenant (one slot, one store call a request), in
// algorithm ("sliding_log" or "gcra"). Its degraded action is deny, so
// that a decision the shared store did not make shows as a refusal.
func envoyConfig(algorithm string) (*envoyrls.Config, error) {
	return envoyrls.ParseConfig(fmt.Appendf(nil, `domain: %s
hash_tag_key: tenant
degraded: deny
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: %d, algorithm: %s}
  - key: user
    rate_limit: {unit: second, requests_per_unit: %d, algorithm: %s}
`, envoyDomain, envoyLimit, algorithm, envoyLimit, algorithm))
}

// envoyRequests builds every client's request: its tenant, then its user.
func envoyRequests(p *Population) []*rlsv3.RateLimitRequest {
	entry := func(k, v string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	out := make([]*rlsv3.RateLimitRequest, len(p.Clients))
	for i := range p.Clients {
		id := &p.Clients[i]
		out[i] = &rlsv3.RateLimitRequest{Domain: envoyDomain, Descriptors: []*rlcommon.RateLimitDescriptor{
			entry("tenant", id.Tenant), entry("user", id.User),
		}}
	}
	return out
}

// rlsWorker drives srv with the population's requests: OK is an
// admission, OVER_LIMIT a refusal.
func rlsWorker(srv rlsv3.RateLimitServiceServer, reqs []*rlsv3.RateLimitRequest) load.Worker {
	return func(w, c int) load.Op {
		cur := NewCursor(w, c, len(reqs))
		return func(ctx context.Context) (load.Outcome, error) {
			resp, err := srv.ShouldRateLimit(ctx, reqs[cur.Next()])
			if err != nil {
				return 0, err
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK {
				return load.Refused, nil
			}
			return load.Allowed, nil
		}
	}
}

// sluiceRLS is sluice's Envoy door (adapters/envoyrls) on the whole
// Limiter and sluice's Redis store: descriptors matched and pseudonymised,
// one all-or-nothing store call, or none for a request admitted from an
// allotment (docs/adr/019: on, as by default), the response with every
// status and the RateLimit fields. Its Twin is the same with allotments
// off.
func sluiceRLS(name, algorithm string) Contender {
	return allotted(name, func(_ context.Context, env *Env, _ int, off bool) (load.Worker, func() error, error) {
		cfg, err := envoyConfig(algorithm)
		if err != nil {
			return nil, nil, err
		}
		l, closeAll, err := openLimiter(env, app.Config{HMACSecret: Secret, InstanceID: "sluicebench", StoreTimeout: callTimeout, ProbeTimeout: callTimeout}, off)
		if err != nil {
			return nil, nil, err
		}
		return rlsWorker(envoyrls.New(strict{l}, cfg), envoyRequests(env.Population)), closeAll, nil
	})
}

// strict is the Limiter, failing the call when a decision did not come
// from the shared store: the measurement would not measure what it says.
type strict struct{ *app.Limiter }

func (s strict) EvaluateWindows(ctx context.Context, req app.WindowsRequest) (domain.Decision, error) {
	d, err := s.Limiter.EvaluateWindows(ctx, req)
	return d, errors.Join(err, degradedError(d))
}

func (s strict) CheckWindows(ctx context.Context, req app.WindowsRequest) (domain.Decision, error) {
	d, err := s.Limiter.CheckWindows(ctx, req)
	return d, errors.Join(err, degradedError(d))
}

func degradedError(d domain.Decision) error {
	if d.Degraded {
		return fmt.Errorf("degraded decision %s (%s)", d.State, d.Cause)
	}
	return nil
}

// fixedWindowRLS is envoyproxy/ratelimit's shape on the same client sluice
// uses: per descriptor, INCRBY and EXPIRE on the key of the current fixed
// window (domain, entries, window start), every descriptor's commands in
// one pipeline, each descriptor counted whatever the others decide; the
// response as it builds it (each status's limit, remaining and time to
// the window's end).
func fixedWindowRLS() Contender {
	return Contender{Name: "fixed-window INCR", Open: func(_ context.Context, env *Env, _ int) (load.Worker, func() error, error) {
		st, err := newStore(env)
		if err != nil {
			return nil, nil, err
		}
		srv := &fixedWindow{client: st.Client(), limit: envoyLimit}
		return rlsWorker(srv, envoyRequests(env.Population)), st.Close, nil
	}}
}

// fixedWindow serves ShouldRateLimit as envoyproxy/ratelimit's Redis cache
// does, one limit of limit a second for every descriptor.
type fixedWindow struct {
	rlsv3.UnimplementedRateLimitServiceServer
	client rueidis.Client
	limit  int64
	// now is the clock; nil is time.Now.
	now func() time.Time
}

func (f *fixedWindow) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := time.Now()
	if f.now != nil {
		now = f.now()
	}
	window := now.Unix()
	hits := int64(max(req.HitsAddend, 1))
	cmds := make(rueidis.Commands, 0, 2*len(req.Descriptors))
	var k strings.Builder
	for _, d := range req.Descriptors {
		k.Reset()
		k.WriteString(req.Domain)
		for _, e := range d.Entries {
			k.WriteString("_" + e.Key + "_" + e.Value)
		}
		k.WriteString("_" + strconv.FormatInt(window, 10))
		key := k.String()
		cmds = append(cmds, f.client.B().Incrby().Key(key).Increment(hits).Build(), f.client.B().Expire().Key(key).Seconds(1).Build())
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	reset := durationpb.New(time.Unix(window+1, 0).Sub(now))
	limit := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(f.limit), Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for i, r := range f.client.DoMulti(cctx, cmds...) {
		if i%2 == 1 {
			if err := r.Error(); err != nil {
				return nil, err
			}
			continue
		}
		v, err := r.AsInt64()
		if err != nil {
			return nil, err
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: uint32(max(f.limit-v, 0)), DurationUntilReset: reset}
		if v > f.limit {
			st.Code, resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

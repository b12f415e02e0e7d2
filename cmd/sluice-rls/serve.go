package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/boot"
)

// Default ports: envoyproxy/ratelimit's gRPC and HTTP ports, so that an
// Envoy configured for it needs no change (deploy/envoy uses them).
const (
	DefaultGRPCPort    = 8081
	DefaultHealthPort  = 8080
	DefaultMetricsPort = 9090
	// ClusterName is the Envoy cluster deploy/envoy/envoy.yaml names the
	// service by.
	ClusterName = "sluice_rls"
)

// options are the flags.
type options struct {
	config, sluiceConfig              string
	grpcAddr, healthAddr, metricsAddr string
	dev                               bool
	load                              envoyrls.LoadOptions
	service                           envoyrls.Options
}

// peerEnv reads envoyproxy/ratelimit's environment variables that
// sluice-rls honours, as the defaults of the flags that stand for them
// (README, "sluice-rls"): a deployment of that service keeps its
// environment. Its path variables (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
// RUNTIME_APPDIRECTORY) give -config's default.
type peerEnv struct {
	config                            string
	grpcAddr, healthAddr, metricsAddr string
	merge, headers, metadata          bool
	limitH, remainingH, resetH        string
}

func readPeerEnv() (peerEnv, error) {
	e := peerEnv{
		grpcAddr:    fmt.Sprintf(":%d", DefaultGRPCPort),
		healthAddr:  fmt.Sprintf(":%d", DefaultHealthPort),
		metricsAddr: fmt.Sprintf(":%d", DefaultMetricsPort),
		limitH:      os.Getenv("LIMIT_LIMIT_HEADER"),
		remainingH:  os.Getenv("LIMIT_REMAINING_HEADER"),
		resetH:      os.Getenv("LIMIT_RESET_HEADER"),
	}
	if root := os.Getenv("RUNTIME_ROOT"); root != "" {
		e.config = filepath.Join(root, os.Getenv("RUNTIME_SUBDIRECTORY"), cmp.Or(os.Getenv("RUNTIME_APPDIRECTORY"), "config"))
	}
	if p := os.Getenv("GRPC_PORT"); p != "" {
		e.grpcAddr = net.JoinHostPort(os.Getenv("GRPC_HOST"), p)
	}
	if p := os.Getenv("PORT"); p != "" {
		e.healthAddr = net.JoinHostPort(os.Getenv("HOST"), p)
	}
	if a := os.Getenv("PROMETHEUS_ADDR"); a != "" {
		e.metricsAddr = a
	}
	for _, b := range []struct {
		name string
		to   *bool
	}{{"MERGE_DOMAIN_CONFIG", &e.merge}, {"LIMIT_RESPONSE_HEADERS_ENABLED", &e.headers}, {"RESPONSE_DYNAMIC_METADATA", &e.metadata}} {
		if v := os.Getenv(b.name); v != "" {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return e, fmt.Errorf("%s=%q: true or false", b.name, v)
			}
			*b.to = on
		}
	}
	return e, nil
}

// addrs are the bound addresses.
type addrs struct{ grpc, health, metrics string }

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	env, err := readPeerEnv()
	if err != nil {
		return o, err
	}
	fs := flag.NewFlagSet("sluice-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", env.config, "envoyproxy/ratelimit YAML: a file or a directory of *.yaml files (required; default $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY)")
	fs.StringVar(&o.sluiceConfig, "sluice-config", "", "sluice's own YAML (store_timeout, probe_interval, shadow_mode...); optional")
	fs.StringVar(&o.grpcAddr, "grpc-addr", env.grpcAddr, "RateLimitService and grpc.health.v1.Health listen address (default $GRPC_HOST:$GRPC_PORT)")
	fs.StringVar(&o.healthAddr, "health-addr", env.healthAddr, "HTTP /healthcheck listen address (default $HOST:$PORT)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", env.metricsAddr, "HTTP /metrics listen address (default $PROMETHEUS_ADDR)")
	fs.BoolVar(&o.dev, "dev", false, "generate a throw-away HMAC secret when RATE_LIMIT_HMAC_SECRET is unset")
	fs.BoolVar(&o.load.MergeDomains, "merge-domain-config", env.merge, "merge the files of one domain (default $MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&o.load.AcceptUnlimited, "accept-unlimited", false, "load unlimited: true (not limited, its replaces refused) and requests_per_unit: 0 (a block) instead of refusing them")
	fs.BoolVar(&o.service.LimitHeaders, "limit-response-headers", env.headers, "add the limit, remaining and reset headers of the descriptor closest to its limit (default $LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&o.service.LimitHeader, "limit-limit-header", env.limitH, "the limit header's name (default $LIMIT_LIMIT_HEADER, else RateLimit-Limit)")
	fs.StringVar(&o.service.RemainingHeader, "limit-remaining-header", env.remainingH, "the remaining header's name (default $LIMIT_REMAINING_HEADER, else RateLimit-Remaining)")
	fs.StringVar(&o.service.ResetHeader, "limit-reset-header", env.resetH, "the reset header's name (default $LIMIT_RESET_HEADER, else RateLimit-Reset)")
	fs.BoolVar(&o.service.DynamicMetadata, "response-dynamic-metadata", env.metadata, "set the response's dynamic_metadata (default $RESPONSE_DYNAMIC_METADATA)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.config == "" {
		return o, errors.New("-config is required (a file or a directory of envoyproxy/ratelimit YAML; or set RUNTIME_ROOT)")
	}
	return o, nil
}

// appConfig reads sluice's configuration (or none) and the environment.
func appConfig(o options) (app.Config, error) {
	data := []byte("{}")
	if o.sluiceConfig != "" {
		var err error
		if data, err = os.ReadFile(o.sluiceConfig); err != nil {
			return app.Config{}, err
		}
	}
	// REDIS_URL is read with the peer's companion variables (peerRedis),
	// in the peer's forms too: not as app.Config's URL.
	env := func(k string) (string, bool) {
		if k == app.EnvRedisURL {
			return "", false
		}
		return os.LookupEnv(k)
	}
	cfg, _, err := boot.ConfigEnv(data, o.dev, "or run with -dev", env)
	if err != nil {
		return cfg, err
	}
	// envoyproxy/ratelimit's global shadow mode: on when either says so.
	if v := os.Getenv("SHADOW_MODE"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("SHADOW_MODE=%q: true or false", v)
		}
		cfg.ShadowMode = cfg.ShadowMode || on
	}
	return cfg, nil
}

// serve runs the service until ctx is done.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addrs)) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	rlsCfg, err := envoyrls.LoadConfigWith(o.config, o.load)
	if err != nil {
		return err
	}
	cfg, err := appConfig(o)
	if err != nil {
		return err
	}
	rc, warnings, err := peerRedis(os.Getenv, cfg.RedisURL)
	if err != nil {
		return err
	}
	for _, w := range append(warnings, unreadWarnings(os.Environ())...) {
		fmt.Fprintln(stderr, "warning:", w)
	}
	primary, fallback, kind, closeStores, err := boot.OpenStores(rc, stderr)
	if err != nil {
		return err
	}
	defer closeStores()
	rec, err := boot.Recorder(cfg, stderr, boot.EmbeddedStore(rc == nil))
	if err != nil {
		return err
	}
	defer rec.Close()
	lim, err := boot.Limiter(cfg, primary, fallback, rec, stderr)
	if err != nil {
		return err
	}
	defer lim.Close()

	grpcSrv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(grpcSrv, envoyrls.NewWithOptions(lim, rlsCfg, o.service))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(grpcSrv, hs)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	mux := http.NewServeMux()
	// 200 while DEGRADED too: every request is still decided, by the
	// degraded matrix; out of rotation, with Envoy's failure_mode_deny, a
	// Redis outage would refuse every request at the edge (boot.Health).
	mux.Handle("GET /healthcheck", boot.Health(lim, func() bool {
		res, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	}))
	metrics := http.NewServeMux()
	metrics.Handle("GET /metrics", rec.Handler())

	var ls [3]net.Listener
	for i, a := range []string{o.grpcAddr, o.healthAddr, o.metricsAddr} {
		if ls[i], err = net.Listen("tcp", a); err != nil {
			for _, l := range ls[:i] {
				_ = l.Close()
			}
			return err
		}
	}
	healthSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	metricsSrv := &http.Server{Handler: metrics, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 3)
	go func() { errc <- grpcSrv.Serve(ls[0]) }()
	go func() { errc <- healthSrv.Serve(ls[1]) }()
	go func() { errc <- metricsSrv.Serve(ls[2]) }()
	a := addrs{grpc: ls[0].Addr().String(), health: ls[1].Addr().String(), metrics: ls[2].Addr().String()}
	fmt.Fprintf(stdout, "sluice-rls: store %s; domains %v\ngrpc: %s  health: http://%s/healthcheck  metrics: http://%s/metrics\n",
		kind, rlsCfg.Domains(), a.grpc, a.health, a.metrics)
	if ready != nil {
		ready(a)
	}

	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	// Graceful: health says NOT_SERVING first, so that Envoy and the
	// orchestrator stop sending, then calls in flight finish.
	hs.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := make(chan struct{})
	go func() { grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		grpcSrv.Stop()
	}
	_ = healthSrv.Shutdown(sctx)
	_ = metricsSrv.Shutdown(sctx)
	fmt.Fprintln(stdout, "stopped")
	return err
}

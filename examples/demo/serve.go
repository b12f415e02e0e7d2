package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/internal/boot"
)

//go:embed sluice.yaml
var defaultConfig []byte

// options are the service's flags.
type options struct {
	httpAddr, grpcAddr, config string
	dev                        bool
	// trusted are the proxies whose X-Forwarded-For names the client
	// (-trusted-proxies); none by default: the peer is the client.
	trusted []netip.Prefix
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address (the API and /metrics)")
	fs.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:9090", "gRPC listen address (grpc.health.v1.Health)")
	fs.StringVar(&o.config, "config", "", "YAML configuration (default: the embedded examples/demo/sluice.yaml)")
	fs.BoolVar(&o.dev, "dev", false, "development mode: generate a throw-away HMAC secret if RATE_LIMIT_HMAC_SECRET is unset, and open /demo/outage")
	fs.Func("trusted-proxies", "comma-separated CIDRs of the proxies in front of the demo: their X-Forwarded-For names the client (ip windows count per client address)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			o.trusted = append(o.trusted, p)
		}
		return nil
	})
	return o, fs.Parse(args)
}

// loadConfig reads the configuration and the environment. Without a
// secret it fails, unless dev is set: then it generates one for this run,
// and secretNote says so.
func loadConfig(o options) (cfg app.Config, secretNote string, err error) {
	data := defaultConfig
	if o.config != "" {
		if data, err = os.ReadFile(o.config); err != nil {
			return cfg, "", err
		}
	}
	cfg, generated, err := boot.Config(data, o.dev, "or run with -dev (make demo does)")
	if generated {
		secretNote = boot.DevSecretNote
	}
	return cfg, secretNote, err
}

// serveMain runs the service until ctx is done.
func serveMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	cfg, secretNote, err := loadConfig(o)
	if err != nil {
		return err
	}
	rc := boot.RedisConfig(cfg)
	primary, fallback, kind, closeStores, err := boot.OpenStores(rc, stderr)
	if err != nil {
		return err
	}
	defer closeStores()
	var outage *switchable
	if o.dev {
		if outage, err = newSwitchable(primary); err != nil {
			return err
		}
		primary = outage
	}
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
	audit := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("channel", "audit")
	handler, err := newHTTPHandler(lim, rec.Handler(), outage, audit, o.trusted)
	if err != nil {
		return err
	}
	grpcSrv, err := newGRPCServer(lim)
	if err != nil {
		return err
	}
	return listenAndServe(ctx, o, handler, grpcSrv, banner{store: kind, secretNote: secretNote, outage: outage != nil}, stdout)
}

// listenAndServe serves HTTP and gRPC until ctx is done or one fails,
// then shuts both down gracefully.
func listenAndServe(ctx context.Context, o options, handler http.Handler, grpcSrv *grpc.Server, b banner, stdout io.Writer) error {
	httpLis, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return err
	}
	grpcLis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		_ = httpLis.Close()
		return err
	}
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- httpSrv.Serve(httpLis) }()
	go func() { errc <- grpcSrv.Serve(grpcLis) }()
	b.http, b.grpc = httpLis.Addr().String(), grpcLis.Addr().String()
	b.print(stdout)

	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	stopped := make(chan struct{})
	go func() { grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		grpcSrv.Stop()
	}
	fmt.Fprintln(stdout, "stopped")
	return err
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/adapters/local"
	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/boot"
	"github.com/sluicehq/sluice/ports"
)

// EnvClusterAddrs names Redis Cluster nodes (host:port, comma-separated)
// when neither REDIS_URL nor the file's redis_url is set.
const EnvClusterAddrs = "REDIS_CLUSTER_ADDRS"

// target is what explain, peek and reset act on: a route and identities
// under sluice's configuration, or descriptors under sluice-rls's.
type target struct {
	config, envoyConfig string
	load                *envoyrls.LoadOptions
	json                bool
	// sluice's configuration
	route                    string
	user, tenant, ip, apikey string
	cost                     int64
	// sluice-rls's
	domain      string
	descriptors descriptorFlags
	// the store
	dialTimeout, storeTimeout time.Duration
}

// descriptorFlags is -descriptor, repeatable: k=v[,k=v]... each.
type descriptorFlags []*rlcommon.RateLimitDescriptor

func (d *descriptorFlags) String() string { return "" }

func (d *descriptorFlags) Set(v string) error {
	desc := &rlcommon.RateLimitDescriptor{}
	for e := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value[,key=value]", v)
		}
		desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: val})
	}
	*d = append(*d, desc)
	return nil
}

// addTarget registers the flags of a target on fs; store adds the store's.
func (t *target) addFlags(fs *flag.FlagSet, store bool) {
	fs.StringVar(&t.config, "config", "", "sluice's YAML configuration (with -envoy-config: sluice-rls's -sluice-config, optional)")
	fs.StringVar(&t.envoyConfig, "envoy-config", "", "sluice-rls's envoyproxy/ratelimit YAML: a file or a directory of *.yaml")
	fs.BoolVar(&t.json, "json", false, "print JSON for scripts instead of a table")
	fs.StringVar(&t.user, "user", "", "the user's raw id (as the service sees it)")
	fs.StringVar(&t.tenant, "tenant", "", "the tenant's raw id")
	fs.StringVar(&t.ip, "ip", "", "the client address (IPv4, or IPv6: grouped by /64)")
	fs.StringVar(&t.apikey, "apikey", "", "the api key's raw id")
	fs.StringVar(&t.domain, "domain", "", "with -envoy-config: the domain Envoy's requests name")
	t.load = envoyLoadFlags(fs)
	fs.Var(&t.descriptors, "descriptor", "with -envoy-config: one descriptor, key=value[,key=value]... (repeatable)")
	if store {
		fs.DurationVar(&t.dialTimeout, "dial-timeout", 5*time.Second, "how long to wait for the store to answer at all")
		fs.DurationVar(&t.storeTimeout, "store-timeout", 0, "the deadline of each store call (0: the configuration's store_timeout)")
	}
}

// envoy says whether the target is sluice-rls's descriptors.
func (t *target) envoy() bool { return t.envoyConfig != "" }

// check validates the flags of the target.
func (t *target) check() error {
	switch {
	case t.envoy():
		if t.domain == "" || len(t.descriptors) == 0 {
			return usageErr("-envoy-config needs -domain and at least one -descriptor key=value")
		}
	case t.config == "":
		return usageErr("-config (sluice's YAML) or -envoy-config (sluice-rls's) is required")
	}
	return nil
}

// request is the target's Request; ipGiven says whether -ip was (without
// it the address is 0.0.0.0, whose ip windows are left out of what is
// shown).
func (t *target) request(route string) (app.Request, bool, error) {
	req := app.Request{Route: route, User: t.user, Tenant: t.tenant, APIKey: t.apikey, Cost: t.cost}
	if t.ip == "" {
		req.ClientIP = netip.IPv4Unspecified()
		return req, false, nil
	}
	a, err := domain.ParseClientIP(t.ip)
	if err != nil {
		return req, false, fail(exitBadIdentity, fmt.Errorf("-ip %q: %w", t.ip, err))
	}
	req.ClientIP = a
	return req, true, nil
}

// hasIdentity says whether any identity flag is set.
func (t *target) hasIdentity() bool {
	return t.user != "" || t.tenant != "" || t.ip != "" || t.apikey != ""
}

// session is an open Limiter with what closes it.
type session struct {
	cfg      app.Config
	lim      *app.Limiter
	envoyCfg *envoyrls.Config
	closers  []func()
}

func (s *session) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// open loads the configurations as the services do and builds the
// Limiter: on the shared store when withStore (peek, reset), else on two
// in-process stores (explain: nothing is read or written). The Limiter's
// log channels (the security-audit one included) go to logs.
func open(t *target, withStore bool, logs io.Writer, stderr io.Writer) (*session, error) {
	s := &session{}
	if t.envoy() {
		cfg, err := envoyrls.LoadConfigWith(t.envoyConfig, *t.load)
		if err != nil {
			return nil, printLocated(stderr, locateEnvoy(t.envoyConfig, err), false)
		}
		s.envoyCfg = cfg
	}
	cfg, data, err := loadAppConfig(t.config, nil)
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return nil, err
		}
		return nil, printLocated(stderr, locateApp(t.config, data, err), false)
	}
	if t.storeTimeout > 0 {
		cfg.StoreTimeout = t.storeTimeout
	}
	s.cfg = cfg
	fallback, err := local.New(local.Config{})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = fallback.Close() })
	var primary ports.Store
	if withStore {
		primary, err = openStore(cfg, t.dialTimeout)
	} else {
		primary, err = local.New(local.Config{})
	}
	if err != nil {
		s.close()
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = primary.Close() })
	rec, err := boot.Recorder(cfg, logs)
	if err != nil {
		s.close()
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = rec.Close() })
	lim, err := app.New(cfg, app.Deps{Store: primary, Fallback: fallback, Recorder: rec})
	if err != nil {
		s.close()
		return nil, err
	}
	s.lim = lim
	s.closers = append(s.closers, func() { _ = lim.Close() })
	return s, nil
}

// openStore opens Redis as the services do (REDIS_URL, or the file's
// redis_url), else the cluster nodes of REDIS_CLUSTER_ADDRS. There is no
// local fallback: an embedded store would hold no one's counts.
func openStore(cfg app.Config, dial time.Duration) (ports.Store, error) {
	rc := redis.Config{URL: cfg.RedisURL, DialTimeout: dial}
	where := app.RedactURL(cfg.RedisURL)
	if cfg.RedisURL == "" {
		var addrs []string
		for a := range strings.SplitSeq(os.Getenv(EnvClusterAddrs), ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, fail(exitStore, fmt.Errorf("no store: set %s (or redis_url in the file) or %s", app.EnvRedisURL, EnvClusterAddrs))
		}
		rc = redis.Config{Addrs: addrs, Mode: redis.ModeCluster, DialTimeout: dial}
		where = "cluster " + strings.Join(addrs, ",")
	}
	st, err := redis.New(rc)
	if err == nil {
		// A service starts unconnected and degraded during an outage; an
		// operator's command has nothing to do without the store.
		if err = st.Ready(); err != nil {
			_ = st.Close()
		}
	}
	if err != nil {
		return nil, fail(exitStore, fmt.Errorf("store unreachable (%s): %w", where, err))
	}
	return st, nil
}

// windowsRequest is the WindowsRequest of the target's descriptors.
func (s *session) windowsRequest(t *target) (app.WindowsRequest, error) {
	wr, err := s.envoyCfg.WindowsRequest(t.domain, t.descriptors)
	if err != nil {
		return wr, fail(exitUnknown, err)
	}
	if t.ip != "" {
		a, err := domain.ParseClientIP(t.ip)
		if err != nil {
			return wr, fail(exitBadIdentity, fmt.Errorf("-ip %q: %w", t.ip, err))
		}
		wr.ClientIP = a
	}
	return wr, nil
}

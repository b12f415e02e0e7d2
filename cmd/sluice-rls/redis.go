package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/adapters/redis"
)

// envoyproxy/ratelimit's Redis variables that sluice-rls reads (README,
// "Envoy's rate-limit service"). REDIS_URL takes the peer's forms (a
// host:port, a comma-separated list for a cluster, a socket path) and
// sluice's (a redis://, rediss:// or unix:// URL).
const (
	envRedisURL        = "REDIS_URL"
	envRedisType       = "REDIS_TYPE"
	envRedisSocketType = "REDIS_SOCKET_TYPE"
	envRedisAuth       = "REDIS_AUTH"
	envRedisTLS        = "REDIS_TLS"
	envRedisTLSCACert  = "REDIS_TLS_CACERT"
	envRedisTLSCert    = "REDIS_TLS_CLIENT_CERT"
	envRedisTLSKey     = "REDIS_TLS_CLIENT_KEY"
	envRedisTLSSkipSNI = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"
)

// envError is a peer variable sluice-rls cannot honour as given: it
// names the variable, never its value (REDIS_AUTH is a password; a URL
// may carry one).
type envError struct {
	name, reason string
}

func (e *envError) Error() string { return e.name + ": " + e.reason }

// peerRedis reads the Redis store's configuration as envoyproxy/ratelimit
// reads its variables, from getenv; fileURL is redis_url of
// -sluice-config, used when REDIS_URL is unset. It returns nil, and a
// warning for each Redis variable set, when neither names a server (the
// embedded store), and an error naming the variable for what it cannot
// honour: it never dials a host other than the one named. Unlike the
// peer, an unset REDIS_TYPE finds the mode from the server (standalone
// or cluster) and an unset REDIS_SOCKET_TYPE reads a host:port as TCP
// (the peer's default, unix, would take it for a socket path).
func peerRedis(getenv func(string) string, fileURL string) (*redis.Config, []string, error) {
	target := getenv(envRedisURL)
	if target == "" {
		target = fileURL
	}
	if target == "" {
		var warnings []string
		for _, name := range []string{envRedisType, envRedisSocketType, envRedisAuth, envRedisTLS, envRedisTLSCACert, envRedisTLSCert, envRedisTLSKey, envRedisTLSSkipSNI} {
			if getenv(name) != "" {
				warnings = append(warnings, name+" is set but REDIS_URL is not: it is not read, and the store is the embedded one")
			}
		}
		return nil, warnings, nil
	}
	rc := &redis.Config{}
	switch typ := strings.ToLower(getenv(envRedisType)); typ {
	case "":
		rc.Mode = redis.ModeAuto
	case "single":
		rc.Mode = redis.ModeStandalone
	case "cluster":
		rc.Mode = redis.ModeCluster
	case "sentinel":
		return nil, nil, &envError{envRedisType, "sentinel is not supported: point REDIS_URL at the master (a standalone server) or at a Redis Cluster"}
	default:
		return nil, nil, &envError{envRedisType, fmt.Sprintf("%q: single or cluster (or unset: found from the server)", typ)}
	}
	tlsOn, err := envBool(getenv, envRedisTLS)
	if err != nil {
		return nil, nil, err
	}
	if err := readTarget(rc, target, strings.ToLower(getenv(envRedisSocketType))); err != nil {
		return nil, nil, err
	}
	if err := readAuth(rc, getenv(envRedisAuth)); err != nil {
		return nil, nil, err
	}
	u, _ := url.Parse(rc.URL)
	tlsOn = tlsOn || (u != nil && u.Scheme == "rediss")
	if strings.HasPrefix(rc.URL, "unix://") && tlsOn {
		return nil, nil, &envError{envRedisTLS, "a unix socket has no TLS"}
	}
	var warnings []string
	if tlsOn {
		if rc.TLS, err = peerTLS(getenv); err != nil {
			return nil, nil, err
		}
	} else {
		for _, name := range []string{envRedisTLSCACert, envRedisTLSCert, envRedisTLSKey, envRedisTLSSkipSNI} {
			if getenv(name) != "" {
				warnings = append(warnings, name+" is set but REDIS_TLS is not: it is not read (no TLS)")
			}
		}
	}
	if err := rc.Validate(); err != nil {
		return nil, nil, err
	}
	return rc, warnings, nil
}

// readTarget reads REDIS_URL (or redis_url) into rc: a URL as is, else
// the peer's forms by REDIS_SOCKET_TYPE.
func readTarget(rc *redis.Config, target, socket string) error {
	switch socket {
	case "", "tcp", "unix":
	default:
		return &envError{envRedisSocketType, fmt.Sprintf("%q: tcp or unix", socket)}
	}
	if strings.Contains(target, "://") {
		if strings.Contains(target, ",") {
			return &envError{envRedisURL, "a list of URLs is not read: give host:port entries, with REDIS_AUTH for the credentials"}
		}
		rc.URL = target
		return nil
	}
	if strings.HasPrefix(target, "/") || socket == "unix" {
		switch {
		case !strings.HasPrefix(target, "/"):
			return &envError{envRedisSocketType, "unix, but REDIS_URL is not a socket path (set REDIS_SOCKET_TYPE=tcp for a host:port)"}
		case socket == "tcp":
			return &envError{envRedisURL, "a path, but REDIS_SOCKET_TYPE is tcp"}
		case rc.Mode == redis.ModeCluster:
			return &envError{envRedisType, "cluster over a unix socket: give the nodes' host:port"}
		}
		rc.URL = "unix://" + target
		return nil
	}
	for a := range strings.SplitSeq(target, ",") {
		host, port, err := net.SplitHostPort(strings.TrimSpace(a))
		if err != nil || host == "" {
			return &envError{envRedisURL, "not host:port, a comma-separated list of them, a socket path, nor a redis:// URL"}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return &envError{envRedisURL, "a port is not a number between 1 and 65535"}
		}
		rc.Addrs = append(rc.Addrs, net.JoinHostPort(host, port))
	}
	if len(rc.Addrs) > 1 && rc.Mode != redis.ModeCluster {
		return &envError{envRedisURL, "a list of nodes needs REDIS_TYPE=cluster"}
	}
	return nil
}

// readAuth reads REDIS_AUTH: "password" or "user:password", as the peer.
func readAuth(rc *redis.Config, auth string) error {
	if auth == "" {
		return nil
	}
	if u, err := url.Parse(rc.URL); err == nil && u.User != nil {
		return &envError{envRedisAuth, "REDIS_URL carries credentials already: give them once"}
	}
	if user, pass, ok := strings.Cut(auth, ":"); ok {
		rc.Username, rc.Password = user, pass
	} else {
		rc.Password = auth
	}
	if rc.Password == "" {
		return &envError{envRedisAuth, "no password"}
	}
	return nil
}

// peerTLS is the TLS configuration of REDIS_TLS and its companions: the
// system's roots plus REDIS_TLS_CACERT, a client certificate from
// REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, and with
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION the chain still verified but not
// the name (the peer's reading, for servers whose certificate names
// another host, such as a managed Redis). ServerName stays empty: each
// node is checked against the host it is dialled by.
func peerTLS(getenv func(string) string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := getenv(envRedisTLSCACert); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, &envError{envRedisTLSCACert, "cannot be read: " + err.Error()}
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &envError{envRedisTLSCACert, "holds no PEM certificate"}
		}
		cfg.RootCAs = pool
	}
	cert, key := getenv(envRedisTLSCert), getenv(envRedisTLSKey)
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, &envError{envRedisTLSCert, "with REDIS_TLS_CLIENT_KEY, not a usable key pair"}
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "" || key != "":
		return nil, &envError{envRedisTLSCert, "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together"}
	}
	skip, err := envBool(getenv, envRedisTLSSkipSNI)
	if err != nil {
		return nil, err
	}
	if skip {
		// Go verifies the chain and the name together; verify the chain
		// alone, here, once Go has skipped both.
		cfg.InsecureSkipVerify = true
		roots := cfg.RootCAs
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis TLS: the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}

// envBool reads a boolean variable; unset is false.
func envBool(getenv func(string) string, name string) (bool, error) {
	v := getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &envError{name, fmt.Sprintf("%q: true or false", v)}
	}
	return b, nil
}

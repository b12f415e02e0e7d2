package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ping connects a real client with opt and returns PING's error.
func ping(t *testing.T, opt rueidis.ClientOption) error {
	t.Helper()
	opt.DisableCache = true
	opt.DisableRetry = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(t.Context(), c.B().Ping().Build()).Error()
}

// fromURL parses u as the redis adapter does (REDIS_URL).
func fromURL(t *testing.T, u string) rueidis.ClientOption {
	t.Helper()
	opt, err := rueidis.ParseURL(u)
	require.NoError(t, err)
	return opt
}

func TestServerPassword(t *testing.T) {
	ctx := t.Context()
	s := NewServerWith(t, Config{
		Password: "adm in\"pw",
		Users: []User{
			{Name: "app", Password: "app-secret"},
			{Name: "reader", Password: "r", Rules: []string{"~rl:*", "+@read", "+ping"}},
		},
	})

	// The harness' own client authenticates; the bare Do does not.
	v, err := s.Do(ctx, "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", v)
	_, err = Do(ctx, s.Addr(), "PING")
	var re RedisError
	require.ErrorAs(t, err, &re)
	assert.True(t, strings.HasPrefix(string(re), "NOAUTH"), "%v", re)

	assert.True(t, strings.HasPrefix(s.URL(), "redis://:"), s.URL())
	assert.Equal(t, "redis://app:app-secret@"+s.Addr(), s.URLWith("app", "app-secret"))

	require.NoError(t, ping(t, fromURL(t, s.URL())), "default user through URL")
	require.NoError(t, ping(t, fromURL(t, s.URLWith("app", "app-secret"))), "ACL user through URLWith")
	require.Error(t, ping(t, fromURL(t, s.URLWith("app", "wrong"))), "wrong password")
	require.Error(t, ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}), "no password")

	// The rules reach Redis verbatim: reader may read rl:* and nothing else.
	opt := fromURL(t, s.URLWith("reader", "r"))
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	defer c.Close()
	require.True(t, rueidis.IsRedisNil(c.Do(ctx, c.B().Get().Key("rl:x").Build()).Error()))
	err = c.Do(ctx, c.B().Set().Key("rl:x").Value("1").Build()).Error()
	require.ErrorContains(t, err, "NOPERM")
	err = c.Do(ctx, c.B().Get().Key("other").Build()).Error()
	require.ErrorContains(t, err, "NOPERM")

	// Restarts keep the password and the users.
	require.NoError(t, s.Kill())
	require.NoError(t, s.Start())
	require.NoError(t, ping(t, fromURL(t, s.URLWith("app", "app-secret"))))
}

func TestServerTLS(t *testing.T) {
	ctx := t.Context()
	s := NewServerWith(t, Config{TLS: true, Password: "pw"})
	assert.True(t, strings.HasPrefix(s.URL(), "rediss://:pw@"), s.URL())
	require.NotNil(t, s.CAPool())

	v, err := s.Do(ctx, "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", v)
	_, err = Do(ctx, s.Addr(), "PING")
	require.Error(t, err, "the server must not answer in clear")

	// The form the redis adapter uses: the URL plus a TLS configuration.
	opt := fromURL(t, s.URL())
	opt.TLSConfig = s.TLSConfig()
	require.NoError(t, ping(t, opt))
	// The URL alone trusts the system's CAs, not the harness' own.
	var unknown x509.UnknownAuthorityError
	require.ErrorAs(t, ping(t, fromURL(t, s.URL())), &unknown)

	// CAFile holds the same CA, for clients configured by file.
	pemBytes, err := os.ReadFile(s.CAFile())
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemBytes))
	opt = fromURL(t, s.URL())
	opt.TLSConfig = &tls.Config{RootCAs: pool}
	require.NoError(t, ping(t, opt))
	block, _ := pem.Decode(pemBytes)
	require.NotNil(t, block)
	ca, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.True(t, ca.IsCA)

	// The certificates outlive a restart.
	require.NoError(t, s.Kill())
	require.NoError(t, s.Start())
	opt = fromURL(t, s.URL())
	opt.TLSConfig = s.TLSConfig()
	require.NoError(t, ping(t, opt))
}

func TestServerMutualTLS(t *testing.T) {
	s := NewServerWith(t, Config{TLS: true, ClientCerts: true})
	cfg := s.TLSConfig()
	require.Len(t, cfg.Certificates, 1)
	require.NoError(t, ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: cfg}))
	require.Error(t, ping(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: &tls.Config{RootCAs: s.CAPool()}}),
		"a client without a certificate")
}

func TestServerWithoutTLS(t *testing.T) {
	srv := NewServer(t)
	assert.Nil(t, srv.TLSConfig())
	assert.Nil(t, srv.CAPool())
	assert.Empty(t, srv.CAFile())
	assert.Equal(t, "redis://"+srv.Addr(), srv.URL())
}

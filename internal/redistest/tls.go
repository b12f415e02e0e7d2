package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names in a TLS server's data directory.
const (
	caCertFile     = "ca.crt"
	serverCertFile = "server.crt"
	serverKeyFile  = "server.key"
)

// tlsMaterial is what a TLS server and its clients need: a CA made for
// the one server, and for mutual TLS a client certificate.
type tlsMaterial struct {
	pool   *x509.CertPool
	caFile string
	client *tls.Certificate // nil unless the server wants client certificates
}

// newTLSMaterial generates a CA, a server certificate for the loopback
// addresses and, when clientCert is set, a client certificate, and writes
// the CA and the server's pair into dir for redis-server. Nothing is
// reused between servers or test runs.
func newTLSMaterial(dir string, clientCert bool) (*tlsMaterial, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	srvDER, srvKey, err := issue("redistest server", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	m := &tlsMaterial{pool: x509.NewCertPool(), caFile: filepath.Join(dir, caCertFile)}
	m.pool.AddCert(ca)
	if err := writePEM(m.caFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, serverCertFile), "CERTIFICATE", srvDER); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, serverKeyFile), "PRIVATE KEY", keyDER); err != nil {
		return nil, err
	}
	if clientCert {
		der, key, err := issue("redistest client", x509.ExtKeyUsageClientAuth)
		if err != nil {
			return nil, err
		}
		m.client = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	return m, nil
}

// config returns a client configuration that trusts the server's CA and,
// for mutual TLS, presents the client certificate. ServerName is left to
// the dialer, which takes it from the address (127.0.0.1).
func (m *tlsMaterial) config() *tls.Config {
	c := &tls.Config{RootCAs: m.pool, MinVersion: tls.VersionTLS12}
	if m.client != nil {
		c.Certificates = []tls.Certificate{*m.client}
	}
	return c
}

// serial returns a random certificate serial number; crypto/rand does not
// fail (it aborts the program instead, since Go 1.24).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

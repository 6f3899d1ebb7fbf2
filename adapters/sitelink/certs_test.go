package sitelink

import (
	"crypto/tls"
	"testing"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
)

// testCA is a certificate authority made for one test.
type testCA struct{ *tlstest.CA }

func newCA(t testing.TB, name string) *testCA { return &testCA{tlstest.NewCA(t, name)} }

// serverCert is central's certificate for the loopback addresses.
func (ca *testCA) serverCert(t testing.TB) tls.Certificate { return ca.Issue(t, "central") }

// clientCert is a site's certificate: its CN is the site id.
func (ca *testCA) clientCert(t testing.TB, site string) tls.Certificate { return ca.Issue(t, site) }

// serverTLS is central's TLS configuration, verifying client certificates
// against ca.
func (ca *testCA) serverTLS(t testing.TB) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}, ClientCAs: ca.Pool}
}

// clientTLS is a site's TLS configuration trusting ca for central, with the
// given client certificates (none for a site with a token only).
func (ca *testCA) clientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool, Certificates: certs}
}

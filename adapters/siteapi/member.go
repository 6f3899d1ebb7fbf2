package siteapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/siteline/outbox/adapters/guard"
)

// memberProto is the TLS application protocol (ALPN) a follower offers, next
// to gRPC's "h2", when it passes a call on: it asks the leader to present
// its member certificate rather than its API certificate. The protocol
// negotiated stays "h2".
const memberProto = "outbox-member"

// memberClientTLS returns the configuration a follower passes calls on
// with: peer's certificate (its member certificate), offering memberProto,
// and accepting only a leader whose certificate one of cas verifies (as a
// server's) and which names one of members. The leader's host name is not
// checked: the member name is its identity, and the address comes from the
// group's configuration.
func memberClientTLS(peer *tls.Config, cas []*x509.Certificate, members []string) *tls.Config {
	c := peer.Clone()
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	c.NextProtos = []string{memberProto}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	members = slices.Clone(members)
	// The chain and the name are verified in VerifyConnection, instead of
	// against RootCAs and the address's host name.
	c.InsecureSkipVerify = true
	c.VerifyPeerCertificate = nil
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("site API: the leader presented no certificate")
		}
		leaf := cs.PeerCertificates[0]
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("site API: the leader's certificate is not a member's (raft.tls.ca): %w", err)
		}
		if guard.MemberName(leaf, members) == "" {
			return fmt.Errorf("site API: the leader's certificate (CN %.64q) names no member of the group", leaf.Subject.CommonName)
		}
		return nil
	}
	return c
}

// presentMemberCert makes the server configuration t present certs (this
// node's member certificate) to a client that offers memberProto, and its
// own certificate to every other client.
func presentMemberCert(t *tls.Config, certs []tls.Certificate) {
	member := t.Clone()
	member.Certificates, member.GetCertificate, member.GetConfigForClient = certs, nil, nil
	inner := t.GetConfigForClient
	t.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(hello.SupportedProtos, memberProto) {
			return member, nil
		}
		if inner != nil {
			return inner(hello)
		}
		return nil, nil
	}
}

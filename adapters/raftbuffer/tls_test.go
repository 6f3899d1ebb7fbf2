package raftbuffer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf issues a certificate for a node at 127.0.0.1, good for both ends.
func (ca *testCA) leaf(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestTLSGroupReplicates(t *testing.T) {
	ca := newTestCA(t, "site CA")
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, cfg.NodeID)}, RootCAs: ca.pool}
	})
	l := c.leader()
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 20)
	mustAppend(t, l, ns...)
	c.waitReplicated(l)
	for _, n := range c.running() {
		requireContents(t, n.id, n, ns)
	}
}

func TestTLSRefusesAForeignCertificate(t *testing.T) {
	ca := newTestCA(t, "site CA")
	other := newTestCA(t, "another CA")
	c := newCluster(t, 3, func(i int, cfg *Config) {
		issuer := ca
		if i == 2 {
			issuer = other // n3 trusts the site's CA but holds a certificate it did not issue
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{issuer.leaf(t, cfg.NodeID)}, RootCAs: ca.pool}
	})
	outsider := c.nodes[2]

	// n1 and n2 are a quorum: they elect one of them.
	var l *Node
	eventually(t, "n1 or n2 to lead", func() bool {
		for _, n := range c.nodes[:2] {
			if n.raft.State() == raft.Leader {
				l = n
				return true
			}
		}
		return false
	})
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		f, ok := o.Data.(raft.FailedHeartbeatObservation)
		return ok && string(f.PeerID) == outsider.id
	})
	l.raft.RegisterObserver(observer)
	defer l.raft.DeregisterObserver(observer)

	ns := buffertest.NewSubmissions(buffertest.BaseTime, 5)
	mustAppend(t, l, ns...)
	follower := c.followers(l)[0]
	if follower == outsider {
		follower = c.followers(l)[1]
	}
	eventually(t, "the trusted follower to replicate", func() bool {
		return sameContents(contents(t, follower), contents(t, l))
	})
	// The leader tried the outsider and failed, twice.
	for range 2 {
		recvLed(t, obs)
	}
	if got, err := outsider.Contains(t.Context(), ids(ns)); err != nil || len(got) != 0 {
		t.Fatalf("the node with a foreign certificate holds %d notifications (%v)", len(got), err)
	}
	if id, _ := outsider.Leader(); id != "" {
		t.Fatalf("the node with a foreign certificate knows leader %q", id)
	}
	st, err := outsider.Stats(t.Context())
	if err != nil || st.Count != 0 || st.Replica.Role == ports.RoleLeader {
		t.Fatalf("outsider Stats = %+v, %v", st, err)
	}
}

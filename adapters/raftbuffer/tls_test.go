package raftbuffer

import (
	"crypto/tls"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
)

func TestTLSGroupReplicates(t *testing.T) {
	ca := tlstest.NewCA(t, "site CA")
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, cfg.NodeID)}, RootCAs: ca.Pool}
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
	ca := tlstest.NewCA(t, "site CA")
	other := tlstest.NewCA(t, "another CA")
	c := newCluster(t, 3, func(i int, cfg *Config) {
		issuer := ca
		if i == 2 {
			issuer = other // n3 trusts the site's CA but holds a certificate it did not issue
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{issuer.Issue(t, cfg.NodeID)}, RootCAs: ca.Pool}
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

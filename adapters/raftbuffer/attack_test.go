package raftbuffer

import (
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/waittest"
)

// The tests here play an outsider who reaches a node's Raft port and speaks
// raft's wire protocol: they reuse raft's own NetworkTransport as the client,
// over a stream layer of their own (TCP, or TLS with whatever certificate the
// outsider holds).

// attackStream is the outsider's raft.StreamLayer: it listens on loopback
// (raft's transport needs a listener) and dials with dial.
type attackStream struct {
	net.Listener
	dial func(addr string, timeout time.Duration) (net.Conn, error)
}

func (s *attackStream) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.dial(string(a), timeout)
}

// attacker is an outsider's raft transport.
type attacker struct {
	trans *raft.NetworkTransport
	hdr   raft.RPCHeader
}

func newAttacker(t *testing.T, dial func(addr string, timeout time.Duration) (net.Conn, error)) *attacker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &attackStream{Listener: ln, dial: dial},
		MaxPool: 1,
		Timeout: 5 * time.Second,
		Logger:  hclog.NewNullLogger(),
	})
	t.Cleanup(func() { _ = trans.Close() })
	return &attacker{trans: trans, hdr: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("mallory"), Addr: []byte(ln.Addr().String()),
	}}
}

// tcpDial dials in clear.
func tcpDial(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

// tlsDial returns a dialer of TLS with cfg.
func tlsDial(cfg *tls.Config) func(string, time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, cfg)
	}
}

// probe sends an AppendEntries of term 0: the node refuses it, and its answer
// says its term and last log index, all an outsider needs for the next step.
func (a *attacker) probe(target *Node) (raft.AppendEntriesResponse, error) {
	var resp raft.AppendEntriesResponse
	err := a.trans.AppendEntries(raft.ServerID(target.id), raft.ServerAddress(target.cfg.self().Address),
		&raft.AppendEntriesRequest{RPCHeader: a.hdr}, &resp)
	return resp, err
}

// lastLogTerm finds the term of the node's last entry, which no answer
// carries, by asking which term makes the log check pass: an AppendEntries
// with no entries at the node's own term, guessing downwards from it. A
// guess of the node's current term does not raise that term, so the search
// cannot depose anyone. ok is false when no guess matched, as when the
// node's term moved on while it searched.
func (a *attacker) lastLogTerm(target *Node, p raft.AppendEntriesResponse) (term uint64, ok bool, err error) {
	for guess := p.Term; guess > 0; guess-- {
		var resp raft.AppendEntriesResponse
		err := a.trans.AppendEntries(raft.ServerID(target.id), raft.ServerAddress(target.cfg.self().Address),
			&raft.AppendEntriesRequest{RPCHeader: a.hdr, Term: p.Term, PrevLogEntry: p.LastLog, PrevLogTerm: guess}, &resp)
		if err != nil {
			return 0, false, err
		}
		if resp.Success {
			return guess, true, nil
		}
		if resp.Term != p.Term || resp.LastLog != p.LastLog {
			return 0, false, nil
		}
	}
	return 0, false, nil
}

// inject sends what a leader of a newer term would: one new entry after the
// node's last, an Append command of the buffer's FSM, with the commit index
// past it, so that the node applies it at once.
func (a *attacker) inject(t *testing.T, target *Node, term, lastIndex, lastTerm uint64, ns []ports.Submission) (raft.AppendEntriesResponse, error) {
	t.Helper()
	data, err := encodeAppend(toPBs(ns))
	if err != nil {
		t.Fatal(err)
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:         a.hdr,
		Term:              term,
		PrevLogEntry:      lastIndex,
		PrevLogTerm:       lastTerm,
		Entries:           []*raft.Log{{Index: lastIndex + 1, Term: term, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: lastIndex + 1,
	}
	var resp raft.AppendEntriesResponse
	err = a.trans.AppendEntries(raft.ServerID(target.id), raft.ServerAddress(target.cfg.self().Address), req, &resp)
	return resp, err
}

// timeoutNow tells the node to start an election at once, as a leader
// handing over does.
func (a *attacker) timeoutNow(target *Node) error {
	var resp raft.TimeoutNowResponse
	return a.trans.TimeoutNow(raft.ServerID(target.id), raft.ServerAddress(target.cfg.self().Address),
		&raft.TimeoutNowRequest{RPCHeader: a.hdr}, &resp)
}

// TestRaftInClearAppliesAnOutsidersAppend shows why a Raft port must never
// be reachable in clear: one crafted AppendEntries from anyone who can reach
// it is applied to the buffer (and Remove commands could be sent the same
// way, dropping notifications already acknowledged). So a node refuses a
// configuration with an address off loopback and no TLS.
func TestRaftInClearAppliesAnOutsidersAppend(t *testing.T) {
	c := newCluster(t, 3)
	target := c.followers(c.leader())[0]
	evil := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Hour), 1)
	a := newAttacker(t, tcpDial)

	// A first try with a wrong guess of the last entry's term fails, and
	// leaves the node's term ahead of its log's, as a try made just after
	// an election, before the leader's no-op arrived, does: the outsider
	// must succeed from there.
	p, err := a.probe(target)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if resp, err := a.inject(t, target, p.Term+1, p.LastLog, p.Term+1, evil); err != nil || resp.Success {
		t.Fatalf("an inject with a wrong previous term: success %v, error %v", resp.Success, err)
	}

	waittest.For(t, waitFor, "the crafted AppendEntries to be accepted", waittest.Holds(func() bool {
		p, err := a.probe(target)
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		// The last entry's term is usually the node's term (a leader's
		// first entry of its term is a no-op), but not after an inject
		// that failed: it raised the node's term, and an election may be
		// under way. Guessing it as the node's term would raise the term
		// again at every try, and keep deposing each new leader before its
		// no-op reached the node.
		lastTerm, ok, err := a.lastLogTerm(target, p)
		if err != nil {
			t.Fatalf("search of the last entry's term: %v", err)
		}
		if !ok {
			return false
		}
		resp, err := a.inject(t, target, p.Term+1, p.LastLog, lastTerm, evil)
		if err != nil {
			t.Fatalf("inject: %v", err)
		}
		return resp.Success
	}))
	waittest.For(t, waitFor, "the outsider's notification in the follower's buffer", waittest.Holds(func() bool {
		got, err := target.Contains(t.Context(), ids(evil))
		return err == nil && got[evil[0].ID]
	}))
	if err := a.timeoutNow(target); err != nil {
		t.Fatalf("TimeoutNow in clear refused: %v", err)
	}
	id, _ := target.Leader()
	t.Logf("in clear, the outsider's notification was applied on %s; after its TimeoutNow the leader is %q", target.id, id)

	// The same node off loopback in clear is refused.
	cfg := c.cfgs[0]
	cfg.Listener, cfg.Bind = nil, "0.0.0.0:7201"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "off loopback and TLS is not set") {
		t.Fatalf("a node listening on every interface in clear: Validate = %v", err)
	}
	cfg.Bind = "127.0.0.1:7201"
	cfg.Peers = append([]Peer(nil), cfg.Peers...)
	cfg.Peers[2].Address = "10.1.2.3:7203"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `Address "10.1.2.3:7203" is off loopback`) {
		t.Fatalf("a peer off loopback in clear: Validate = %v", err)
	}
}

// TestRaftOverTLSRefusesOutsiders sends the same crafted RPCs, with the
// outsider's best knowledge of the node's term and log, to a node of a group
// over mutual TLS: without a client certificate, with a certificate of
// another CA, and with a certificate of the site's own CA that names no
// member (a script's, say). Nothing is applied, leadership does not move,
// and each refusal is counted.
func TestRaftOverTLSRefusesOutsiders(t *testing.T) {
	ca := tlstest.NewCA(t, "site CA")
	other := tlstest.NewCA(t, "another CA")
	refusals := make([]*guard.Refusals, 3)
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, cfg.NodeID)}, RootCAs: ca.Pool}
		refusals[i] = guard.NewRefusals("site_raft", nil, 0)
		cfg.Refusals = refusals[i]
		// raft's default timers: an election under a loaded CI machine
		// would read as the outsider's doing.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 0, 0, 0
	})
	leader := c.leader()
	target := c.followers(leader)[0]
	var targetRefusals *guard.Refusals
	for i, n := range c.nodes {
		if n == target {
			targetRefusals = refusals[i]
		}
	}
	before := contents(t, target)
	term, leaderID := target.raft.CurrentTerm(), leader.id
	lastTerm, err := strconv.ParseUint(target.raft.Stats()["last_log_term"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	lastIndex := target.raft.LastIndex()
	evil := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Hour), 1)

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no client certificate", &tls.Config{RootCAs: ca.Pool}},
		{"a certificate of another CA naming a member", &tls.Config{RootCAs: ca.Pool,
			Certificates: []tls.Certificate{other.Issue(t, "n2")}}},
		{"a certificate of the site's CA naming no member", &tls.Config{RootCAs: ca.Pool,
			Certificates: []tls.Certificate{ca.Issue(t, "script-1")}}},
	} {
		a := newAttacker(t, tlsDial(tc.cfg))
		if _, err := a.probe(target); err == nil {
			t.Errorf("%s: the probe was answered", tc.name)
		}
		if resp, err := a.inject(t, target, term+1, lastIndex, lastTerm, evil); err == nil {
			t.Errorf("%s: the crafted AppendEntries was answered (success %v)", tc.name, resp.Success)
		}
		if err := a.timeoutNow(target); err == nil {
			t.Errorf("%s: TimeoutNow was answered", tc.name)
		}
	}
	waittest.For(t, waitFor, "the 9 failed handshakes counted", waittest.Holds(func() bool {
		return targetRefusals.Count("tls handshake failed") >= 9
	}))

	// The group goes on as before: a Send of its own leader reaches the
	// target, and nothing else does.
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 3)
	mustAppend(t, leader, ns...)
	after := c.waitReplicated(leader)
	if len(after) != len(before)+len(ns) {
		t.Fatalf("the target holds %d notifications, want %d", len(after), len(before)+len(ns))
	}
	for _, n := range c.running() {
		if got, err := n.Contains(t.Context(), ids(evil)); err != nil || got[evil[0].ID] {
			t.Fatalf("%s holds the outsider's notification (%v)", n.id, err)
		}
	}
	if got := target.raft.CurrentTerm(); got != term {
		t.Errorf("the target's term went from %d to %d", term, got)
	}
	if id, _ := target.Leader(); id != leaderID {
		t.Errorf("the leader went from %s to %s", leaderID, id)
	}
}

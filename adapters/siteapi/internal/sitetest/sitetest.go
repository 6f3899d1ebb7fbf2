// Package sitetest holds what the tests of adapters/siteapi and its notify
// client share: a fake ports.Site that records its calls, a scripted
// ports.OpGateway that counts its attempts per node, site API servers on
// 127.0.0.1 whose view of the leader a test sets, and TLS configurations made
// up for one test.
package sitetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// Site is a fake ports.Site that records every call. Its zero value answers
// every Send with the request's id (or a new one), every id with
// ports.StatusForwarding, and Health with HealthReply. The hooks, when set,
// answer instead; set them before the Site is used.
type Site struct {
	// SendHook answers the n-th Send (counted from 0) after it is recorded.
	SendHook func(ctx context.Context, n int, req ports.SendRequest) (string, error)
	// StatusHook answers every Status after it is recorded.
	StatusHook func(ctx context.Context, ids []string) (map[string]ports.Status, error)
	// HealthReply is what Health answers.
	HealthReply ports.SiteHealth

	mu       sync.Mutex
	sends    []ports.SendRequest
	statuses [][]string
	healths  int
}

var _ ports.Site = (*Site)(nil)

// Send records req and answers it.
func (s *Site) Send(ctx context.Context, req ports.SendRequest) (string, error) {
	s.mu.Lock()
	n := len(s.sends)
	s.sends = append(s.sends, req)
	s.mu.Unlock()
	if s.SendHook != nil {
		return s.SendHook(ctx, n, req)
	}
	if req.ID == "" {
		return uuid.NewString(), nil
	}
	return req.ID, nil
}

// Status records ids and answers them.
func (s *Site) Status(ctx context.Context, ids []string) (map[string]ports.Status, error) {
	s.mu.Lock()
	s.statuses = append(s.statuses, append([]string(nil), ids...))
	s.mu.Unlock()
	if s.StatusHook != nil {
		return s.StatusHook(ctx, ids)
	}
	out := make(map[string]ports.Status, len(ids))
	for _, id := range ids {
		out[id] = ports.StatusForwarding
	}
	return out, nil
}

// Health records the call and answers HealthReply.
func (s *Site) Health(context.Context) (ports.SiteHealth, error) {
	s.mu.Lock()
	s.healths++
	s.mu.Unlock()
	return s.HealthReply, nil
}

// Sends returns the Send requests received so far.
func (s *Site) Sends() []ports.SendRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ports.SendRequest(nil), s.sends...)
}

// StatusCalls returns the ids of each Status call received so far.
func (s *Site) StatusCalls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.statuses...)
}

// HealthCalls returns how many Health calls were received.
func (s *Site) HealthCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healths
}

// Calls returns how many calls of any kind the Site received.
func (s *Site) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sends) + len(s.statuses) + s.healths
}

// Options configures the servers Start and StartPair run: the fields of
// siteapi.ServerConfig of the same names, and MemberCA.
type Options struct {
	Token     string
	TLS       *tls.Config
	PeerTLS   *tls.Config
	ClientCAs []*x509.Certificate
	Members   []string
	MemberCAs []*x509.Certificate
	Limits    siteapi.Limits
	Logger    *slog.Logger
	// Ops, when set, gives each node its cached operations (ServerConfig.Ops)
	// by the node's name.
	Ops func(name string) ports.Operations
	// MemberCA, when set, makes the nodes members of one group ("leader"
	// and "follower", unless Members says otherwise) whose certificates it
	// issues: MemberCAs is it, and each node presents its own member
	// certificate (PeerTLS) when it passes calls on.
	MemberCA *tlstest.CA
}

// Node is one site API server on 127.0.0.1 in front of a fake Site.
type Node struct {
	// Addr is the server's address.
	Addr string
	// Site is the fake behind the server.
	Site *Site
	// Server is the server; the test's cleanup stops it.
	Server *siteapi.Server
	// LeaderCalls counts the calls of the server's Leader function.
	LeaderCalls atomic.Int64
	// OnLeader, when set (before the node is called), is called with the
	// count of every call of the Leader function.
	OnLeader func(n int64)

	mu     sync.Mutex
	self   bool
	leader string
}

// SetLeader sets what the node's Leader function answers.
func (n *Node) SetLeader(self bool, leaderAddr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.self, n.leader = self, leaderAddr
}

func (n *Node) leaderView() (bool, string) {
	if c := n.LeaderCalls.Add(1); n.OnLeader != nil {
		n.OnLeader(c)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.self, n.leader
}

// Start runs a site API server for name on 127.0.0.1, port 0, with a fresh
// fake Site whose health names the node name. It knows no leader until
// SetLeader. The test's cleanup stops the server and checks that Serve
// returned nil.
func Start(t testing.TB, name string, opt Options) *Node {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	n := &Node{Addr: lis.Addr().String(), Site: &Site{HealthReply: ports.SiteHealth{Site: "site-a", Node: name}}}
	if opt.MemberCA != nil {
		if len(opt.Members) == 0 {
			opt.Members = []string{"leader", "follower"}
		}
		opt.MemberCAs = append(opt.MemberCAs, opt.MemberCA.Cert)
		peer := &tls.Config{}
		if opt.PeerTLS != nil {
			peer = opt.PeerTLS.Clone()
		}
		peer.Certificates = []tls.Certificate{opt.MemberCA.Issue(t, name)}
		opt.PeerTLS = peer
	}
	var ops ports.Operations
	if opt.Ops != nil {
		ops = opt.Ops(name)
	}
	srv, err := siteapi.NewServer(siteapi.ServerConfig{
		Site:      n.Site,
		Ops:       ops,
		Leader:    n.leaderView,
		Token:     opt.Token,
		TLS:       opt.TLS,
		PeerTLS:   opt.PeerTLS,
		ClientCAs: opt.ClientCAs,
		Members:   opt.Members,
		MemberCAs: opt.MemberCAs,
		Limits:    opt.Limits,
		Logger:    opt.Logger,
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	n.Server = srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve of %s: %v", name, err)
		}
	})
	return n
}

// StartPair starts a leader and a follower that knows it.
func StartPair(t testing.TB, opt Options) (leader, follower *Node) {
	t.Helper()
	leader = Start(t, "leader", opt)
	follower = Start(t, "follower", opt)
	leader.SetLeader(true, "")
	follower.SetLeader(false, leader.Addr)
	return leader, follower
}

// DeadAddr returns an address on 127.0.0.1 where nothing listens and no
// listener can be given the port while t runs (plugintest.RefusedAddr).
func DeadAddr(t testing.TB) string {
	t.Helper()
	return plugintest.RefusedAddr(t)
}

// TLSConfigs returns a server configuration with a certificate for
// 127.0.0.1, signed by a certificate authority made for this test, and a
// client configuration that trusts only that authority.
func TLSConfigs(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	ca := tlstest.NewCA(t, "sitetest CA")
	server = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "site node")}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	return server, client
}

// ErrBoom is an error no sentinel classifies: the server must answer it as
// Internal, without its text.
var ErrBoom = errors.New("boom: the disk at /secret/path is on fire")

// WaitRefused waits until the node's server has counted want refusals for
// reason, and fails if it does not within ten seconds or counts more. A
// request refused while it is read is counted by the handler after gRPC
// has already answered the caller, so a test that reads the count at once
// may read it too early.
func WaitRefused(t testing.TB, n *Node, reason string, want int) {
	t.Helper()
	waittest.For(t, 10*time.Second, fmt.Sprintf("%d refusals counted as %q", want, reason), func() (bool, string) {
		got := n.Server.Refusals().Count(reason)
		if got > want {
			t.Fatalf("refusals counted as %q: %d, want %d", reason, got, want)
		}
		return got == want, fmt.Sprintf("%d counted", got)
	})
}

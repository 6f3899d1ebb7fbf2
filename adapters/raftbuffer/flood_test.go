package raftbuffer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/guard/guardtest"
)

// The tests here play outsiders who flood a node's Raft port over TLS: with
// garbage instead of a ClientHello, and with handshakes they never finish,
// from many addresses.

// garbageHello is what the outsider sends instead of a ClientHello: a TLS
// record header and text.
var garbageHello = []byte(strings.Repeat("\x16\x03\x01\x00\x05hello-garbage\r\n", 4))

// dialFrom connects to addr from the loopback address local.
func dialFrom(local, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: waitFor, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return d.Dial("tcp", addr)
}

// TestGarbageHandshakesLogBoundedLines: 8 outsiders send 400 garbage
// handshakes to a node's Raft port. Every one is refused and counted, and
// the node's log holds a refusal line per outsider address, not one raft
// ERROR line per connection ("failed to decode incoming command").
func TestGarbageHandshakesLogBoundedLines(t *testing.T) {
	ca := tlstest.NewCA(t, "site CA")
	var logs guardtest.LogBuffer
	var refusals *guard.Refusals
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, cfg.NodeID)}, RootCAs: ca.Pool}
		if i == 0 {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			refusals = guard.NewRefusals("site_raft", cfg.Logger, 0)
			cfg.Refusals = refusals
		}
	})
	c.leader()
	target := c.nodes[0].cfg.self().Address
	before := strings.Count(logs.String(), "\n")

	const senders, each = 8, 50
	var wg sync.WaitGroup
	var sent atomic.Int64
	for i := range senders {
		wg.Go(func() {
			for range each {
				conn, err := dialFrom(fmt.Sprintf("127.0.0.%d", 20+i), target)
				if err != nil {
					t.Errorf("dial: %v", err)
					return
				}
				sent.Add(1)
				_ = conn.SetDeadline(time.Now().Add(waitFor))
				_, _ = conn.Write(garbageHello)
				_, _ = io.Copy(io.Discard, conn)
				conn.Close()
			}
		})
	}
	wg.Wait()
	eventually(t, "every garbage handshake refused", func() bool {
		return int64(refusals.Count("tls handshake failed")+refusals.Count("too many connections")) >= sent.Load()
	})

	out := logs.String()
	lines := strings.Split(out, "\n")[before:]
	var loud []string
	for _, l := range lines {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			loud = append(loud, l)
		}
	}
	t.Logf("%d garbage handshakes: %d refused in the handshake, %d over the caps; %d WARN or ERROR lines",
		sent.Load(), refusals.Count("tls handshake failed"), refusals.Count("too many connections"), len(loud))
	if n := strings.Count(out, "failed to decode incoming command"); n > 0 {
		t.Errorf("raft logged %d connections it could not read: the failed handshakes reached raft", n)
	}
	// One refusal line per outsider address a minute, and room for a line
	// or two of the group's own.
	if len(loud) > senders+4 {
		t.Errorf("%d WARN or ERROR lines for %d garbage handshakes from %d addresses, want at most %d:\n%s",
			len(loud), sent.Load(), senders, senders+4, strings.Join(loud[:min(len(loud), 20)], "\n"))
	}
}

// TestMemberConnectsWhileOutsidersHoldTheSlots: outsiders from 16
// addresses keep every connection slot of a node's Raft port that is not
// reserved for a member busy with handshakes they never finish (dialing
// again whenever one is closed); a member, from its configured address,
// still connects and is answered.
func TestMemberConnectsWhileOutsidersHoldTheSlots(t *testing.T) {
	ca := tlstest.NewCA(t, "site CA")
	refusals := make([]*guard.Refusals, 3)
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, cfg.NodeID)}, RootCAs: ca.Pool}
		refusals[i] = guard.NewRefusals("site_raft", nil, 0)
		cfg.Refusals = refusals[i]
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 0, 0, 0
	})
	leader := c.leader()
	target, targetRefusals := c.nodes[0], refusals[0]
	if target == leader {
		target, targetRefusals = c.nodes[1], refusals[1]
	}
	addr := target.cfg.self().Address

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	const addresses, perAddress = 16, 16
	for a := range addresses {
		for range perAddress {
			wg.Go(func() {
				for ctx.Err() == nil {
					conn, err := dialFrom(fmt.Sprintf("127.0.0.%d", 40+a), addr)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					// Hold it, saying nothing, until the node closes it.
					context.AfterFunc(ctx, func() { conn.Close() })
					_, _ = io.Copy(io.Discard, conn)
					conn.Close()
				}
			})
		}
	}
	eventually(t, "the outsiders to fill the slots", func() bool {
		return targetRefusals.Count("too many connections") > 0
	})

	member := newAttacker(t, tlsDial(&tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Issue(t, leader.id)}}))
	for i := range 3 {
		if _, err := member.probe(target); err != nil {
			t.Fatalf("a member's call %d while outsiders hold the shared slots: %v", i+1, err)
		}
		// Each call on a new connection.
		member.trans.CloseStreams()
	}
}

// TestStalledHandshakesDoNotDelayAMember: handshakes that never finish are
// pending while a member connects; the member's connection is handed to
// raft at once, not after theirs time out.
func TestStalledHandshakesDoNotDelayAMember(t *testing.T) {
	ca := tlstest.NewCA(t, "site CA")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peers := []Peer{{ID: "n1", Address: ln.Addr().String()}, {ID: "n2", Address: "127.0.0.1:1"}}
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "n1")}, RootCAs: ca.Pool}
	r := guard.NewRefusals("site_raft", nil, 0)
	// The stalled handshakes stay pending for the whole test.
	s := newStreamLayer(ln, peers[0].Address, cfg, peers, 10*time.Minute, r, slog.New(slog.DiscardHandler))
	defer s.Close()

	for i := range raftConnsPerAddress {
		conn, err := dialFrom(fmt.Sprintf("127.0.0.%d", 60+i), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if i%2 == 0 {
			_, _ = conn.Write(garbageHello[:3]) // half a record header, then nothing
		}
	}
	dialed := make(chan error, 1)
	go func() {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "localhost",
			Certificates: []tls.Certificate{ca.Issue(t, "n2")}})
		if err == nil {
			// With TLS 1.3 the server checks the client's certificate after
			// the client's side ended: read until the server closes.
			_ = conn.SetReadDeadline(time.Now().Add(waitFor))
			_, err = conn.Read(make([]byte, 1))
			if errors.Is(err, io.EOF) {
				err = nil
			}
			conn.Close()
		}
		dialed <- err
	}()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := s.Accept(); err == nil {
			accepted <- c
		}
	}()
	select {
	case c := <-accepted:
		cs := c.(*tls.Conn).ConnectionState()
		c.Close()
		if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != "n2" {
			t.Fatalf("Accept returned a connection of %v", cs.PeerCertificates)
		}
	case <-time.After(waitFor):
		t.Fatalf("the member's connection was not handed over within %s while %d handshakes stalled", waitFor, raftConnsPerAddress)
	}
	if n := r.Count("tls handshake failed"); n != 0 {
		t.Fatalf("%d handshakes failed already", n)
	}
	if err := <-dialed; err != nil {
		t.Fatalf("the member's dial: %v", err)
	}
}

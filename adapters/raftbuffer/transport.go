package raftbuffer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/adapters/guard"
)

// The bounds of the Raft listener. A group has a handful of members, each
// holding a few pooled connections to each other (plus a pipeline and, now
// and then, a snapshot stream); past these, connections are closed at once.
const (
	raftConnsPerAddress = 16
	raftConnsTotal      = 64
	// raftHandshakeTimeout bounds the TLS handshake of an incoming
	// connection: raft itself sets no deadline on a connection's first read.
	raftHandshakeTimeout = 10 * time.Second
)

// streamLayer is raft's stream layer over TCP, optionally mutual TLS. It
// reports the advertised address, not the bound one, as its Addr: raft
// sends it to the other nodes as this node's address.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	tls       *tls.Config
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer wraps ln: at most raftConnsPerAddress connections from one
// address and raftConnsTotal in all; with cfg non-nil, connections in both
// directions are mutual TLS with cfg, the certificate on the other side must
// name one of members, and an incoming handshake must end within
// raftHandshakeTimeout. Refused connections are counted and logged by
// refusals.
func newStreamLayer(ln net.Listener, advertise string, cfg *tls.Config, members []string, refusals *guard.Refusals) *streamLayer {
	ln = guard.LimitListener(ln, guard.ConnLimits{PerAddress: raftConnsPerAddress, Total: raftConnsTotal}, refusals)
	s := &streamLayer{Listener: ln, advertise: tcpAddr(advertise)}
	if cfg != nil {
		s.tls = mutualTLS(cfg, members)
		s.Listener = &tlsListener{Listener: ln, tls: s.tls, timeout: raftHandshakeTimeout, refusals: refusals}
	}
	return s
}

// tlsListener is tls.NewListener with a deadline on each connection's
// handshake and every failed handshake counted as a refusal.
type tlsListener struct {
	net.Listener
	tls      *tls.Config
	timeout  time.Duration
	refusals *guard.Refusals
}

// Accept implements net.Listener. The handshake runs at the connection's
// first Read or Write, on raft's goroutine for it, never in Accept.
func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serverConn{Conn: tls.Server(c, l.tls), l: l}, nil
}

// serverConn is an incoming TLS connection whose handshake is bounded.
type serverConn struct {
	*tls.Conn
	l    *tlsListener
	once sync.Once
	err  error
}

func (c *serverConn) handshake() {
	c.once.Do(func() {
		_ = c.Conn.SetDeadline(time.Now().Add(c.l.timeout))
		if err := c.Conn.Handshake(); err != nil {
			c.err = fmt.Errorf("raftbuffer: TLS handshake with %s: %w", c.RemoteAddr(), err)
			msg := err.Error()
			if len(msg) > 200 {
				msg = msg[:200]
			}
			c.l.refusals.Refuse(guard.Host(c.RemoteAddr()), "tls handshake failed", "err", msg)
			return
		}
		_ = c.Conn.SetDeadline(time.Time{})
	})
}

// Read implements net.Conn.
func (c *serverConn) Read(p []byte) (int, error) {
	if c.handshake(); c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// Write implements net.Conn.
func (c *serverConn) Write(p []byte) (int, error) {
	if c.handshake(); c.err != nil {
		return 0, c.err
	}
	return c.Conn.Write(p)
}

// mutualTLS returns a copy of cfg that requires and checks a client
// certificate against ClientCAs (RootCAs when unset), TLS 1.2 at least, and
// that accepts, in both directions, only a certificate naming one of
// members (after cfg's own VerifyConnection, if any).
func mutualTLS(cfg *tls.Config, members []string) *tls.Config {
	c := cfg.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if c.ClientCAs == nil {
		c.ClientCAs = c.RootCAs
	}
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	members = slices.Clone(members)
	inner := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if inner != nil {
			if err := inner(cs); err != nil {
				return err
			}
		}
		return namesMember(cs.PeerCertificates, members)
	}
	return c
}

// errNotMember is the refusal of a certificate that names no member.
var errNotMember = errors.New("raftbuffer: the peer's certificate names no member of the group")

// namesMember accepts a verified peer certificate whose subject CN, or one
// of whose DNS names, is a member's id. A certificate the site's CA issued
// to something else (a script's client certificate, another service) is
// refused: only the group's nodes speak Raft.
func namesMember(chain []*x509.Certificate, members []string) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: no certificate", errNotMember)
	}
	leaf := chain[0]
	for _, m := range members {
		if leaf.Subject.CommonName == m || slices.Contains(leaf.DNSNames, m) {
			return nil
		}
	}
	return fmt.Errorf("%w (CN %.64q)", errNotMember, leaf.Subject.CommonName)
}

// Addr is the advertised address.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a peer, completing the TLS handshake within timeout.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.tls == nil {
		return d.Dial("tcp", string(address))
	}
	return tls.DialWithDialer(d, "tcp", string(address), s.tls)
}

// tcpAddr is an advertised host:port, which may be a name.
type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }

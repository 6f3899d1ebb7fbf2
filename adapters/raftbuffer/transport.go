package raftbuffer

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/raft"
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

// newStreamLayer wraps ln; with cfg non-nil, connections in both directions
// are mutual TLS with cfg.
func newStreamLayer(ln net.Listener, advertise string, cfg *tls.Config) *streamLayer {
	s := &streamLayer{Listener: ln, advertise: tcpAddr(advertise)}
	if cfg != nil {
		s.tls = mutualTLS(cfg)
		s.Listener = tls.NewListener(ln, s.tls)
	}
	return s
}

// mutualTLS returns a copy of cfg that requires and checks a client
// certificate against ClientCAs (RootCAs when unset), TLS 1.2 at least.
func mutualTLS(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if c.ClientCAs == nil {
		c.ClientCAs = c.RootCAs
	}
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	return c
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

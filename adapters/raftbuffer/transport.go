package raftbuffer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/adapters/guard"
)

// The bounds of the Raft listener. A member holds a few connections to each
// other member: up to three pooled ones, a pipeline, a heartbeat and now and
// then a snapshot stream or a vote. Connections from a member's address
// (its configured host, resolved) take slots reserved for it; the others
// share a small pool with a small cap per address, so that outsiders, who
// can only fail their handshake, cannot take the members' slots.
const (
	// raftConnsPerMember is the slots reserved for each member on the
	// address its Raft host resolves to (members sharing an address share
	// their slots).
	raftConnsPerMember = 16
	// raftConnsPerAddress and raftConnsShared bound the connections from
	// addresses that are no member's (an IPv6 address by its /64): a member
	// behind NAT connects from one of those too.
	raftConnsPerAddress = 8
	raftConnsShared     = 32
	// raftHandshakeTimeout bounds the TLS handshake of an incoming
	// connection: a member on the plant network completes it in
	// milliseconds, and raft itself sets no deadline on a connection's first
	// read.
	raftHandshakeTimeout = 5 * time.Second
	// memberResolveInterval is how often the members' host names are
	// resolved again (IP addresses need no resolving).
	memberResolveInterval = time.Minute
	// acceptLogInterval bounds the log lines of failing Accepts.
	acceptLogInterval = time.Minute
)

// streamLayer is raft's stream layer over TCP, optionally mutual TLS. It
// reports the advertised address, not the bound one, as its Addr: raft
// sends it to the other nodes as this node's address.
//
// With TLS, raft never sees a connection before its handshake succeeded
// and its certificate named a member: a goroutine of the stream layer
// accepts, one goroutine per pending connection (at most the listener's
// caps) runs its handshake within raftHandshakeTimeout, and Accept hands
// raft the established ones. A failed handshake is a refusal, counted and
// logged at a bounded rate, never a line of raft's own log (raft logs every
// connection it cannot read at ERROR). Close stops them all.
type streamLayer struct {
	ln        net.Listener // capped by guard.LimitListener
	advertise net.Addr
	tls       *tls.Config
	timeout   time.Duration
	refusals  *guard.Refusals
	log       *slog.Logger
	members   *memberAddrs

	ready  chan net.Conn // established, member-verified connections
	done   chan struct{} // closed by Close
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer wraps ln with the bounds above; with cfg non-nil,
// connections in both directions are mutual TLS with cfg, the certificate
// on the other side must name one of peers, and an incoming handshake must
// end within handshake (raftHandshakeTimeout). Refused connections are
// counted and logged by refusals, other trouble by log.
func newStreamLayer(ln net.Listener, advertise string, cfg *tls.Config, peers []Peer, handshake time.Duration,
	refusals *guard.Refusals, log *slog.Logger) *streamLayer {
	ctx, cancel := context.WithCancel(context.Background())
	s := &streamLayer{
		advertise: tcpAddr(advertise),
		timeout:   handshake,
		refusals:  refusals,
		log:       log,
		members:   newMemberAddrs(peers),
		ready:     make(chan net.Conn),
		done:      make(chan struct{}),
		ctx:       ctx,
		cancel:    cancel,
	}
	s.ln = guard.LimitListener(ln, guard.ConnLimits{
		PerAddress: raftConnsPerAddress,
		Total:      raftConnsShared,
		Reserved:   s.members.reserved,
	}, refusals)
	if s.members.hasNames() {
		s.wg.Add(1)
		go s.resolveMembers()
	}
	if cfg != nil {
		s.tls = mutualTLS(cfg, peerIDs(peers))
		s.wg.Add(1)
		go s.acceptLoop()
	}
	return s
}

// Accept implements net.Listener: the next connection raft may read.
func (s *streamLayer) Accept() (net.Conn, error) {
	if s.tls == nil {
		return s.ln.Accept()
	}
	select {
	case c := <-s.ready:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: it stops accepting, ends the pending
// handshakes and waits for the stream layer's goroutines. The connections
// raft holds are raft's to close.
func (s *streamLayer) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.cancel()
		s.closeErr = s.ln.Close()
		s.wg.Wait()
	})
	return s.closeErr
}

// Addr is the advertised address.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// acceptLoop accepts connections and starts a handshake for each, until
// Close. It never waits for a handshake.
func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	var logged time.Time
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: wait a little, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			if time.Since(logged) >= acceptLogInterval {
				logged = time.Now()
				s.log.Error("raftbuffer: accept a Raft connection", "err", err)
			}
			select {
			case <-s.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		s.wg.Add(1)
		go s.handshake(c)
	}
}

// handshake completes the TLS handshake of raw within the timeout (the
// client's certificate verified and naming a member), then hands the
// connection to Accept; a failure is a refusal.
func (s *streamLayer) handshake(raw net.Conn) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	c := tls.Server(raw, s.tls)
	if err := c.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		if s.ctx.Err() == nil {
			msg := err.Error()
			if len(msg) > 200 {
				msg = msg[:200]
			}
			s.refusals.Refuse(guard.CallerKey(raw.RemoteAddr()), "tls handshake failed", "err", msg)
		}
		return
	}
	select {
	case s.ready <- c:
	case <-s.done:
		_ = c.Close()
	}
}

// resolveMembers resolves the members' host names every
// memberResolveInterval until Close.
func (s *streamLayer) resolveMembers() {
	defer s.wg.Done()
	t := time.NewTicker(memberResolveInterval)
	defer t.Stop()
	for {
		s.members.resolve(s.ctx, s.log)
		select {
		case <-s.done:
			return
		case <-t.C:
		}
	}
}

// memberAddrs is where the members connect from: the IP addresses of their
// configured Raft hosts, each with the slots it reserves.
type memberAddrs struct {
	hosts []string // every member's host, as configured

	mu    sync.RWMutex
	slots map[netip.Addr]int
	names map[string][]netip.Addr // the last addresses each name resolved to
}

func newMemberAddrs(peers []Peer) *memberAddrs {
	m := &memberAddrs{names: make(map[string][]netip.Addr)}
	for _, p := range peers {
		if host, _, err := net.SplitHostPort(p.Address); err == nil {
			m.hosts = append(m.hosts, host)
		}
	}
	m.update()
	return m
}

// hasNames reports whether a member's host is a name to resolve.
func (m *memberAddrs) hasNames() bool {
	return slices.ContainsFunc(m.hosts, func(h string) bool {
		_, err := netip.ParseAddr(h)
		return err != nil
	})
}

// resolve looks the members' host names up again; a name that does not
// resolve keeps its last addresses.
func (m *memberAddrs) resolve(ctx context.Context, log *slog.Logger) {
	for _, h := range m.hosts {
		if _, err := netip.ParseAddr(h); err == nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		addrs, err := net.DefaultResolver.LookupNetIP(lctx, "ip", h)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("raftbuffer: resolve a member's host; its connections take shared slots until it resolves", "host", h, "err", err)
			}
			continue
		}
		m.mu.Lock()
		m.names[h] = addrs
		m.mu.Unlock()
	}
	m.update()
}

// update recomputes the reserved slots from the hosts.
func (m *memberAddrs) update() {
	m.mu.Lock()
	defer m.mu.Unlock()
	slots := make(map[netip.Addr]int)
	for _, h := range m.hosts {
		addrs := m.names[h]
		if a, err := netip.ParseAddr(h); err == nil {
			addrs = []netip.Addr{a}
		}
		for _, a := range addrs {
			slots[a.Unmap().WithZone("")] += raftConnsPerMember
		}
	}
	m.slots = slots
}

// reserved is guard.ConnLimits.Reserved: the slots reserved for ip.
func (m *memberAddrs) reserved(ip string) int {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.slots[a.Unmap().WithZone("")]
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
// of whose DNS names, is a member's id (guard.MemberName). A certificate the
// site's CA issued to something else (a script's client certificate,
// another service) is refused: only the group's nodes speak Raft.
func namesMember(chain []*x509.Certificate, members []string) error {
	if len(chain) == 0 {
		return fmt.Errorf("no certificate: %w", errNotMember)
	}
	if guard.MemberName(chain[0], members) != "" {
		return nil
	}
	return fmt.Errorf("CN %.64q: %w", chain[0].Subject.CommonName, errNotMember)
}

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

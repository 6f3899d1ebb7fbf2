package guard

import (
	"net"
	"strings"
	"sync"

	"github.com/siteline/outbox/ports"
)

// ConnLimits bounds the connections a listener keeps open.
type ConnLimits struct {
	// PerAddress is the most connections open at once from one client
	// address (its CallerKey: an IPv6 client by its /64); 0 means no bound.
	PerAddress int
	// Total is the most connections open at once; 0 means no bound.
	Total int
	// Reserved, when set, returns how many connections the client IP ip (as
	// Host gives it) may hold in slots of its own, 0 for none. A connection
	// from such an address takes one of its reserved slots or is refused: it
	// counts neither against PerAddress nor against Total, so the other
	// callers cannot take its slots, and it never takes theirs. The site's
	// Raft listener reserves slots for the members' addresses.
	Reserved func(ip string) int
}

// Validate returns one *ports.FieldError per broken rule, joined: no
// bound is negative, and Total is not below PerAddress.
func (lim ConnLimits) Validate() error {
	var fe ports.FieldErrors
	if lim.PerAddress < 0 {
		fe.Add("PerAddress", "must not be negative, got %d", lim.PerAddress)
	}
	if lim.Total < 0 {
		fe.Add("Total", "must not be negative, got %d", lim.Total)
	}
	if lim.PerAddress > 0 && lim.Total > 0 && lim.Total < lim.PerAddress {
		fe.Add("Total", "%d is below PerAddress (%d)", lim.Total, lim.PerAddress)
	}
	return fe.Err()
}

// LimitListener returns a listener that accepts like l but closes at once,
// and counts as a refusal ("too many connections"), a connection past
// lim: more than PerAddress open from its address, or more than Total in
// all (or, from an address with reserved slots, more than it reserves).
// Unlike golang.org/x/net/netutil.LimitListener it never blocks Accept,
// so callers over their bound cannot hold back the others. refusals may be
// nil.
func LimitListener(l net.Listener, lim ConnLimits, refusals *Refusals) net.Listener {
	return &limitListener{Listener: l, lim: lim, refusals: refusals,
		open: make(map[string]int), reserved: make(map[string]int)}
}

type limitListener struct {
	net.Listener
	lim      ConnLimits
	refusals *Refusals

	mu       sync.Mutex
	open     map[string]int // shared slots held, by caller key
	reserved map[string]int // reserved slots held, by IP
	total    int            // shared slots held
}

// Accept implements net.Listener.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if release, ok := l.admit(c.RemoteAddr()); ok {
			return &limitedConn{Conn: c, release: release}, nil
		}
		if l.refusals != nil {
			l.refusals.Refuse(CallerKey(c.RemoteAddr()), "too many connections")
		}
		_ = c.Close()
	}
}

// admit takes a slot for a connection from addr, and returns what gives it
// back.
func (l *limitListener) admit(addr net.Addr) (release func(), ok bool) {
	if l.lim.Reserved != nil {
		ip := Host(addr)
		if n := l.lim.Reserved(ip); n > 0 {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.reserved[ip] >= n {
				return nil, false
			}
			l.reserved[ip]++
			return func() { l.releaseReserved(ip) }, true
		}
	}
	key := CallerKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.Total > 0 && l.total >= l.lim.Total {
		return nil, false
	}
	if l.lim.PerAddress > 0 && l.open[key] >= l.lim.PerAddress {
		return nil, false
	}
	l.total++
	l.open[key]++
	return func() { l.release(key) }, true
}

func (l *limitListener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

func (l *limitListener) releaseReserved(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserved[ip]--; l.reserved[ip] <= 0 {
		delete(l.reserved, ip)
	}
}

// limitedConn gives its slot back once, at its first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close implements net.Conn.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// OnLoopback reports whether addr (host:port) can be reached only from this
// machine: its host is "localhost" or a loopback IP address. An address
// without a port, an empty host and an unspecified address (0.0.0.0, [::]),
// which listen on every interface, are not on loopback. Entrances may run
// without their protection only on loopback.
func OnLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && LoopbackHost(host)
}

// LoopbackHost reports whether host names this machine: "localhost" (in any
// case) or a loopback IP address.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package guard

import (
	"net"
	"strings"
	"sync"
)

// ConnLimits bounds the connections a listener keeps open.
type ConnLimits struct {
	// PerAddress is the most connections open at once from one client
	// address (IP); 0 means no bound.
	PerAddress int
	// Total is the most connections open at once; 0 means no bound.
	Total int
}

// LimitListener returns a listener that accepts like l but closes at once,
// and counts as a refusal ("too many connections"), a connection past
// lim: more than PerAddress open from its address, or more than Total in
// all. Unlike golang.org/x/net/netutil.LimitListener it never blocks Accept,
// so callers over their bound cannot hold back the others. refusals may be
// nil.
func LimitListener(l net.Listener, lim ConnLimits, refusals *Refusals) net.Listener {
	return &limitListener{Listener: l, lim: lim, refusals: refusals, open: make(map[string]int)}
}

type limitListener struct {
	net.Listener
	lim      ConnLimits
	refusals *Refusals

	mu    sync.Mutex
	open  map[string]int
	total int
}

// Accept implements net.Listener.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := Host(c.RemoteAddr())
		if l.admit(host) {
			return &limitedConn{Conn: c, release: func() { l.release(host) }}, nil
		}
		if l.refusals != nil {
			l.refusals.Refuse(host, "too many connections")
		}
		_ = c.Close()
	}
}

func (l *limitListener) admit(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.Total > 0 && l.total >= l.lim.Total {
		return false
	}
	if l.lim.PerAddress > 0 && l.open[host] >= l.lim.PerAddress {
		return false
	}
	l.total++
	l.open[host]++
	return true
}

func (l *limitListener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.open[host]--; l.open[host] <= 0 {
		delete(l.open, host)
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

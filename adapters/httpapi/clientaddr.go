package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// maxClientAddr bounds a client address that is not an IP address (a test's
// or a unix socket's RemoteAddr), which is used as given.
const maxClientAddr = 64

// clientAddr returns the address of the client that sent r, the key of the
// login throttle and of the refusal log: the TCP peer's IP address, or,
// when the peer is one of Config.TrustedProxies, the address that proxy
// reports in X-Forwarded-For. The header is read from the right: each
// trusted proxy appends the address it got the request from, so the first
// entry from the right that is not a trusted proxy is the client; entries
// further left are whatever the client chose to send and are never read.
func (s *Server) clientAddr(r *http.Request) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		if len(host) > maxClientAddr {
			host = host[:maxClientAddr]
		}
		return strings.ToValidUTF8(host, "?")
	}
	peer = peer.Unmap().WithZone("")
	if !s.trustedProxy(peer) {
		return peer.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		entries := strings.Split(hops[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			a, ok := forwardedAddr(entries[j])
			if !ok {
				// Not an address a proxy we trust would write: the
				// request counts as the proxy's own.
				return peer.String()
			}
			if !s.trustedProxy(a) {
				return a.String()
			}
		}
	}
	return peer.String()
}

// forwardedAddr reads one X-Forwarded-For entry: an IP address, possibly
// with a port ("192.0.2.7:1234", "[2001:db8::1]:1234").
func forwardedAddr(entry string) (netip.Addr, bool) {
	entry = strings.TrimSpace(entry)
	if a, err := netip.ParseAddr(entry); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// trustedProxy reports whether a is one of Config.TrustedProxies.
func (s *Server) trustedProxy(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

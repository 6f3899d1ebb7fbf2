package guard

import (
	"crypto/x509"
	"net"
	"net/netip"
	"slices"
)

// CallerKey returns the key under which an entrance limits and logs the
// client at addr: an IPv4 address (or an IPv4-mapped IPv6 one) as itself,
// the IPv6 loopback address as itself, any other IPv6 address by its /64
// ("2001:db8:1:2::/64"), since one host is routinely given a whole /64 and
// could otherwise take a new key for each call; anything that is not an IP
// address as Host gives it. The login throttle of the core applies the same
// rule to its client addresses.
func CallerKey(addr net.Addr) string {
	h := Host(addr)
	a, err := netip.ParseAddr(h)
	if err != nil {
		return h
	}
	a = a.Unmap().WithZone("")
	if a.Is4() || a.IsLoopback() {
		return a.String()
	}
	p, err := a.Prefix(64)
	if err != nil {
		return a.String()
	}
	return p.String()
}

// MemberName returns the member of a group that a verified certificate
// names: the first of members equal to its subject CN or to one of its DNS
// names; "" when it names none. The site's Raft transport and its site API
// recognise the group's nodes by it.
func MemberName(cert *x509.Certificate, members []string) string {
	if cert == nil {
		return ""
	}
	for _, m := range members {
		if m != "" && (cert.Subject.CommonName == m || slices.Contains(cert.DNSNames, m)) {
			return m
		}
	}
	return ""
}

package httpapi

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClientAddrTrustsOnlyConfiguredProxies: X-Forwarded-For is read only
// from a configured proxy, from the right, so a client cannot choose the
// address it is throttled as.
func TestClientAddrTrustsOnlyConfiguredProxies(t *testing.T) {
	s := &Server{cfg: Config{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("::1/128"),
	}}}
	for _, c := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"192.0.2.7:4711", nil, "192.0.2.7"},
		{"192.0.2.7:4711", []string{"198.51.100.1"}, "192.0.2.7"}, // not a proxy: the header is the client's own
		{"[::ffff:192.0.2.7]:1", nil, "192.0.2.7"},
		{"[fe80::1%eth0]:1", nil, "fe80::1"},
		{"10.0.0.5:4711", nil, "10.0.0.5"},
		{"10.0.0.5:4711", []string{"198.51.100.1"}, "198.51.100.1"},
		{"10.0.0.5:4711", []string{"6.6.6.6, 198.51.100.1"}, "198.51.100.1"},             // the left part is the client's choice
		{"10.0.0.5:4711", []string{"6.6.6.6", "198.51.100.1, 10.0.0.9"}, "198.51.100.1"}, // through two proxies
		{"10.0.0.5:4711", []string{"10.0.0.8, 10.0.0.9"}, "10.0.0.5"},                    // only proxies: the nearest
		{"10.0.0.5:4711", []string{"not-an-address"}, "10.0.0.5"},
		{"10.0.0.5:4711", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"10.0.0.5:4711", []string{"198.51.100.1:1234"}, "198.51.100.1"},
		{"[::1]:80", []string{"2001:db8::7"}, "2001:db8::7"},
		{"pipe", nil, "pipe"},
	} {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := s.clientAddr(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %q, want %q", c.peer, c.xff, got, c.want)
		}
	}
}

// FuzzClientAddr: whatever the peer and the header, the client address is
// short valid text; from an untrusted peer it is the peer's own, and from a
// trusted proxy an IP address.
func FuzzClientAddr(f *testing.F) {
	f.Add("10.0.0.5:4711", "198.51.100.1")
	f.Add("192.0.2.7:1", "6.6.6.6, 10.0.0.1")
	f.Add("[::1]:80", "[2001:db8::1]:443,  ,\x00")
	f.Add("\xff\xfe:1", strings.Repeat("1.2.3.4,", 100))
	s := &Server{cfg: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}}
	bare := &Server{}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		got := s.clientAddr(r)
		if len(got) > maxClientAddr || !utf8.ValidString(got) {
			t.Fatalf("client address %q", got)
		}
		own := bare.clientAddr(r)
		if a, err := netip.ParseAddr(own); err == nil && s.trustedProxy(a) {
			if _, err := netip.ParseAddr(got); err != nil {
				t.Fatalf("through a trusted proxy, %q is no address", got)
			}
			return
		}
		if got != own {
			t.Fatalf("untrusted peer %q with X-Forwarded-For %q: %q, want its own %q", peer, xff, got, own)
		}
	})
}

package channel

import (
	"errors"
	"net/netip"
	"testing"
)

// FuzzParseNetworkPrefix: an entry either parses to a canonical prefix that
// reads back the same, or is refused with ErrInvalidNetworkPolicy.
func FuzzParseNetworkPrefix(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/8", "192.168.1.20", "fd00::/8", "::1", "0.0.0.0/0", "::/0", "10.1.2.3/8", "fe80::1%eth0",
		"::ffff:10.0.0.1", "10.0.0.0/33", "10.0.0.0/08", "example.com", "", " 127.0.0.1 ", "1.2.3.4/+8",
		"::ffff:0:0/96", "2001:db8::/129", "1.2.3.4/32/1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseNetworkPrefix(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidNetworkPolicy) {
				t.Fatalf("ParseNetworkPrefix(%q): %v does not wrap ErrInvalidNetworkPolicy", s, err)
			}
			return
		}
		if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			t.Fatalf("ParseNetworkPrefix(%q) = %v: not canonical", s, p)
		}
		q, err := ParseNetworkPrefix(p.String())
		if err != nil || q != p {
			t.Fatalf("ParseNetworkPrefix(%q) = %v, which reads back as %v, %v", s, p, q, err)
		}
	})
}

// FuzzDecodeNetworkPolicy: a value central could pass either decodes to a
// policy that encodes and decodes to itself, or is refused; and whatever the
// rules, an IPv4 address and its IPv4-mapped IPv6 form, with or without a
// zone, get the same answer.
func FuzzDecodeNetworkPolicy(f *testing.F) {
	for _, s := range []struct{ policy, addr string }{
		{`{"allow":["127.0.0.0/8"],"deny":[]}`, "127.0.0.1"},
		{`{"allow":["169.254.0.0/16"]}`, "169.254.169.254"},
		{`{"allow":["10.1.0.0/16"],"deny":["10.0.0.0/8"]}`, "10.1.2.3"},
		{`{"deny":["0.0.0.0/0","::/0"]}`, "8.8.8.8"},
		{``, "fe80::1%eth0"},
		{`{"allow":["x"]}`, "::1"},
		{`{"allow":null,"deny":null}`, "::ffff:127.0.0.1"},
		{`{"allow":["::1"]} trailing`, "::1"},
	} {
		f.Add(s.policy, s.addr)
	}
	f.Fuzz(func(t *testing.T, policy, addr string) {
		p, err := DecodeNetworkPolicy(policy)
		if err != nil {
			if !errors.Is(err, ErrInvalidNetworkPolicy) {
				t.Fatalf("DecodeNetworkPolicy(%q): %v does not wrap ErrInvalidNetworkPolicy", policy, err)
			}
			return
		}
		enc := p.Encode()
		q, err := DecodeNetworkPolicy(enc)
		if err != nil || q.Encode() != enc {
			t.Fatalf("DecodeNetworkPolicy(%q): Encode %s reads back as %v, %v", policy, enc, q, err)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		plain := a.WithZone("").Unmap()
		want := p.Check(plain) == nil
		if got := p.Check(a) == nil; got != want {
			t.Fatalf("policy %s: %s allowed %v but %s allowed %v", enc, a, got, plain, want)
		}
		if plain.Is4() {
			if got := p.Check(netip.AddrFrom16(plain.As16())) == nil; got != want {
				t.Fatalf("policy %s: %s allowed %v but its mapped form %v", enc, plain, want, got)
			}
		}
		if got := q.Check(a) == nil; got != want {
			t.Fatalf("policy %s: %s allowed %v, after a round trip %v", enc, a, want, got)
		}
		// The built-in metadata address stays denied unless a configured
		// rule names exactly it (or something more specific: nothing is).
		if plain == netip.MustParseAddr("169.254.169.254") && want {
			named := false
			for _, pr := range p.Allowed() {
				named = named || pr == netip.MustParsePrefix("169.254.169.254/32")
			}
			if !named {
				t.Fatalf("policy %s allows the metadata address without naming it", enc)
			}
		}
	})
}

package channel

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustPolicy(t testing.TB, allow, deny []string) *NetworkPolicy {
	t.Helper()
	p, err := NewNetworkPolicy(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withOwn makes p judge addrs, and no other, as this machine's own
// addresses, so that a test's verdicts do not depend on the machine's.
func withOwn(p *NetworkPolicy, addrs ...string) *NetworkPolicy {
	own := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		own[i] = netip.MustParseAddr(a)
	}
	p.own = func() ([]netip.Addr, error) { return own, nil }
	return p
}

func TestNetworkPolicyDefaults(t *testing.T) {
	p := withOwn(DefaultNetworkPolicy())
	for addr, allowed := range map[string]bool{
		"127.0.0.1": false, "127.1.2.3": false, "::1": false,
		"169.254.169.254": false, "169.254.1.1": false, "fe80::1": false, "fe80::1%eth0": false,
		"fd00:ec2::254": false, "100.100.100.200": false,
		"0.0.0.0": false, "0.1.2.3": false, "::": false,
		"224.0.0.1": false, "239.255.255.250": false, "ff02::1": false, "255.255.255.255": false,
		"::ffff:127.0.0.1": false, "::ffff:169.254.169.254": false,
		// Private networks stay allowed: plant receivers live there.
		"10.0.0.1": true, "172.16.5.4": true, "192.168.1.20": true, "fd00::1": true, "fc00::1": true,
		"100.100.100.100": true, "8.8.8.8": true, "2001:db8::1": true, "::ffff:10.0.0.1": true,
	} {
		err := p.Check(netip.MustParseAddr(addr))
		if (err == nil) != allowed {
			t.Errorf("default policy, %s: %v, want allowed %v", addr, err, allowed)
		}
		if err != nil && !errors.Is(err, ErrNetworkDenied) {
			t.Errorf("%s: %v does not wrap ErrNetworkDenied", addr, err)
		}
	}
	if err := p.Check(netip.Addr{}); err == nil {
		t.Error("the invalid address is allowed")
	}
	if got, want := p.Check(netip.MustParseAddr("127.0.0.1")).Error(), "address 127.0.0.1 is denied by the delivery network policy"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
	if got, want := p.Check(netip.MustParseAddr("::ffff:127.0.0.1")).Error(), "address 127.0.0.1 is denied by the delivery network policy"; got != want {
		t.Errorf("mapped address: error %q, want %q", got, want)
	}
}

// TestNetworkPolicyMostSpecificWins pins the rules' semantics: the longest
// prefix decides; at equal length a configured rule beats a built-in one,
// and among configured rules deny wins.
func TestNetworkPolicyMostSpecificWins(t *testing.T) {
	cases := []struct {
		name        string
		allow, deny []string
		want        map[string]bool
	}{
		{"LinkLocalAllowedMetadataStaysDenied", []string{"169.254.0.0/16"}, nil,
			map[string]bool{"169.254.169.254": false, "169.254.10.1": true, "fe80::1": false}},
		{"MetadataAllowedByItsOwnAddress", []string{"169.254.169.254"}, nil,
			map[string]bool{"169.254.169.254": true, "169.254.10.1": false}},
		{"LoopbackAllowedOverridesTheBuiltinOfTheSameLength", []string{"127.0.0.0/8", "::1"}, nil,
			map[string]bool{"127.0.0.1": true, "127.0.0.2": true, "::1": true, "169.254.169.254": false}},
		{"OneLoopbackAddress", []string{"127.0.0.1/32"}, nil,
			map[string]bool{"127.0.0.1": true, "127.0.0.2": false, "::ffff:127.0.0.1": true}},
		{"TieIsDenied", []string{"10.0.0.0/8"}, []string{"10.0.0.0/8"},
			map[string]bool{"10.1.2.3": false, "192.168.1.1": true}},
		{"AllowInsideDeny", []string{"10.1.0.0/16"}, []string{"10.0.0.0/8"},
			map[string]bool{"10.1.2.3": true, "10.2.0.1": false}},
		{"DenyInsideAllow", []string{"127.0.0.0/8"}, []string{"127.0.0.2"},
			map[string]bool{"127.0.0.1": true, "127.0.0.2": false}},
		{"DenyEverythingButOneNetwork", []string{"192.168.10.0/24"}, []string{"0.0.0.0/0", "::/0"},
			map[string]bool{"192.168.10.7": true, "8.8.8.8": false, "2001:db8::1": false, "127.0.0.1": false}},
		{"AllowEverything", []string{"0.0.0.0/0", "::/0"}, nil,
			// A /0 is less specific than every built-in deny.
			map[string]bool{"8.8.8.8": true, "127.0.0.1": false, "169.254.169.254": false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := withOwn(mustPolicy(t, c.allow, c.deny))
			for addr, allowed := range c.want {
				if err := p.Check(netip.MustParseAddr(addr)); (err == nil) != allowed {
					t.Errorf("%s: %v, want allowed %v", addr, err, allowed)
				}
			}
		})
	}
}

// TestNetworkPolicyDeniesThisMachine: a service on central's machine that
// listens on all interfaces answers on the machine's LAN addresses as it
// does on loopback, so those are denied by a built-in rule of each one
// address, which only a configured rule of that same address overrides.
func TestNetworkPolicyDeniesThisMachine(t *testing.T) {
	own := []string{"192.168.1.5", "fd00::2", "10.9.8.7"}
	for _, c := range []struct {
		name        string
		allow, deny []string
		want        map[string]bool
	}{
		{"Default", nil, nil,
			map[string]bool{"192.168.1.5": false, "::ffff:192.168.1.5": false, "fd00::2": false, "10.9.8.7": false,
				"192.168.1.6": true, "fd00::3": true, "10.9.8.8": true}},
		{"ItsNetworkAllowed", []string{"192.168.1.0/24", "fd00::/64", "0.0.0.0/0"}, nil,
			map[string]bool{"192.168.1.5": false, "fd00::2": false, "192.168.1.6": true}},
		{"TheAddressItselfAllowed", []string{"192.168.1.5", "fd00::2/128"}, nil,
			map[string]bool{"192.168.1.5": true, "fd00::2": true, "10.9.8.7": false}},
		{"AllowedAndDenied", []string{"192.168.1.5"}, []string{"192.168.1.5"},
			map[string]bool{"192.168.1.5": false}},
		{"LoopbackStaysTheLoopbackRules", []string{"127.0.0.0/8"}, nil,
			map[string]bool{"127.0.0.1": true, "192.168.1.5": false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := withOwn(mustPolicy(t, c.allow, c.deny), own...)
			for addr, allowed := range c.want {
				err := p.Check(netip.MustParseAddr(addr))
				if (err == nil) != allowed {
					t.Errorf("%s: %v, want allowed %v", addr, err, allowed)
				}
				if err != nil && !errors.Is(err, ErrNetworkDenied) {
					t.Errorf("%s: %v does not wrap ErrNetworkDenied", addr, err)
				}
			}
		})
	}
	err := withOwn(DefaultNetworkPolicy(), own...).Check(netip.MustParseAddr("192.168.1.5"))
	if got, want := errorText(err), "address 192.168.1.5 is denied by the delivery network policy (it is an address of this machine)"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}

	// The list is read at each check: an address the machine gains is
	// denied from the next check on.
	var mu sync.Mutex
	list := []netip.Addr{netip.MustParseAddr("192.168.1.5")}
	p := DefaultNetworkPolicy()
	p.own = func() ([]netip.Addr, error) { mu.Lock(); defer mu.Unlock(); return slices.Clone(list), nil }
	if err := p.Check(netip.MustParseAddr("192.168.7.7")); err != nil {
		t.Fatalf("before DHCP: %v", err)
	}
	mu.Lock()
	list = append(list, netip.MustParseAddr("192.168.7.7"))
	mu.Unlock()
	if err := p.Check(netip.MustParseAddr("192.168.7.7")); err == nil {
		t.Error("an address the machine gained is allowed")
	}

	// When the addresses cannot be listed, only what a rule of the one
	// address allows is allowed.
	p = mustPolicy(t, []string{"192.168.1.9"}, nil)
	p.own = func() ([]netip.Addr, error) { return nil, errors.New("netlink: permission denied") }
	if err := p.Check(netip.MustParseAddr("192.168.1.9")); err != nil {
		t.Errorf("an address allowed by itself, addresses unlisted: %v", err)
	}
	err = p.Check(netip.MustParseAddr("8.8.8.8"))
	if !errors.Is(err, ErrNetworkDenied) || !strings.Contains(errorText(err), "this machine's own addresses cannot be listed: netlink: permission denied") {
		t.Errorf("addresses unlisted, 8.8.8.8: %v; want denied, saying why", err)
	}
}

// TestDialerRefusesThisMachinesAddress plays the attacker of the review at
// the dialer: a service bound to all interfaces, reached through one of
// this machine's non-loopback addresses, is refused before any connection
// is made, and reached once that address is allowed.
func TestDialerRefusesThisMachinesAddress(t *testing.T) {
	addr := nonLoopbackAddr(t)
	rec := listenRecording(t, "")
	_, port, _ := net.SplitHostPort(rec.addr)
	target := net.JoinHostPort(addr.String(), port)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	c, err := DefaultNetworkPolicy().Dialer().DialContext(ctx, "tcp", target)
	if err == nil {
		_ = c.Close()
		t.Fatalf("dial %s, this machine's own address: connected under the default policy", target)
	}
	if want := "address " + addr.String() + " is denied by the delivery network policy"; !strings.Contains(errorText(err), want) {
		t.Errorf("dial %s: %v; want %q", target, err, want)
	}
	c, err = mustPolicy(t, []string{addr.String()}, nil).Dialer().DialContext(ctx, "tcp", target)
	if err != nil {
		t.Fatalf("dial %s with %s allowed: %v", target, addr, err)
	}
	local := c.LocalAddr().String()
	_ = c.Close()
	waitFor(t, "the allowed connection accepted", func() bool { return slices.Contains(rec.accepted(), local) })
	if got := rec.accepted(); len(got) != 1 {
		t.Errorf("connections accepted from %v, want only the allowed one (%s)", got, local)
	}
}

// nonLoopbackAddr returns one of this machine's interface addresses that is
// neither loopback nor link-local, or skips the test.
func nonLoopbackAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := hostAddrs()
	if err != nil {
		t.Skipf("cannot list this machine's addresses: %v", err)
	}
	for _, a := range addrs {
		if !a.IsLinkLocalUnicast() && (a.Is4() || !slices.ContainsFunc(addrs, netip.Addr.Is4)) {
			return a
		}
	}
	t.Skipf("this machine has no non-loopback interface address to test with (it has %v)", addrs)
	return netip.Addr{}
}

func TestParseNetworkPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8": "10.0.0.0/8", " 192.168.1.20 ": "192.168.1.20/32", "fd00::/8": "fd00::/8",
		"::1": "::1/128", "0.0.0.0/0": "0.0.0.0/0", "FE80::/10": "fe80::/10",
	} {
		p, err := ParseNetworkPrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseNetworkPrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                    "empty",
		"   ":                 "empty",
		"example.com":         `"example.com" is not an IP address or a CIDR prefix`,
		"10.0.0.0/33":         `"10.0.0.0/33": the prefix length 33 is out of range for IPv4 (0 to 32)`,
		"fd00::/129":          `"fd00::/129": the prefix length 129 is out of range for IPv6 (0 to 128)`,
		"10.0.0.0/":           `"10.0.0.0/": the prefix length "" is not a whole number from 0 to 32`,
		"10.0.0.0/x":          `the prefix length "x" is not a whole number`,
		"10.0.0.0/-1":         `the prefix length "-1" is not a whole number`,
		"10.0.0.0/08":         `the prefix length "08" is not a whole number`,
		"10.1.2.3/8":          `"10.1.2.3/8" has bits set after the prefix length: write 10.0.0.0/8 (the network) or 10.1.2.3 (the one address)`,
		"fe80::1%eth0":        "has a zone",
		"fe80::%eth0/10":      "has a zone",
		"::ffff:10.0.0.1":     "IPv4-mapped IPv6 address: write it as IPv4 (10.0.0.1)",
		"::ffff:10.0.0.0/104": "IPv4-mapped IPv6 address",
		"10.0.0.0/8/8":        "is not a whole number",
		"010.0.0.1":           "is not an IP address",
		"10.0.0.0 /8":         "is not an IP address",
	} {
		_, err := ParseNetworkPrefix(in)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalidNetworkPolicy) {
			t.Errorf("ParseNetworkPrefix(%q): %v; want an ErrInvalidNetworkPolicy saying %q", in, err, want)
		}
	}
}

func TestNewNetworkPolicyNamesEveryBadEntry(t *testing.T) {
	_, err := NewNetworkPolicy([]string{"10.0.0.0/8", "nope"}, []string{"1.2.3.4/40", "fd00::/8"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`allow[1]: "nope" is not an IP address`, `deny[0]: "1.2.3.4/40": `, `range for IPv4 (0 to 32): invalid delivery network policy`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestNetworkPolicyEncoding(t *testing.T) {
	p := mustPolicy(t, []string{"127.0.0.1", "10.0.0.0/8"}, []string{"10.9.0.0/16"})
	enc := p.Encode()
	if want := `{"allow":["127.0.0.1/32","10.0.0.0/8"],"deny":["10.9.0.0/16"]}`; enc != want {
		t.Errorf("Encode = %s, want %s", enc, want)
	}
	q, err := DecodeNetworkPolicy(enc)
	if err != nil || q.Encode() != enc {
		t.Fatalf("DecodeNetworkPolicy(Encode) = %v, %v", q, err)
	}
	if got := DefaultNetworkPolicy().Encode(); got != `{"allow":[],"deny":[]}` {
		t.Errorf("default Encode = %s", got)
	}
	for _, v := range []string{"", "  "} {
		if q, err := DecodeNetworkPolicy(v); err != nil || q.Check(netip.MustParseAddr("127.0.0.1")) == nil {
			t.Errorf("DecodeNetworkPolicy(%q) = %v, %v; want the default policy", v, q, err)
		}
	}
	for v, want := range map[string]string{
		"allow 127.0.0.1":                    "not a JSON object",
		`{"allow":["127.0.0.1"],"extra":1}`:  `unknown field "extra"`,
		`{"allow":["127.0.0.1"]} {}`:         "text after the JSON object",
		`{"allow":"127.0.0.1"}`:              "not a JSON object",
		`{"allow":["localhost"]}`:            `allow[0]: "localhost" is not an IP address`,
		`[]`:                                 "not a JSON object",
		`{"allow":["127.0.0.1"],"deny":[1]}`: "not a JSON object",
	} {
		_, err := DecodeNetworkPolicy(v)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalidNetworkPolicy) {
			t.Errorf("DecodeNetworkPolicy(%q): %v; want an error saying %q", v, err, want)
		}
	}
}

func TestNetworkPolicyFromEnv(t *testing.T) {
	t.Setenv(NetworkPolicyEnv, `{"allow":["127.0.0.0/8"],"deny":[]}`)
	if p := NetworkPolicyFromEnv(); p.Err() != nil || p.Check(netip.MustParseAddr("127.0.0.1")) != nil {
		t.Errorf("policy allowing loopback: %v", p)
	}
	t.Setenv(NetworkPolicyEnv, "")
	if p := NetworkPolicyFromEnv(); p.Err() != nil || p.Check(netip.MustParseAddr("127.0.0.1")) == nil {
		t.Errorf("empty: %v, want the default policy", p)
	}
	// A malformed policy denies everything, saying why, rather than fall
	// back to something central did not mean.
	t.Setenv(NetworkPolicyEnv, `{"allow":["127.0.0.0/8"],"deny_everything_else":true}`)
	p := NetworkPolicyFromEnv()
	if p.Err() == nil {
		t.Fatal("malformed policy: no Err")
	}
	err := p.Check(netip.MustParseAddr("8.8.8.8"))
	if err == nil || !errors.Is(err, ErrNetworkDenied) || !strings.Contains(err.Error(), NetworkPolicyEnv) {
		t.Errorf("malformed policy, 8.8.8.8: %v; want denied, naming %s", err, NetworkPolicyEnv)
	}
}

// acceptLog listens on host:0 and records the remote address of every
// connection it accepts; it skips the test when host cannot be bound.
type acceptLog struct {
	addr string
	mu   sync.Mutex
	from []string
}

func listenRecording(t *testing.T, host string) *acceptLog {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s here: %v", host, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	l := &acceptLog{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.from = append(l.from, c.RemoteAddr().String())
			l.mu.Unlock()
			_ = c.Close()
		}
	}()
	return l
}

func (l *acceptLog) accepted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.from...)
}

// TestDialerRefusesDeniedAddresses plays the attacker at the dialer: a
// loopback address, a name resolving to it, and the metadata address are
// refused before any connection is made.
func TestDialerRefusesDeniedAddresses(t *testing.T) {
	rec := listenRecording(t, "127.0.0.1")
	addr := rec.addr
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	d := DefaultNetworkPolicy().Dialer()
	for _, target := range []string{addr, net.JoinHostPort("localhost", port)} {
		c, err := d.DialContext(ctx, "tcp", target)
		if err == nil {
			_ = c.Close()
			t.Fatalf("dial %s: connected under the default policy", target)
		}
		var de *DeniedError
		if !errors.As(err, &de) || !errors.Is(err, ErrNetworkDenied) || !de.Addr.IsLoopback() {
			t.Errorf("dial %s: %v; want a DeniedError for a loopback address", target, err)
		}
	}
	// Allowed, the same dial connects. The listener accepts in order, so
	// once it has the allowed connection, a refused one would be there too.
	c, err := mustPolicy(t, []string{"127.0.0.1"}, nil).Dialer().DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s with 127.0.0.1 allowed: %v", addr, err)
	}
	local := c.LocalAddr().String()
	_ = c.Close()
	waitFor(t, "the allowed connection accepted", func() bool { return slices.Contains(rec.accepted(), local) })
	if got := rec.accepted(); len(got) != 1 {
		t.Errorf("connections accepted from %v, want only the allowed one (%s)", got, local)
	}

	// The metadata address with all of link-local allowed: refused by
	// Control, before any packet leaves (no timeout to wait for).
	_, err = mustPolicy(t, []string{"169.254.0.0/16"}, nil).Dialer().DialContext(ctx, "tcp", "169.254.169.254:80")
	if got, want := errorText(err), "address 169.254.169.254 is denied by the delivery network policy"; !strings.Contains(got, want) {
		t.Errorf("dial the metadata address: %v; want %q", err, want)
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingServer starts an HTTP server on host that counts its requests.
func countingHTTP(t *testing.T, host string, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s here: %v", host, err)
	}
	n := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, n
}

// TestHTTPClientRefusesARedirectToADeniedAddress: a receiver the policy
// allows (127.0.0.1) redirects to one it denies (127.0.0.2); the SDK's
// client follows redirects, each through the same dialer, so the second
// connection is refused and the denied server gets nothing.
func TestHTTPClientRefusesARedirectToADeniedAddress(t *testing.T) {
	denied, deniedHits := countingHTTP(t, "127.0.0.2", func(http.ResponseWriter, *http.Request) {})
	allowed, allowedHits := countingHTTP(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, denied.URL+"/internal-admin", http.StatusTemporaryRedirect)
	})
	client := mustPolicy(t, []string{"127.0.0.1"}, nil).HTTPClient()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, allowed.URL+"/hook", strings.NewReader("{}"))
	resp, err := client.Do(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("redirect to a denied address: HTTP %d, want a refusal", resp.StatusCode)
	}
	if !errors.Is(err, ErrNetworkDenied) || !strings.Contains(err.Error(), "address 127.0.0.2 is denied by the delivery network policy") {
		t.Errorf("error %v; want the policy's refusal of 127.0.0.2", err)
	}
	if allowedHits.Load() != 1 || deniedHits.Load() != 0 {
		t.Errorf("allowed got %d requests, denied %d; want 1 and 0", allowedHits.Load(), deniedHits.Load())
	}
}

// TestProxyChecksTheTarget: through a proxy the proxy connects to the
// target, so the policy judges the target's host before the request goes:
// an IP address, localhost, and numeric forms of addresses are refused
// without the proxy seeing anything; names go to the proxy.
func TestProxyChecksTheTarget(t *testing.T) {
	proxy, proxied := countingHTTP(t, "127.0.0.1", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "via proxy")
	})
	proxyURL, _ := url.Parse(proxy.URL)
	// The proxy is on loopback, so the policy must allow its address.
	p := mustPolicy(t, []string{"127.0.0.1"}, nil)
	tr := p.Transport()
	tr.Proxy = func(req *http.Request) (*url.URL, error) {
		return p.proxy(req, func(*http.Request) (*url.URL, error) { return proxyURL, nil })
	}
	client := &http.Client{Transport: tr}
	get := func(target string) error {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	}
	for _, target := range []string{
		"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/",
		"http://localhost:8080/", "http://admin.localhost/", "http://127.0.0.2/",
		"http://2852039166/", "http://169.254.43518/", "http://0xa9fea9fe/", "http://0251.0376.0251.0376/",
	} {
		if err := get(target); !errors.Is(err, ErrNetworkDenied) {
			t.Errorf("GET %s through the proxy: %v, want refused by the policy", target, err)
		}
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy received %d requests for denied targets", n)
	}
	if err := get("http://receiver.example.test/hook"); err != nil {
		t.Errorf("GET a name through the proxy: %v", err)
	}
	if n := proxied.Load(); n != 1 {
		t.Errorf("the proxy received %d requests, want the allowed one", n)
	}
	// The proxy's own address is checked at connect time.
	strict := DefaultNetworkPolicy()
	tr2 := strict.Transport()
	tr2.Proxy = func(req *http.Request) (*url.URL, error) {
		return strict.proxy(req, func(*http.Request) (*url.URL, error) { return proxyURL, nil })
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://receiver.example.test/hook", nil)
	if resp, err := (&http.Client{Transport: tr2}).Do(req); err == nil {
		_ = resp.Body.Close()
		t.Error("a proxy on a denied address was used")
	} else if !errors.Is(err, ErrNetworkDenied) {
		t.Errorf("proxy on a denied address: %v, want refused by the policy", err)
	}
}

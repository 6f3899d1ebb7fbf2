package channel

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NetworkPolicyEnv names the environment variable through which central
// passes its delivery network policy to every plugin process it starts. Its
// value is what NetworkPolicy.Encode returns: a JSON object
// {"allow": [...], "deny": [...]} of the configured CIDR prefixes, which
// apply on top of the built-in defaults. A plugin reads it with
// NetworkPolicyFromEnv.
const NetworkPolicyEnv = "OUTBOX_CHANNEL_NETWORK_POLICY"

// ErrNetworkDenied is wrapped by every refusal of a delivery network policy.
// A delivery that meets it should be Permanent: the same address would be
// refused again.
var ErrNetworkDenied = errors.New("denied by the delivery network policy")

// ErrInvalidNetworkPolicy is wrapped by the errors of ParseNetworkPrefix,
// NewNetworkPolicy and DecodeNetworkPolicy.
var ErrInvalidNetworkPolicy = errors.New("invalid delivery network policy")

// DeniedError is the error of a connection the delivery network policy
// refuses. Its text names the address, never a URL or a host name (a URL may
// carry a token).
type DeniedError struct {
	// Addr is the address refused; invalid when the host was refused
	// before any address was known (a numeric host name through a proxy).
	Addr netip.Addr
	// why, when set, replaces the usual reason.
	why string
}

// Error reads "address 127.0.0.1 is denied by the delivery network policy".
func (e *DeniedError) Error() string {
	switch {
	case e.why != "" && e.Addr.IsValid():
		return "address " + e.Addr.String() + " is " + e.why
	case e.why != "":
		return e.why
	}
	return "address " + e.Addr.String() + " is denied by the delivery network policy"
}

// Unwrap returns ErrNetworkDenied.
func (e *DeniedError) Unwrap() error { return ErrNetworkDenied }

// NetworkPolicy says which IP addresses a channel may connect to. It holds
// built-in rules and the rules central's configuration adds
// (delivery.network.allow and .deny):
//
//   - denied by default: loopback (127.0.0.0/8, ::1), link-local
//     (169.254.0.0/16, fe80::/10), the cloud metadata addresses
//     (169.254.169.254, fd00:ec2::254, 100.100.100.200), unspecified
//     (0.0.0.0/8, ::), multicast (224.0.0.0/4, ff00::/8) and broadcast
//     (255.255.255.255);
//   - denied by default too: every address of this machine's own network
//     interfaces (its LAN addresses, a Docker bridge's, ...), each as a
//     rule of that one address (/32, /128), because a service that listens
//     on all interfaces (0.0.0.0, ::) answers there as it does on loopback.
//     The addresses are listed (net.InterfaceAddrs) at each check, so an
//     address DHCP gives the machine later is denied from the first
//     connection to it; when they cannot be listed, every address not
//     allowed by a configured rule of that one address is denied;
//   - allowed by default: everything else, private networks (10.0.0.0/8,
//     172.16.0.0/12, 192.168.0.0/16, fc00::/7) included, where plant
//     receivers live.
//
// The most specific rule (the longest prefix) that holds the address
// decides. At equal length a configured rule beats a built-in one, and
// among configured rules deny wins. So allowing 169.254.0.0/16 leaves
// 169.254.169.254 denied (its built-in /32 is more specific) until
// 169.254.169.254 itself is allowed; allowing 127.0.0.0/8 overrides the
// built-in deny of the same prefix; allowing 192.168.1.0/24 leaves this
// machine's 192.168.1.5 denied until 192.168.1.5 itself is allowed.
//
// An IPv4-mapped IPv6 address is judged as the IPv4 address it maps, and a
// zone is ignored. A NetworkPolicy is immutable and safe for concurrent use.
type NetworkPolicy struct {
	allow, deny []netip.Prefix // the configured rules, canonical
	rules       []netRule      // built-in and configured
	broken      error          // non-nil: every address is denied, saying why
	// own lists this machine's addresses for the built-in rule that denies
	// them (hostAddrs; tests give a fixed list).
	own func() ([]netip.Addr, error)
}

// netRule is one rule of a policy.
type netRule struct {
	prefix     netip.Prefix
	allow      bool
	configured bool
}

// builtinDeny are the prefixes denied unless a configured rule allows them.
var builtinDeny = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("::1/128"),            // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local
	netip.MustParsePrefix("fe80::/10"),          // link-local
	netip.MustParsePrefix("169.254.169.254/32"), // cloud metadata (AWS, GCP, Azure, OpenStack, ...)
	netip.MustParsePrefix("fd00:ec2::254/128"),  // cloud metadata (AWS, IPv6)
	netip.MustParsePrefix("100.100.100.200/32"), // cloud metadata (Alibaba Cloud)
	netip.MustParsePrefix("0.0.0.0/8"),          // unspecified ("this network": 0.0.0.0 reaches the host itself)
	netip.MustParsePrefix("::/128"),             // unspecified
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("ff00::/8"),           // multicast
	netip.MustParsePrefix("255.255.255.255/32"), // broadcast
}

// builtinAllow is everything else.
var builtinAllow = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// BuiltinDenied returns the prefixes a policy denies unless its configured
// rules allow them, for documentation and logs. This machine's own
// addresses, denied too, are not among them: each check lists them anew.
func BuiltinDenied() []netip.Prefix { return slices.Clone(builtinDeny) }

// DefaultNetworkPolicy returns the policy of the built-in rules alone.
func DefaultNetworkPolicy() *NetworkPolicy {
	return newPolicy(nil, nil)
}

// NewNetworkPolicy returns the policy of the built-in rules plus allow and
// deny, each entry an IP address (10.1.2.3, fd00::1) or a CIDR prefix
// (10.0.0.0/8, fd00::/8). Its error joins one error per malformed entry,
// each naming the list and the position ("allow[2]") and wrapping
// ErrInvalidNetworkPolicy.
func NewNetworkPolicy(allow, deny []string) (*NetworkPolicy, error) {
	var errs []error
	parse := func(list string, entries []string) []netip.Prefix {
		out := make([]netip.Prefix, 0, len(entries))
		for i, e := range entries {
			p, err := ParseNetworkPrefix(e)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", list, i, err))
				continue
			}
			out = append(out, p)
		}
		return out
	}
	a, d := parse("allow", allow), parse("deny", deny)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return newPolicy(a, d), nil
}

func newPolicy(allow, deny []netip.Prefix) *NetworkPolicy {
	p := &NetworkPolicy{allow: allow, deny: deny, own: hostAddrs}
	for _, pr := range builtinAllow {
		p.rules = append(p.rules, netRule{prefix: pr, allow: true})
	}
	for _, pr := range builtinDeny {
		p.rules = append(p.rules, netRule{prefix: pr})
	}
	for _, pr := range allow {
		p.rules = append(p.rules, netRule{prefix: pr, allow: true, configured: true})
	}
	for _, pr := range deny {
		p.rules = append(p.rules, netRule{prefix: pr, configured: true})
	}
	return p
}

// ParseNetworkPrefix reads one entry of a policy's allow or deny list: an IP
// address, taken as the prefix of that one address, or a CIDR prefix. It
// refuses, with an error wrapping ErrInvalidNetworkPolicy that says what to
// write instead: a blank entry, a host name, a prefix length out of range,
// a prefix with bits set after its length (10.1.2.3/8), a zone (fe80::1%eth0)
// and an IPv4-mapped IPv6 form (::ffff:10.0.0.1).
func ParseNetworkPrefix(s string) (netip.Prefix, error) {
	bad := func(format string, args ...any) (netip.Prefix, error) {
		return netip.Prefix{}, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidNetworkPolicy)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return bad("empty (want an IP address or a CIDR prefix such as 10.0.0.0/8)")
	}
	addrPart, bitsPart, hasBits := strings.Cut(s, "/")
	if strings.Contains(addrPart, "%") {
		return bad("%q has a zone (%%...): zones cannot be matched, leave it out", s)
	}
	addr, err := netip.ParseAddr(addrPart)
	if err != nil {
		return bad("%q is not an IP address or a CIDR prefix (want e.g. 10.0.0.0/8, 192.168.1.20 or fd00::/8; host names are not accepted)", s)
	}
	if addr.Is4In6() {
		return bad("%q is an IPv4-mapped IPv6 address: write it as IPv4 (%s)", s, addr.Unmap())
	}
	if !hasBits {
		return netip.PrefixFrom(addr, addr.BitLen()), nil
	}
	bits, err := strconv.Atoi(bitsPart)
	if err != nil || bitsPart == "" || bitsPart[0] == '+' || bitsPart[0] == '-' || (len(bitsPart) > 1 && bitsPart[0] == '0') {
		return bad("%q: the prefix length %q is not a whole number from 0 to %d", s, bitsPart, addr.BitLen())
	}
	if bits < 0 || bits > addr.BitLen() {
		return bad("%q: the prefix length %d is out of range for IPv%d (0 to %d)", s, bits, ipVersion(addr), addr.BitLen())
	}
	p := netip.PrefixFrom(addr, bits)
	if m := p.Masked(); m != p {
		return bad("%q has bits set after the prefix length: write %s (the network) or %s (the one address)", s, m, addr)
	}
	return p, nil
}

func ipVersion(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// Allowed returns the prefixes the configured rules allow, canonical.
func (p *NetworkPolicy) Allowed() []netip.Prefix { return slices.Clone(p.allow) }

// Denied returns the prefixes the configured rules deny, canonical.
func (p *NetworkPolicy) Denied() []netip.Prefix { return slices.Clone(p.deny) }

// Err returns why the policy denies every address (NetworkPolicyFromEnv met
// a malformed value), or nil.
func (p *NetworkPolicy) Err() error { return p.broken }

// Check returns nil when the policy allows connecting to addr, and a
// *DeniedError otherwise.
func (p *NetworkPolicy) Check(addr netip.Addr) error {
	a := addr.WithZone("").Unmap()
	if p.broken != nil {
		return &DeniedError{Addr: a, why: "denied: " + p.broken.Error()}
	}
	if !a.IsValid() || !p.allows(a, false) {
		return &DeniedError{Addr: a}
	}
	// Allowed by the static rules: is it one of this machine's own?
	own, err := p.isOwn(a)
	if err != nil {
		if !p.allows(a, true) {
			return &DeniedError{Addr: a, why: ErrNetworkDenied.Error() + " (this machine's own addresses cannot be listed: " + err.Error() + ")"}
		}
		return nil
	}
	if own && !p.allows(a, true) {
		return &DeniedError{Addr: a, why: ErrNetworkDenied.Error() + " (it is an address of this machine)"}
	}
	return nil
}

// allows decides for a valid, unmapped address without a zone; own adds
// the built-in deny of that one address, which only a configured rule of
// the same address overrides.
func (p *NetworkPolicy) allows(a netip.Addr, own bool) bool {
	best, bestConfigured, allowed := -1, false, false
	consider := func(r netRule) {
		if !r.prefix.Contains(a) {
			return
		}
		bits := r.prefix.Bits()
		switch {
		case bits > best, bits == best && r.configured && !bestConfigured:
			best, bestConfigured, allowed = bits, r.configured, r.allow
		case bits == best && r.configured == bestConfigured && !r.allow:
			allowed = false
		}
	}
	for _, r := range p.rules {
		consider(r)
	}
	if own {
		consider(netRule{prefix: netip.PrefixFrom(a, a.BitLen())})
	}
	return best >= 0 && allowed
}

// isOwn reports whether a is one of this machine's interface addresses.
func (p *NetworkPolicy) isOwn(a netip.Addr) (bool, error) {
	if p.own == nil {
		return false, nil
	}
	addrs, err := p.own()
	if err != nil {
		return false, err
	}
	return slices.Contains(addrs, a), nil
}

// hostAddrs lists the addresses of this machine's network interfaces,
// unmapped and without zones, loopback ones left out (the loopback rule
// decides for them, so that allowing 127.0.0.0/8 allows 127.0.0.1). It
// asks the kernel every time (about 10 µs on Linux, against the
// milliseconds of a connection), so an address the machine gains is seen
// at once.
func hostAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ifaddrs))
	for _, ia := range ifaddrs {
		var ip net.IP
		switch v := ia.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		if a = a.Unmap().WithZone(""); !a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out, nil
}

// Control is a net.Dialer Control function that applies the policy to the
// address being connected to: after name resolution, to each address the
// dialer tries, and before any packet is sent. A name that resolves to a
// denied address (at the first lookup, or at a later one: DNS rebinding) is
// refused there, whatever the URL said. The refusal is a *DeniedError
// wrapped in the dialer's *net.OpError.
func (p *NetworkPolicy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DeniedError{why: "a connection to a " + network + " address that is not IP is " + ErrNetworkDenied.Error()}
	}
	return p.Check(ap.Addr())
}

// Dialer returns a net.Dialer that applies the policy (its Control) with a
// connect timeout of 30 s and TCP keep-alives. Leave its Control and
// ControlContext as they are: setting ControlContext would bypass the
// policy.
func (p *NetworkPolicy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.Control}
}

// Transport returns an http.Transport whose connections obey the policy:
// direct connections are checked by Dialer at connect time (so a redirect to
// a denied address fails too), and requests through a proxy of the
// environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) are checked by Proxy. Its
// other settings are those of http.DefaultTransport; tune them as needed,
// but keep DialContext and Proxy.
func (p *NetworkPolicy) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 p.Proxy,
		DialContext:           p.Dialer().DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// HTTPClient returns an http.Client over Transport. It follows redirects
// as http.Client does, each one connecting through the same policy.
func (p *NetworkPolicy) HTTPClient() *http.Client {
	return &http.Client{Transport: p.Transport()}
}

// Proxy is the proxy function of Transport: http.ProxyFromEnvironment, and
// for a request that goes through the proxy, a check of the target's host,
// since the proxy, not this process, then connects to it. The proxy's own
// address is checked at connect time like any other. Of the target, the
// policy can only judge what it sees: an IP address is checked; "localhost"
// and names under ".localhost" are checked as loopback; a host whose last
// label is numeric but which is not an IP address in standard form
// ("2130706433", "127.1", "0x7f.1", which proxies may read as addresses) is
// refused. Any other name is resolved by the proxy, whose own rules must
// refuse internal destinations.
func (p *NetworkPolicy) Proxy(req *http.Request) (*url.URL, error) {
	return p.proxy(req, http.ProxyFromEnvironment)
}

// proxy is Proxy over the proxy function choose.
func (p *NetworkPolicy) proxy(req *http.Request, choose func(*http.Request) (*url.URL, error)) (*url.URL, error) {
	proxy, err := choose(req)
	if err != nil || proxy == nil {
		return proxy, err
	}
	if err := p.checkProxiedHost(req.URL.Hostname()); err != nil {
		return nil, err
	}
	return proxy, nil
}

// checkProxiedHost judges the host of a request a proxy will connect to.
func (p *NetworkPolicy) checkProxiedHost(host string) error {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return p.Check(a)
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		for _, a := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
			if err := p.Check(a); err != nil {
				return err
			}
		}
		return nil
	}
	if numericName(h) {
		return &DeniedError{why: "a numeric host name that is not an IP address in standard form is " + ErrNetworkDenied.Error()}
	}
	return nil
}

// numericName reports whether a host name's last label is a number
// (decimal, or hexadecimal with 0x): no top-level domain is, so such a name
// is an address in some non-standard form.
func numericName(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// wirePolicy is the JSON form of a policy in NetworkPolicyEnv.
type wirePolicy struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// Encode returns the policy's configured rules in the form of
// NetworkPolicyEnv's value. The built-in rules are not in it: every plugin
// applies them itself.
func (p *NetworkPolicy) Encode() string {
	w := wirePolicy{Allow: prefixStrings(p.allow), Deny: prefixStrings(p.deny)}
	b, _ := json.Marshal(w) // strings only: cannot fail
	return string(b)
}

// String describes the configured rules for logs: "allow [127.0.0.0/8]
// deny [] (on top of the built-in rules)".
func (p *NetworkPolicy) String() string {
	if p.broken != nil {
		return "deny everything (" + p.broken.Error() + ")"
	}
	return fmt.Sprintf("allow %v deny %v (on top of the built-in rules)", prefixStrings(p.allow), prefixStrings(p.deny))
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// maxEncodedPolicy bounds the value DecodeNetworkPolicy reads.
const maxEncodedPolicy = 1 << 20

// DecodeNetworkPolicy reads what Encode wrote. An empty value is the default
// policy. Anything else that is not exactly such a JSON object (unknown
// fields included: a newer central may mean more than this plugin would
// apply) is an error wrapping ErrInvalidNetworkPolicy.
func DecodeNetworkPolicy(s string) (*NetworkPolicy, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultNetworkPolicy(), nil
	}
	if len(s) > maxEncodedPolicy {
		return nil, fmt.Errorf("%s: longer than %d bytes: %w", NetworkPolicyEnv, maxEncodedPolicy, ErrInvalidNetworkPolicy)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var w wirePolicy
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object {\"allow\": [...], \"deny\": [...]}: %w: %w", NetworkPolicyEnv, err, ErrInvalidNetworkPolicy)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: text after the JSON object: %w", NetworkPolicyEnv, ErrInvalidNetworkPolicy)
	}
	p, err := NewNetworkPolicy(w.Allow, w.Deny)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NetworkPolicyEnv, err)
	}
	return p, nil
}

// NetworkPolicyFromEnv returns the delivery network policy central passed to
// this process in NetworkPolicyEnv: the default policy when the variable is
// absent or empty (a plugin started by hand, or by a central that predates
// the policy), and a policy that denies every address, saying why, when its
// value is malformed (see Err). A plugin calls it once, when it builds its
// HTTP client or dialer:
//
//	client := channel.NetworkPolicyFromEnv().HTTPClient()
func NetworkPolicyFromEnv() *NetworkPolicy {
	p, err := DecodeNetworkPolicy(os.Getenv(NetworkPolicyEnv))
	if err != nil {
		return &NetworkPolicy{broken: err}
	}
	return p
}

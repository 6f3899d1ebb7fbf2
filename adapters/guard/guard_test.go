package guard

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/ports/clocktest"
)

func TestRefusalsLogOncePerCallerPerInterval(t *testing.T) {
	var out guardtest.LogBuffer
	clock := clocktest.New(time.Unix(1e9, 0))
	r := NewRefusals("site_link", slog.New(slog.NewTextHandler(&out, nil)), time.Minute)
	r.now = clock.Now

	for range 1000 {
		r.Refuse("10.0.0.1", "unauthenticated")
	}
	r.Refuse("10.0.0.2", "unauthenticated")
	if got := r.Count("unauthenticated"); got != 1001 {
		t.Fatalf("Count = %d, want 1001 (every refusal counted)", got)
	}
	if lines := out.Lines(); len(lines) != 2 {
		t.Fatalf("%d lines for 1,001 refusals from two callers, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	clock.Advance(time.Minute)
	r.Refuse("10.0.0.1", "unauthenticated")
	lines := out.Lines()
	if len(lines) != 3 || !strings.Contains(lines[2], "suppressed=999") || !strings.Contains(lines[2], "caller=10.0.0.1") {
		t.Fatalf("after the interval, want a third line with suppressed=999; got:\n%s", strings.Join(lines, "\n"))
	}
}

func TestRefusalsBoundTheirMemory(t *testing.T) {
	var out guardtest.LogBuffer
	r := NewRefusals("http", slog.New(slog.NewTextHandler(&out, nil)), time.Hour)
	for i := range 3 * maxLogKeys {
		r.Refuse(fmt.Sprintf("caller-%d", i), "too many connections")
	}
	r.mu.Lock()
	n := len(r.callers)
	r.mu.Unlock()
	if n > maxLogKeys+1 {
		t.Fatalf("%d callers remembered, want at most %d", n, maxLogKeys+1)
	}
	if lines := out.Lines(); len(lines) > maxLogKeys+1 {
		t.Fatalf("%d lines for %d distinct callers within one interval, want at most %d", len(lines), 3*maxLogKeys, maxLogKeys+1)
	}
}

func TestKeyedLimiterIsPerKey(t *testing.T) {
	clock := clocktest.New(time.Unix(1e9, 0))
	k := NewKeyedLimiter(10, 5)
	k.now = clock.Now
	for i := range 5 {
		if !k.Allow("a") {
			t.Fatalf("call %d of a within the burst refused", i+1)
		}
	}
	if k.Allow("a") {
		t.Fatal("a past its burst allowed")
	}
	if d := k.RetryAfter("a", 1); d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want (0, 100ms]", d)
	}
	if !k.Allow("b") {
		t.Fatal("b refused because a spent its tokens")
	}
	clock.Advance(100 * time.Millisecond)
	if !k.Allow("a") {
		t.Fatal("a refused after a token came back")
	}
	if k.AllowN("c", 6) {
		t.Fatal("AllowN past the burst allowed")
	}
}

func TestKeyedLimiterBoundsItsMemory(t *testing.T) {
	clock := clocktest.New(time.Unix(1e9, 0))
	k := NewKeyedLimiter(1, 1)
	k.now = clock.Now
	for i := range maxLimiterKeys + 100 {
		k.Allow(fmt.Sprintf("k%d", i))
	}
	k.mu.Lock()
	n := len(k.buckets)
	k.mu.Unlock()
	if n > maxLimiterKeys {
		t.Fatalf("%d buckets, want at most %d", n, maxLimiterKeys)
	}
	// The keys past the bound share the overflow bucket: one token between them.
	if k.Allow("another") {
		t.Fatal("a new key past the bound had a token of its own")
	}
	// Once the old buckets are full again they are forgotten, and new keys get their own.
	clock.Advance(2 * time.Second)
	if !k.Allow("late") {
		t.Fatal("a new key refused after every bucket refilled")
	}
}

func TestNoLimit(t *testing.T) {
	k := NewKeyedLimiter(0, 0)
	for range 1000 {
		if !k.AllowN("a", 1<<20) {
			t.Fatal("an unlimited limiter refused")
		}
	}
}

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRefusals("test", nil, time.Minute)
	l := LimitListener(inner, ConnLimits{PerAddress: 2}, r)
	defer l.Close()

	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// refused dials and waits until the server has closed the connection;
	// the refusal is counted before the close.
	refused := func() {
		t.Helper()
		c := dial()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection past the bound was kept open (%v)", err)
		}
	}
	dial()
	dial()
	s1 := <-accepted
	<-accepted

	refused() // the third from the same address
	if got := r.Count("too many connections"); got != 1 {
		t.Fatalf("refusals counted = %d, want 1", got)
	}

	// Closing one frees its slot, once.
	s1.Close()
	s1.Close()
	dial()
	<-accepted
	refused()
	if got := r.Count("too many connections"); got != 2 {
		t.Fatalf("refusals counted = %d, want 2", got)
	}
}

func TestOnLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7201": true, "127.8.9.10:1": true, "[::1]:7201": true, "localhost:80": true, "LocalHost:80": true,
		"0.0.0.0:7201": false, "[::]:7201": false, ":7201": false, "10.0.0.1:7201": false, "plant-a:7201": false,
		"127.0.0.1": false, "[::ffff:127.0.0.1]:1": true, "": false,
	} {
		if got := OnLoopback(addr); got != want {
			t.Errorf("OnLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCallerKey(t *testing.T) {
	for addr, want := range map[net.Addr]string{
		&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}:              "10.1.2.3",
		&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}:       "10.1.2.3",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5}:  "2001:db8:1:2::/64",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 5}:  "2001:db8:1:2::/64",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 5}:       "2001:db8:1:3::/64",
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 5, Zone: "eth0"}: "fe80::/64",
		&net.TCPAddr{IP: net.IPv6loopback, Port: 5}:                     "::1",
		&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}:                 "/run/x.sock",
	} {
		if got := CallerKey(addr); got != want {
			t.Errorf("CallerKey(%v) = %q, want %q", addr, got, want)
		}
	}
	if got := CallerKey(nil); got != "" {
		t.Errorf("CallerKey(nil) = %q", got)
	}
}

func TestMemberName(t *testing.T) {
	members := []string{"a", "b"}
	for _, tc := range []struct {
		cert *x509.Certificate
		want string
	}{
		{&x509.Certificate{Subject: pkix.Name{CommonName: "b"}}, "b"},
		{&x509.Certificate{Subject: pkix.Name{CommonName: "node b"}, DNSNames: []string{"b.plant", "a"}}, "a"},
		{&x509.Certificate{Subject: pkix.Name{CommonName: "script-1"}, DNSNames: []string{"localhost"}}, ""},
		{&x509.Certificate{}, ""},
		{nil, ""},
	} {
		if got := MemberName(tc.cert, members); got != tc.want {
			t.Errorf("MemberName(%v) = %q, want %q", tc.cert, got, tc.want)
		}
	}
	if got := MemberName(&x509.Certificate{}, []string{""}); got != "" {
		t.Errorf("an empty member matched a certificate without names: %q", got)
	}
}

// fakeListener hands out one end of a pipe per Accept, with the remote
// address the test gives.
type fakeListener struct {
	addrs chan net.Addr
	peers chan net.Conn
}

func newFakeListener() *fakeListener {
	return &fakeListener{addrs: make(chan net.Addr), peers: make(chan net.Conn, 1)}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	a, ok := <-l.addrs
	if !ok {
		return nil, net.ErrClosed
	}
	server, client := net.Pipe()
	l.peers <- client
	return addrConn{Conn: server, remote: a}, nil
}

func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// TestLimitListenerKeysIPv6ByItsSlash64: a caller rotating its addresses
// within one /64 is one address for the per-address cap; another /64 is
// not.
func TestLimitListenerKeysIPv6ByItsSlash64(t *testing.T) {
	inner := newFakeListener()
	r := NewRefusals("test", nil, time.Minute)
	l := LimitListener(inner, ConnLimits{PerAddress: 2}, r)
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer close(inner.addrs)
	addr := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 4000} }
	for _, a := range []string{"2001:db8::1", "2001:db8::ffff:2"} {
		inner.addrs <- addr(a)
		<-inner.peers
		defer (<-accepted).Close()
	}
	// A third address of the same /64 is refused (its pipe is closed), one
	// of another /64 accepted.
	inner.addrs <- addr("2001:db8::3")
	refused := <-inner.peers
	if _, err := refused.Read(make([]byte, 1)); err == nil {
		t.Fatal("a third connection from the same /64 was kept")
	}
	if got := r.Count("too many connections"); got != 1 {
		t.Fatalf("refusals counted = %d, want 1", got)
	}
	inner.addrs <- addr("2001:db8:0:1::1")
	<-inner.peers
	(<-accepted).Close()
}

// TestLimitListenerReservesSlots: an address with reserved slots connects
// while the others hold every shared slot, and its connections take none of
// theirs; past its reservation it is refused.
func TestLimitListenerReservesSlots(t *testing.T) {
	inner := newFakeListener()
	r := NewRefusals("test", nil, time.Minute)
	l := LimitListener(inner, ConnLimits{PerAddress: 2, Total: 2, Reserved: func(ip string) int {
		if ip == "10.0.0.1" {
			return 2
		}
		return 0
	}}, r)
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer close(inner.addrs)
	dial := func(ip string) net.Conn {
		t.Helper()
		inner.addrs <- &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}
		<-inner.peers
		select {
		case c := <-accepted:
			return c
		case <-time.After(wait):
			t.Fatalf("a connection from %s was refused", ip)
			return nil
		}
	}
	refused := func(ip, what string) {
		t.Helper()
		inner.addrs <- &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}
		if _, err := (<-inner.peers).Read(make([]byte, 1)); err == nil {
			t.Fatalf("%s was kept", what)
		}
	}
	var held []net.Conn
	for _, ip := range []string{"10.0.0.7", "10.0.0.8"} {
		held = append(held, dial(ip))
	}
	// The shared slots are full: another outsider is refused.
	refused("10.0.0.9", "an outsider past the total")
	if n := r.Count("too many connections"); n != 1 {
		t.Fatalf("refusals = %d, want 1", n)
	}
	// The reserved address still connects, twice, and not a third time.
	held = append(held, dial("10.0.0.1"), dial("10.0.0.1"))
	refused("10.0.0.1", "the reserved address past its reservation")
	// Freeing a reserved slot frees no shared one.
	held[2].Close()
	refused("10.0.0.9", "an outsider in the slot a reserved connection gave back")
	held[0].Close()
	dial("10.0.0.9").Close()
	for _, c := range held[1:] {
		c.Close()
	}
}

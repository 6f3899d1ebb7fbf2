package sitelink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc/keepalive"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
	"github.com/siteline/outbox/ports/waittest"
)

// failoverLimit bounds how long a client may take to reach the next central
// once the one it used died. The client needs milliseconds on loopback (a
// refused connection, or 250 ms for one that does not answer); the bound is
// far above that for busy machines, and far below what a client without
// failover would need (forever) or one waiting out connectTimeout.
const failoverLimit = 5 * time.Second

// killable is a listener whose kill closes it and every connection it
// accepted, without a word to the clients: what they see of a central
// process killed with SIGKILL.
type killable struct {
	net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
	dead     bool
}

func (l *killable) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, c)
	l.accepted++
	return c, nil
}

// kill closes the listener and every connection.
func (l *killable) kill() {
	l.mu.Lock()
	l.dead = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	_ = l.Listener.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

// connections returns how many connections the listener accepted.
func (l *killable) connections() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

// central is one central node of a failover test: a link server on a
// killable listener, over a Central that counts its calls.
type central struct {
	addr string
	lis  *killable
	spy  *spy
}

// startCentral serves cfg on a fresh port of host until the test ends or
// kill; cfg.Central is wrapped in a spy.
func startCentral(t *testing.T, host string, cfg ServerConfig) *central {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return startCentralOn(t, l, cfg)
}

// startCentralOn is startCentral on l.
func startCentralOn(t *testing.T, l net.Listener, cfg ServerConfig) *central {
	t.Helper()
	s := &spy{Central: cfg.Central}
	cfg.Central = s
	srv, err := NewServer(cfg)
	if err != nil {
		_ = l.Close()
		t.Fatalf("NewServer: %v", err)
	}
	lis := &killable{Listener: l}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		lis.kill()
		srv.Stop()
		<-served // an error after kill: the listener was closed under it
	})
	return &central{addr: l.Addr().String(), lis: lis, spy: s}
}

// calls returns the Submits and Statuses that reached c.
func (c *central) calls() int64 { return c.spy.submits.Load() + c.spy.statuses.Load() }

// untilAnswered repeats call until it succeeds, for at most failoverLimit,
// and returns how long that took and how many calls failed first.
func untilAnswered(t *testing.T, what string, call func(ctx context.Context) error) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	failed := 0
	waittest.For(t, failoverLimit, what+" answered after the central died", func() (bool, string) {
		cctx, cancel := context.WithTimeout(context.Background(), failoverLimit)
		err := call(cctx)
		cancel()
		if err == nil {
			return true, ""
		}
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Fatalf("%s: %v, want success or ErrUnavailable", what, err)
		}
		failed++
		return false, fmt.Sprintf("%d calls failed, the last: %v", failed, err)
	})
	return time.Since(start), failed
}

// TestFailover: a client of three centrals sharing one store sends every
// call to the first; when it dies (its listener and connections closed, as
// by SIGKILL) the next Submit reaches the second within failoverLimit,
// and when that one dies too, the next Status reaches the third. Nothing
// acknowledged is lost: every id the client sent is stored and answered.
func TestFailover(t *testing.T) {
	svc, store := newCore(t)
	cfg := ServerConfig{Central: svc, Sites: tokenSites}
	cs := []*central{startCentral(t, "127.0.0.1", cfg), startCentral(t, "127.0.0.1", cfg), startCentral(t, "127.0.0.1", cfg)}
	var logs logBuffer
	c := dial(t, ClientConfig{Addrs: []string{cs[0].addr, cs[1].addr, cs[2].addr}, Token: tokenA, Logger: logs.logger()})

	var sent []string
	submit := func(ctx context.Context) error {
		sub := centraltest.NewSubmission("site-a")
		res, err := c.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{sub}})
		if err != nil {
			return err
		}
		if len(res.Accepted) != 1 {
			t.Fatalf("Submit: %+v, want the row accepted", res)
		}
		sent = append(sent, sub.ID)
		return nil
	}
	status := func(ctx context.Context) error {
		got, err := c.Status(ctx, ports.StatusRequest{IDs: sent})
		if err == nil && len(got) != len(sent) {
			t.Fatalf("Status of %d ids answered %d", len(sent), len(got))
		}
		return err
	}
	for range 5 {
		if err := submit(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := status(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := cs[0].calls(); n != 6 {
		t.Fatalf("the first central got %d of 6 calls, want all", n)
	}
	if n, m := cs[1].lis.connections(), cs[2].lis.connections(); n+m != 0 {
		t.Fatalf("the client connected to the other centrals (%d, %d times) while the first answered", n, m)
	}
	if got := c.Current(); got != cs[0].addr {
		t.Errorf("Current() = %q, want %s", got, cs[0].addr)
	}

	cs[0].lis.kill()
	took, failed := untilAnswered(t, "Submit after the first central died", submit)
	t.Logf("Submit moved to the second central in %s (%d calls failed first)", took.Round(time.Millisecond), failed)
	for range 5 {
		if err := submit(ctx(t)); err != nil {
			t.Fatalf("Submit on the second central: %v", err)
		}
	}
	if n := cs[1].spy.submits.Load(); n != 6 {
		t.Errorf("the second central got %d of the 6 Submits after the first died", n)
	}
	if got := c.Current(); got != cs[1].addr {
		t.Errorf("Current() = %q, want %s", got, cs[1].addr)
	}

	cs[1].lis.kill()
	took2, failed2 := untilAnswered(t, "Status after the second central died", status)
	t.Logf("Status moved to the third central in %s (%d calls failed first)", took2.Round(time.Millisecond), failed2)
	if n := cs[2].spy.statuses.Load(); n != 1 {
		t.Errorf("the third central answered %d Status calls, want 1", n)
	}

	lost := 0
	for _, id := range sent {
		if _, ok := centraltest.FromStore(store)(t, id); !ok {
			lost++
		}
	}
	t.Logf("sent %d, stored %d, lost %d", len(sent), len(sent)-lost, lost)
	if lost != 0 {
		t.Errorf("%d acknowledged notifications are not stored", lost)
	}
	log := logs.String()
	for _, want := range []string{`connected to central" central=` + cs[0].addr,
		`moved to another central" central=` + cs[1].addr + " previous=" + cs[0].addr,
		`moved to another central" central=` + cs[2].addr + " previous=" + cs[1].addr} {
		if !strings.Contains(log, want) {
			t.Errorf("the client's log lacks %q:\n%s", want, log)
		}
	}
}

// TestFailoverCutsCallInFlight: a call in progress when its central dies is
// sent again at once, by the client, to the next central, where it
// succeeds: the forwarder never sees the failure and does not wait its
// retry interval. A central that stays down for every address ends the call
// ErrUnavailable (TestFailoverUnreachableNamesEveryAddress).
func TestFailoverCutsCallInFlight(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1)}
	first := startCentral(t, "127.0.0.1", ServerConfig{Central: b, Sites: tokenSites})
	svc, store := newCore(t)
	second := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: tokenSites})
	c := dial(t, ClientConfig{Addrs: []string{first.addr, second.addr}, Token: tokenA})
	sub := centraltest.NewSubmission("site-a")
	answers := submitInBackground(t, c, sub)
	waitFor(t, b.entered, "the call to reach the first central")
	killed := time.Now()
	first.lis.kill()
	select {
	case a := <-answers:
		if a.err != nil || len(a.res.Accepted) != 1 {
			t.Fatalf("the cut call: %+v, %v; want it accepted by the second central", a.res, a.err)
		}
		t.Logf("the call cut by the first central's death was answered by the second %s after the kill",
			time.Since(killed).Round(time.Millisecond))
	case <-time.After(failoverLimit):
		t.Fatalf("the call in progress at the killed central did not end within %s", failoverLimit)
	}
	if _, ok := centraltest.FromStore(store)(t, sub.ID); !ok || second.spy.submits.Load() != 1 {
		t.Errorf("the cut call is not stored at the second central (%d Submits there)", second.spy.submits.Load())
	}
}

// TestFailoverOneNameSeveralAddresses: one host name whose DNS answer holds
// two centrals (127.0.0.1 and 127.0.0.2, same port) is both: the client
// uses one, and the other when it dies. The name is served by a DNS server
// of the test's own, which the process's resolver asks; each central's
// certificate names the host name only, so TLS is verified against the
// name, not the address.
func TestFailoverOneNameSeveralAddresses(t *testing.T) {
	const name = "central.outbox.test"
	v4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(v4.Addr().String())
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port))
	if err != nil {
		_ = v4.Close()
		t.Fatalf("listen on 127.0.0.2:%s (Linux routes all of 127.0.0.0/8 to loopback): %v", port, err)
	}
	useDNS(t, map[string][]netip.Addr{name + ".": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}})

	ca := newCA(t, "outbox test CA")
	svc, store := newCore(t)
	cfg := ServerConfig{Central: svc, Sites: testSites,
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.IssueFor(t, "central", name)}, ClientCAs: ca.Pool}}
	cs := []*central{startCentralOn(t, v4, cfg), startCentralOn(t, other, cfg)}
	c := dial(t, ClientConfig{Addr: net.JoinHostPort(name, port), TLS: ca.clientTLS(ca.clientCert(t, "site-c"))})
	var sent []string
	submit := func(ctx context.Context) error {
		sub := centraltest.NewSubmission("site-c")
		if _, err := c.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{sub}}); err != nil {
			return err
		}
		sent = append(sent, sub.ID)
		return nil
	}
	if err := submit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	used := 0
	if cs[1].calls() == 1 {
		used = 1
	}
	cs[used].lis.kill()
	took, failed := untilAnswered(t, "Submit after the central at one of the name's addresses died", submit)
	t.Logf("Submit moved from %s to %s in %s (%d calls failed first)", cs[used].addr, cs[1-used].addr, took.Round(time.Millisecond), failed)
	if n := cs[1-used].spy.submits.Load(); n != 1 {
		t.Errorf("the other address's central got %d Submits, want 1", n)
	}
	for _, id := range sent {
		if _, ok := centraltest.FromStore(store)(t, id); !ok {
			t.Errorf("%s is not stored", id)
		}
	}
}

// useDNS makes the process's resolver ask a DNS server of the test's own,
// on loopback, which answers A queries for the names of hosts with their
// IPv4 addresses and every other query with no record, until the test
// ends. The tests of this package do not run in parallel, so replacing
// net.DefaultResolver is safe here.
func useDNS(t *testing.T, hosts map[string][]netip.Addr) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed at the end of the test
			}
			if answer, ok := dnsAnswer(buf[:n], hosts); ok {
				_, _ = pc.WriteTo(answer, from)
			}
		}
	}()
	old := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
	t.Cleanup(func() {
		net.DefaultResolver = old
		_ = pc.Close()
		<-done
	})
}

// dnsAnswer answers one DNS query from hosts; ok is false for a message
// that is no query.
func dnsAnswer(query []byte, hosts map[string][]netip.Addr) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if q.Type == dnsmessage.TypeA {
		for _, a := range hosts[strings.ToLower(q.Name.String())] {
			rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60}
			if b.AResource(rh, dnsmessage.AResource{A: a.As4()}) != nil {
				return nil, false
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// TestFailoverUnreachableNamesEveryAddress: when no central answers, the
// error is ErrUnavailable and names the configured addresses.
func TestFailoverUnreachableNamesEveryAddress(t *testing.T) {
	var addrs []string
	for range 2 {
		addrs = append(addrs, plugintest.RefusedAddr(t)) // nothing listens there
	}
	c := dial(t, ClientConfig{Addrs: addrs, Token: tokenA})
	_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Submit with every central down: err = %v, want one wrapping ports.ErrUnavailable", err)
	}
	if prefix, suffix := "central "+addrs[0]+","+addrs[1]+": submit 1 notifications: ", ": unavailable"; !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
		t.Errorf("err = %q, want it to start with %q and end with %q", err, prefix, suffix)
	}
}

// TestFailoverPastSilentCentral: a first central that accepts connections
// and never answers (a hung host) does not hold the client up: its first
// call reaches the second central well before connectTimeout.
func TestFailoverPastSilentCentral(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = silent.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	svc, _ := newCore(t)
	live := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: tokenSites})
	c := dial(t, ClientConfig{Addrs: []string{silent.Addr().String(), live.addr}, Token: tokenA})
	took, failed := untilAnswered(t, "Submit past a silent central", func(ctx context.Context) error {
		_, err := c.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
		return err
	})
	t.Logf("the first Submit reached the live central in %s (%d calls failed first)", took.Round(time.Millisecond), failed)
	if took >= connectTimeout {
		t.Errorf("the first Submit took %s, not less than connectTimeout (%s): the silent central held it up", took, connectTimeout)
	}
	if live.spy.submits.Load() != 1 {
		t.Errorf("the live central got %d Submits, want 1", live.spy.submits.Load())
	}
}

// TestFailoverTLSPerHostCertificates: each central's certificate names its
// own host only — the first "localhost", the second "127.0.0.1" — and the
// client verifies each against the host of its own address, so it reaches
// the second after the first dies. A certificate that does not name the
// address's host is refused.
func TestFailoverTLSPerHostCertificates(t *testing.T) {
	ca := newCA(t, "outbox test CA")
	svc, store := newCore(t)
	serverTLS := func(host string) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{ca.IssueFor(t, "central "+host, host)}, ClientCAs: ca.Pool}
	}
	byName := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: testSites, TLS: serverTLS("localhost")})
	byIP := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: testSites, TLS: serverTLS("127.0.0.1")})
	_, namePort, _ := net.SplitHostPort(byName.addr)
	named := net.JoinHostPort("localhost", namePort)
	site := ca.clientTLS(ca.clientCert(t, "site-c"))

	// Each certificate is good for its own host only.
	wrong := dial(t, ClientConfig{Addr: byName.addr, TLS: site}) // 127.0.0.1, the certificate names localhost
	_, err := wrong.Status(ctx(t), ports.StatusRequest{IDs: []string{"x"}})
	if !errors.Is(err, ports.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Status to a central whose certificate does not name 127.0.0.1: %v, want a refused certificate", err)
	}

	c := dial(t, ClientConfig{Addrs: []string{named, byIP.addr}, TLS: site})
	var sent []string
	submit := func(ctx context.Context) error {
		sub := centraltest.NewSubmission("site-c")
		if _, err := c.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{sub}}); err != nil {
			return err
		}
		sent = append(sent, sub.ID)
		return nil
	}
	if err := submit(ctx(t)); err != nil {
		t.Fatalf("Submit to %s: %v", named, err)
	}
	if byName.spy.submits.Load() != 1 {
		t.Fatalf("the first central got %d Submits, want 1", byName.spy.submits.Load())
	}
	byName.lis.kill()
	took, failed := untilAnswered(t, "Submit after the first central died", submit)
	t.Logf("Submit moved to the second central over TLS in %s (%d calls failed first)", took.Round(time.Millisecond), failed)
	got, err := c.Status(ctx(t), ports.StatusRequest{IDs: sent})
	if err != nil || len(got) != len(sent) || byIP.spy.statuses.Load() != 1 {
		t.Fatalf("Status on the second central: %v, %v (%d calls there)", got, err, byIP.spy.statuses.Load())
	}
	for _, id := range sent {
		if _, ok := centraltest.FromStore(store)(t, id); !ok {
			t.Errorf("%s is not stored", id)
		}
	}

	// One name for all: TLS.ServerName, when set, is the name every
	// central's certificate must hold, whatever host its address names.
	byName2 := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: testSites, TLS: serverTLS("localhost")})
	one := site.Clone()
	one.ServerName = "localhost"
	c2 := dial(t, ClientConfig{Addrs: []string{byName2.addr, byIP.addr}, TLS: one})
	if _, err := c2.Status(ctx(t), ports.StatusRequest{IDs: sent}); err != nil {
		t.Fatalf("Status with TLS.ServerName set: %v", err)
	}
	if n := byName2.spy.statuses.Load(); n != 1 {
		t.Errorf("the central whose certificate holds TLS.ServerName got %d Status calls, want 1", n)
	}
}

// TestFailoverFromSilentConnection: a connection to central that falls
// silent (the host lost power: no close, no answer) is found by the
// keepalive pings and given up, and the calls go to the next central.
// The pings run at grpc's shortest interval here (10 s), with a short
// timeout.
func TestFailoverFromSilentConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a keepalive ping (10 s)")
	}
	svc, _ := newCore(t)
	limits := Limits{GRPC: guard.GRPCLimits{MinClientPingInterval: time.Second}}
	first := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: tokenSites, Limits: limits})
	second := startCentral(t, "127.0.0.1", ServerConfig{Central: svc, Sites: tokenSites, Limits: limits})
	proxy := startFreezableProxy(t, first.addr)
	c := dial(t, ClientConfig{Addrs: []string{proxy.addr(), second.addr}, Token: tokenA,
		keepalive: keepalive.ClientParameters{Time: 10 * time.Second, Timeout: time.Second}})
	submit := func(ctx context.Context) error {
		_, err := c.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
		return err
	}
	if err := submit(ctx(t)); err != nil || first.spy.submits.Load() != 1 {
		t.Fatalf("Submit through the proxy: %v (%d at the first central)", err, first.spy.submits.Load())
	}
	proxy.freeze()
	frozen := time.Now()
	deadline := frozen.Add(waitLimit)
	for second.spy.submits.Load() == 0 {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = submit(cctx) // times out while the silent connection is believed
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("no Submit reached the second central within %s of the first falling silent", waitLimit)
		}
	}
	t.Logf("Submits reached the second central %s after the first fell silent", time.Since(frozen).Round(time.Millisecond))
}

// freezableProxy forwards TCP connections to a backend until freeze, after
// which it holds them open and moves no byte: a silent peer.
type freezableProxy struct {
	lis    net.Listener
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezableProxy(t *testing.T, backend string) *freezableProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{lis: lis}
	p.wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(out, in) })
			p.wg.Go(func() { p.pipe(in, out) })
		}
	})
	t.Cleanup(func() {
		_ = lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezableProxy) addr() string { return p.lis.Addr().String() }

func (p *freezableProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// pipe copies from src to dst until either closes, dropping what it reads
// once frozen.
func (p *freezableProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestDialSeveral checks Dial's rules for several addresses: each must be
// host:port, none listed twice, and a token in clear goes only to loopback
// addresses, every one of them.
func TestDialSeveral(t *testing.T) {
	c, err := Dial(ClientConfig{Addr: "127.0.0.1:7443", Addrs: []string{"[::1]:7443", "localhost:7444"}, Token: tokenA})
	if err != nil {
		t.Fatalf("Dial of three loopback addresses with a token in plaintext: %v", err)
	}
	if got := c.Addrs(); !slices.Equal(got, []string{"127.0.0.1:7443", "[::1]:7443", "localhost:7444"}) {
		t.Errorf("Addrs() = %v, want Addr then Addrs", got)
	}
	_ = c.Close()
	refused := []struct {
		cfg  ClientConfig
		hint string
	}{
		{ClientConfig{}, "no central address"},
		{ClientConfig{Addrs: []string{"127.0.0.1:7443", "10.1.2.3:7443"}, Token: tokenA}, "in clear to 10.1.2.3:7443"},
		{ClientConfig{Addrs: []string{"127.0.0.1:7443", "central-b.example.com:7443"}, Token: tokenA}, "in clear to central-b"},
		{ClientConfig{Addrs: []string{"127.0.0.1:7443", "127.0.0.1"}}, `"127.0.0.1" is not host:port`},
		{ClientConfig{Addrs: []string{"127.0.0.1:7443", "127.0.0.1:"}}, "is not host:port"},
		{ClientConfig{Addr: "127.0.0.1:7443", Addrs: []string{"127.0.0.1:7443"}}, "127.0.0.1:7443 is listed twice"},
	}
	for _, r := range refused {
		c, err := Dial(r.cfg)
		if err == nil {
			_ = c.Close()
			t.Errorf("Dial(%v) = nil error, want a refusal about %q", r.cfg.Addrs, r.hint)
			continue
		}
		if !strings.Contains(err.Error(), r.hint) {
			t.Errorf("Dial(%v) = %q, want it to mention %q", r.cfg.Addrs, err, r.hint)
		}
	}
	// Over TLS a token may go to every address.
	ca := newCA(t, "outbox test CA")
	c, err = Dial(ClientConfig{Addrs: []string{"central-a.example.com:7443", "10.1.2.3:7443"}, Token: tokenA, TLS: ca.clientTLS()})
	if err != nil {
		t.Fatalf("Dial of two addresses over TLS: %v", err)
	}
	_ = c.Close()
}

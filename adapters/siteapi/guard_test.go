package siteapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/ports/waittest"
)

// The tests here play callers the site API must refuse, or bound: without
// credentials, over their rate, too large, idle, or forging the mark a
// follower puts on the calls it passes to the leader.

// rawCodec sends a []byte as the request message as it is: garbage, for
// the server to read.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// garbage is not a protobuf message: field 31 with the unused wire type 7.
var garbage = []byte{0xff, 0x01, 0xff, 0xff, 0xff, 0xff}

func sendRaw(t *testing.T, addr string, ctx context.Context, body []byte) error {
	t.Helper()
	return invokeRaw(t, addr, ctx, pb.Site_Send_FullMethodName, body)
}

// invokeRaw calls method at addr with body as the request, as it is.
func invokeRaw(t *testing.T, addr string, ctx context.Context, method string, body []byte) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []byte
	return conn.Invoke(ctx, method, body, &out, grpc.ForceCodecV2(rawCodec{}))
}

// TestAuthenticatesBeforeDecoding: a request of garbage without the token is
// refused as unauthenticated; the same garbage with the token is read, and
// refused as malformed. So the token is checked before the message is read.
func TestAuthenticatesBeforeDecoding(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{Token: "s3cret"})
	err := sendRaw(t, leader.Addr, deadline(t), garbage)
	wantCode(t, err, codes.Unauthenticated, "token")
	if n := leader.Server.Refusals().Count("malformed request"); n != 0 {
		t.Fatalf("the unauthenticated garbage was read: %d malformed", n)
	}
	if n := leader.Server.Refusals().Count("unauthenticated"); n != 1 {
		t.Fatalf("unauthenticated refusals counted: %d, want 1", n)
	}

	err = sendRaw(t, leader.Addr, withToken(deadline(t), "s3cret"), garbage)
	if c := status.Code(err); c == codes.Unauthenticated || c == codes.OK {
		t.Fatalf("garbage with the token: %v, want a decoding error", err)
	}
	sitetest.WaitRefused(t, leader, "malformed request", 1)
	if leader.Site.Calls() != 0 {
		t.Fatal("garbage reached the Site")
	}
}

// pki is the certificates of a site whose API takes scripts' client
// certificates: the API's CA (the nodes' API certificates), the scripts' CA,
// and the Raft CA of the members' certificates.
type pki struct {
	api, scripts, raft *tlstest.CA
	server             *tls.Config
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{
		api:     tlstest.NewCA(t, "site API CA"),
		scripts: tlstest.NewCA(t, "scripts CA"),
		raft:    tlstest.NewCA(t, "site Raft CA"),
	}
	p.server = &tls.Config{Certificates: []tls.Certificate{p.api.Issue(t, "site node")}}
	return p
}

// script is the client configuration of a script whose certificate names cn,
// issued by ca (the scripts' CA unless given).
func (p *pki) script(t *testing.T, cn string, ca ...*tlstest.CA) *tls.Config {
	t.Helper()
	issuer := p.scripts
	if len(ca) > 0 {
		issuer = ca[0]
	}
	return &tls.Config{RootCAs: p.api.Pool, Certificates: []tls.Certificate{issuer.Issue(t, cn)}}
}

// node returns the options of a member named name.
func (p *pki) node(t *testing.T, name string, base sitetest.Options) sitetest.Options {
	t.Helper()
	o := base
	o.TLS = p.server
	o.ClientCAs = []*x509.Certificate{p.scripts.Cert}
	o.Members = []string{"leader", "follower"}
	o.MemberCAs = []*x509.Certificate{p.raft.Cert}
	o.PeerTLS = &tls.Config{Certificates: []tls.Certificate{p.raft.Issue(t, name)}}
	return o
}

// startPair starts a leader and a follower that know each other as members.
func (p *pki) startPair(t *testing.T, base sitetest.Options) (leader, follower *sitetest.Node) {
	t.Helper()
	leader = sitetest.Start(t, "leader", p.node(t, "leader", base))
	follower = sitetest.Start(t, "follower", p.node(t, "follower", base))
	leader.SetLeader(true, "")
	follower.SetLeader(false, leader.Addr)
	return leader, follower
}

// slow is a rate so low that no token comes back during a test.
const slow = 0.001

func TestClientCertificates(t *testing.T) {
	p := newPKI(t)
	leader, follower := p.startPair(t, sitetest.Options{})

	// A script's certificate authenticates it, directly and through the
	// follower.
	for _, n := range []*sitetest.Node{leader, follower} {
		if _, err := client(t, n.Addr, p.script(t, "script-1")).Send(deadline(t), sendReq()); err != nil {
			t.Fatalf("Send with a client certificate to %s: %v", n.Site.HealthReply.Node, err)
		}
	}
	// Without one, or with one of another CA, or with a member's Raft
	// certificate used as a script's (it authenticates the node only), a call
	// is refused.
	_, err := client(t, leader.Addr, &tls.Config{RootCAs: p.api.Pool}).Send(deadline(t), sendReq())
	wantCode(t, err, codes.Unauthenticated, "no client certificate the site trusts")
	stranger := tlstest.NewCA(t, "stranger CA")
	_, err = client(t, leader.Addr, p.script(t, "script-1", stranger)).Send(deadline(t), sendReq())
	wantCode(t, err, codes.Unauthenticated, "no client certificate the site trusts")
	// Pressed on the server, that certificate fails the handshake.
	forced := p.script(t, "script-1", stranger)
	cert := forced.Certificates[0]
	forced.Certificates = nil
	forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client(t, leader.Addr, forced).Send(ctx, sendReq()); err == nil {
		t.Fatal("a certificate of another CA was taken")
	}
	waitCount(t, leader.Server.Refusals(), "tls handshake failed", 1)
	_, err = client(t, leader.Addr, p.script(t, "mallory", p.raft)).Send(deadline(t), sendReq())
	wantCode(t, err, codes.Unauthenticated, "client certificate")
	if n := len(leader.Site.Sends()); n != 2 {
		t.Fatalf("leader's Site got %d Sends, want 2", n)
	}
}

// TestRateLimitIsPerCaller: a burst past its caller's limit is refused with
// ResourceExhausted naming the limit, while another caller goes on.
func TestRateLimitIsPerCaller(t *testing.T) {
	p := newPKI(t)
	leader, _ := p.startPair(t, sitetest.Options{Limits: siteapi.Limits{Rate: slow, Burst: 5}})
	a := client(t, leader.Addr, p.script(t, "script-a"))
	for i := range 5 {
		if _, err := a.Send(deadline(t), sendReq()); err != nil {
			t.Fatalf("Send %d of a, within its burst: %v", i+1, err)
		}
	}
	_, err := a.Send(deadline(t), sendReq())
	wantCode(t, err, codes.ResourceExhausted, "at most 0.001 calls a second per caller, 5 at once; retry in ")
	if d, ok := pb.RetryAfter(status.Convert(err).Message()); !ok || d < time.Second {
		t.Fatalf("retry hint %v (%v), want about 1000 s", d, ok)
	}
	_, err = a.Status(deadline(t), &pb.StatusRequest{Ids: []string{testID}})
	wantCode(t, err, codes.ResourceExhausted, "rate limit")

	b := client(t, leader.Addr, p.script(t, "script-b"))
	if _, err := b.Send(deadline(t), sendReq()); err != nil {
		t.Fatalf("Send of b while a is over its limit: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 6 {
		t.Fatalf("leader's Site got %d Sends, want 6", n)
	}
	if n := leader.Server.Refusals().Count("rate limited"); n != 2 {
		t.Fatalf("rate refusals counted: %d, want 2", n)
	}
}

// TestForwardedCallsAreLimitedPerOriginalCaller: the leader counts a call a
// follower passes on against the caller who made it, not against the
// follower: two scripts through one follower do not share a bucket, and one
// script through the leader and the follower spends one.
func TestForwardedCallsAreLimitedPerOriginalCaller(t *testing.T) {
	p := newPKI(t)
	leader, follower := p.startPair(t, sitetest.Options{Limits: siteapi.Limits{Rate: slow, Burst: 2}})
	viaFollower := func(cn string) pb.SiteClient { return client(t, follower.Addr, p.script(t, cn)) }
	a, b := viaFollower("script-a"), viaFollower("script-b")
	for _, c := range []pb.SiteClient{a, b, a, b} {
		if _, err := c.Send(deadline(t), sendReq()); err != nil {
			t.Fatalf("Send through the follower: %v", err)
		}
	}
	if n := len(leader.Site.Sends()); n != 4 {
		t.Fatalf("leader's Site got %d Sends, want 4", n)
	}

	// c spends one at the leader directly and one through the follower:
	// the follower has one left for c, the leader none.
	direct := client(t, leader.Addr, p.script(t, "script-c"))
	if _, err := direct.Send(deadline(t), sendReq()); err != nil {
		t.Fatal(err)
	}
	c := viaFollower("script-c")
	if _, err := c.Send(deadline(t), sendReq()); err != nil {
		t.Fatal(err)
	}
	_, err := c.Send(deadline(t), sendReq())
	wantCode(t, err, codes.ResourceExhausted, "rate limit")
	if n := leader.Server.Refusals().Count("rate limited"); n != 1 {
		t.Fatalf("the leader refused %d calls for their rate, want 1 (c's third)", n)
	}
	if n := follower.Server.Refusals().Count("rate limited"); n != 0 {
		t.Fatalf("the follower refused %d calls for their rate, want 0", n)
	}
}

// TestForgedForwardMarkGainsNothing: a caller outside the group that marks
// its calls as forwarded, naming another caller, is still authenticated and
// limited as itself; at a follower the mark only makes its call fail.
func TestForgedForwardMarkGainsNothing(t *testing.T) {
	const token = "s3cret"
	leader, follower := sitetest.StartPair(t, sitetest.Options{Token: token, Limits: siteapi.Limits{Rate: slow, Burst: 2}})
	forged := func(ctx context.Context, who string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, siteapi.ForwardedKey, "1", siteapi.CallerKey, who)
	}
	c := client(t, leader.Addr, nil)

	_, err := c.Send(forged(deadline(t), "ip:10.9.9.9"), sendReq())
	wantCode(t, err, codes.Unauthenticated, "token")

	for range 2 {
		if _, err := c.Send(withToken(deadline(t), token), sendReq()); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"ip:10.9.9.9", "node:follower", "cert:someone"} {
		_, err = c.Send(forged(withToken(deadline(t), token), who), sendReq())
		wantCode(t, err, codes.ResourceExhausted, "rate limit")
	}
	if n := len(leader.Site.Sends()); n != 2 {
		t.Fatalf("leader's Site got %d Sends, want 2", n)
	}

	_, err = client(t, follower.Addr, nil).Send(forged(withToken(deadline(t), token), "ip:10.9.9.9"), sendReq())
	wantCode(t, err, codes.Unavailable, "does not lead")
	if follower.LeaderCalls.Load() != 1 || len(leader.Site.Sends()) != 2 {
		t.Fatal("a forged forwarded call was passed on")
	}
}

// TestRefusalsAreCountedAndLoggedOncePerCaller: a flood of anonymous calls
// from one caller is counted call by call and written to the log once.
func TestRefusalsAreCountedAndLoggedOncePerCaller(t *testing.T) {
	var log guardtest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	leader, _ := sitetest.StartPair(t, sitetest.Options{Token: "s3cret", Logger: logger})
	c := client(t, leader.Addr, nil)
	for range 50 {
		_, err := c.Send(deadline(t), sendReq())
		wantCode(t, err, codes.Unauthenticated, "token")
	}
	if n := leader.Server.Refusals().Count("unauthenticated"); n != 50 {
		t.Fatalf("refusals counted: %d, want 50", n)
	}
	lines := strings.Count(log.String(), "site_api: refused")
	if lines != 1 || !strings.Contains(log.String(), "caller=ip:127.0.0.1") || !strings.Contains(log.String(), "method=Send") {
		t.Fatalf("%d refusal lines for 50 refusals of one caller, want 1:\n%s", lines, log.String())
	}
	if strings.Contains(log.String(), "s3cret") {
		t.Fatal("the token is in the log")
	}
}

// waitCount waits until r counted n refusals for reason.
func waitCount(t *testing.T, r *guard.Refusals, reason string, n int) {
	t.Helper()
	waittest.For(t, wait, fmt.Sprintf("%d refusals %q counted", n, reason), func() (bool, string) {
		got := r.Count(reason)
		return got >= n, fmt.Sprintf("%d counted", got)
	})
}

// TestIdleAndSilentConnectionsAreClosed: a connection that finished its
// HTTP/2 handshake and then makes no call is sent GOAWAY and closed after
// the idle timeout; one that never says anything is closed after the
// handshake timeout.
func TestIdleAndSilentConnectionsAreClosed(t *testing.T) {
	limits := siteapi.Limits{GRPC: guard.GRPCLimits{IdleTimeout: 300 * time.Millisecond, HandshakeTimeout: 300 * time.Millisecond}}
	leader, _ := sitetest.StartPair(t, sitetest.Options{Limits: limits})

	conn, err := net.Dial("tcp", leader.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(4, 0, nil)...)); err != nil {
		t.Fatal(err)
	}
	goaway := false
	for {
		typ, flags, payload, err := readFrame(conn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the idle connection was still open after %s (GOAWAY seen: %v)", wait, goaway)
		}
		if err != nil {
			break // closed by the server
		}
		switch {
		case typ == 7:
			goaway = true
		case typ == 6 && flags&1 == 0: // a PING: answer it, as a client does
			_, _ = conn.Write(frame(6, 1, payload))
		case typ == 4 && flags&1 == 0: // the server's SETTINGS: acknowledge
			_, _ = conn.Write(frame(4, 1, nil))
		}
	}
	if !goaway {
		t.Fatal("the server closed the idle connection without a GOAWAY")
	}

	silent, err := net.Dial("tcp", leader.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_ = silent.SetDeadline(time.Now().Add(wait))
	if _, err := io.ReadAll(silent); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection that sent nothing was still open after %s", wait)
	}
}

// frame returns an HTTP/2 frame on stream 0.
func frame(typ, flags byte, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	return append(b, payload...)
}

// readFrame reads one HTTP/2 frame.
func readFrame(r io.Reader) (typ, flags byte, payload []byte, err error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(append([]byte{0}, h[:3]...))
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, 0, nil, err
	}
	return h[3], h[4], payload, nil
}

// TestConnectionsPerAddressAreCapped: past the cap, a new connection from
// the same address is closed at once and counted.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{Limits: siteapi.Limits{Conns: guard.ConnLimits{PerAddress: 2}}})
	for range 2 {
		c, err := net.Dial("tcp", leader.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	third, err := net.Dial("tcp", leader.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	_ = third.SetDeadline(time.Now().Add(wait))
	if _, err := third.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
		t.Fatalf("a connection past the cap was kept (%v)", err)
	}
	waitCount(t, leader.Server.Refusals(), "too many connections", 1)
}

// TestServerNeedsTLSForCertificates: client and member CAs without TLS are
// a configuration error.
func TestServerNeedsTLSForCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "CA")
	_, err := siteapi.NewServer(siteapi.ServerConfig{Site: &sitetest.Site{}, ClientCAs: []*x509.Certificate{ca.Cert}})
	if err == nil || !strings.Contains(err.Error(), "need TLS") {
		t.Fatalf("NewServer = %v", err)
	}
}

// TestHugeHeaderBlocksAreRefused plays the outsider that reaches a site node
// off loopback (TLS, a token required) and, on 8 connections, sends header
// blocks of 12 MB that it never ends: gRPC decodes a call's headers before
// the tap handle can check the token, and by default accepts 16 MiB of them.
// Each connection is closed after its first 16 KiB, long before the ping
// timeout would have closed it, and counted.
func TestHugeHeaderBlocksAreRefused(t *testing.T) {
	p := newPKI(t)
	leader := sitetest.Start(t, "leader", sitetest.Options{Token: "s3cret", TLS: p.server})
	leader.SetLeader(true, "")
	block := guardtest.HeaderBlock(pb.Site_Send_FullMethodName, 12<<20)
	const conns = 8
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			conn, err := guardtest.Dial(leader.Addr, nil, &tls.Config{RootCAs: p.api.Pool, ServerName: "localhost"})
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			go func() { _ = guardtest.SendHeaderBlock(conn, block, false) }()
			errs <- guardtest.WaitClosed(conn, wait)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r := leader.Server.Refusals()
	waittest.For(t, wait, fmt.Sprintf("%d refusals counted", conns), func() (bool, string) {
		large, refused := r.Count("header block too large"), r.Count("header block refused")
		return large+refused >= conns, fmt.Sprintf("%d too large, %d refused by gRPC", large, refused)
	})
	// A script with the token is served as before.
	c := client(t, leader.Addr, &tls.Config{RootCAs: p.api.Pool, ServerName: "localhost"})
	if _, err := c.Send(withToken(deadline(t), "s3cret"), sendReq()); err != nil {
		t.Fatalf("Send with the token: %v", err)
	}
}

// fakeLeader is a gRPC server over TLS with cert that records the
// authorization header of every call it gets, and answers none.
type fakeLeader struct {
	addr string
	mu   sync.Mutex
	auth []string
	hits int
}

func startFakeLeader(t *testing.T, cert tls.Certificate) *fakeLeader {
	t.Helper()
	f := &fakeLeader{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			md, _ := metadata.FromIncomingContext(stream.Context())
			f.mu.Lock()
			f.hits++
			f.auth = append(f.auth, md.Get("authorization")...)
			f.mu.Unlock()
			return status.Error(codes.Unavailable, "not really the leader")
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f
}

// TestFollowerForwardsOnlyToAMember plays an outsider that makes a follower
// take its address for the leader's (a stale or poisoned view, a hijacked
// address) and serves it with a certificate that is not a member's: one the
// nodes' API CA issued (which the follower used to trust), one of the Raft
// CA naming no member (a script's, another service's), and one of another
// CA naming a member. The follower sends it no call and no token; and it
// still passes calls to the real leader, which presents its member
// certificate.
func TestFollowerForwardsOnlyToAMember(t *testing.T) {
	p := newPKI(t)
	other := tlstest.NewCA(t, "another CA")
	follower := sitetest.Start(t, "follower", p.node(t, "follower", sitetest.Options{Token: "s3cret"}))
	c := client(t, follower.Addr, &tls.Config{RootCAs: p.api.Pool, ServerName: "localhost"})
	for _, tc := range []struct {
		name string
		cert tls.Certificate
	}{
		{"the nodes' API CA", p.api.Issue(t, "leader")},
		{"the Raft CA, naming no member", p.raft.Issue(t, "script-1")},
		{"another CA, naming a member", other.Issue(t, "leader")},
	} {
		fake := startFakeLeader(t, tc.cert)
		follower.SetLeader(false, fake.addr)
		_, err := c.Send(withToken(deadline(t), "s3cret"), sendReq())
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: Send through the follower: %v, want Unavailable", tc.name, err)
		}
		fake.mu.Lock()
		hits, auth := fake.hits, fake.auth
		fake.mu.Unlock()
		if hits != 0 || len(auth) != 0 {
			t.Errorf("%s: the fake leader got %d calls and %d authorization headers", tc.name, hits, len(auth))
		}
	}

	leader := sitetest.Start(t, "leader", p.node(t, "leader", sitetest.Options{Token: "s3cret"}))
	leader.SetLeader(true, "")
	follower.SetLeader(false, leader.Addr)
	if _, err := c.Send(withToken(deadline(t), "s3cret"), sendReq()); err != nil {
		t.Fatalf("Send through the follower to the real leader: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("the leader's Site got %d Sends, want 1", n)
	}
}

// TestPeerTLSNeedsMembers: a node that would pass calls on over TLS without
// a way to check that the leader is a member is a configuration error.
func TestPeerTLSNeedsMembers(t *testing.T) {
	p := newPKI(t)
	_, err := siteapi.NewServer(siteapi.ServerConfig{Site: &sitetest.Site{}, TLS: p.server,
		PeerTLS: &tls.Config{Certificates: []tls.Certificate{p.raft.Issue(t, "follower")}}})
	if err == nil || !strings.Contains(err.Error(), "PeerTLS needs MemberCAs and Members") {
		t.Fatalf("NewServer = %v", err)
	}
}

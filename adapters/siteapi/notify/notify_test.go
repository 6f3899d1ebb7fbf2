package notify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/ports"
)

// wait bounds every call of these tests: generous, for two busy cores.
const wait = 30 * time.Second

func deadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(strings.Join(addrs, ", "), opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prov = Provenance{Instance: "line-3", Script: "oven-watch", ExecutionID: "run-7", ParentExecutionID: "run-1"}

func TestSendViaFollower(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	c := dial(t, []string{follower.Addr}, WithProvenance(prov))
	id, err := c.To("ops").Send(deadline(t), "Oven 3", "too hot")
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		t.Fatalf("id %q is not a UUIDv7 (%v)", id, err)
	}
	sends := leader.Site.Sends()
	if len(sends) != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", len(sends))
	}
	want := ports.SendRequest{
		ID: id, List: "ops", Subject: "Oven 3", Body: "too hot",
		SourceInstance: "line-3", SourceScript: "oven-watch", ExecutionID: "run-7", ParentExecutionID: "run-1",
	}
	if sends[0] != want {
		t.Fatalf("leader's Site got %+v, want %+v", sends[0], want)
	}
	if follower.Site.Calls() != 0 {
		t.Fatal("the follower's Site was called")
	}

	// Each Send has its own id.
	id2, err := c.To("ops").Send(deadline(t), "Oven 3", "still too hot")
	if err != nil {
		t.Fatalf("second Send: %v", err)
	}
	if id2 == id {
		t.Fatal("two Sends got the same id")
	}
}

func TestSendWithID(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{})
	c := dial(t, []string{leader.Addr})
	const mine = "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f50"
	id, err := c.To("ops").SendWithID(deadline(t), mine, "s", "b")
	if err != nil || id != mine {
		t.Fatalf("SendWithID = %q, %v; want %q", id, err, mine)
	}
	if s := leader.Site.Sends(); len(s) != 1 || s[0].ID != mine {
		t.Fatalf("leader's Site got %+v", s)
	}
}

func TestStatusViaFollower(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	const a, b = "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f50", "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f51"
	leader.Site.StatusHook = func(_ context.Context, ids []string) (map[string]ports.Status, error) {
		out := map[string]ports.Status{}
		for _, id := range ids {
			if id == a {
				out[id] = ports.StatusDelivered
			}
		}
		return out, nil
	}
	c := dial(t, []string{follower.Addr})
	st, err := c.Status(deadline(t), a)
	if err != nil || st != ports.StatusDelivered {
		t.Fatalf("Status = %q, %v; want Delivered", st, err)
	}
	// An id the answer leaves out is Unknown.
	st, err = c.Status(context.Background(), b)
	if err != nil || st != ports.StatusUnknown {
		t.Fatalf("Status = %q, %v; want Unknown", st, err)
	}
	m, err := c.Statuses(deadline(t), []string{a, b})
	if err != nil || len(m) != 1 || m[a] != ports.StatusDelivered {
		t.Fatalf("Statuses = %v, %v", m, err)
	}
	if n := len(leader.Site.StatusCalls()); n != 3 {
		t.Fatalf("leader's Site got %d Status calls, want 3", n)
	}
	if follower.Site.Calls() != 0 {
		t.Fatal("the follower's Site was called")
	}
	m, err = c.Statuses(deadline(t), nil)
	if err != nil || len(m) != 0 || len(leader.Site.StatusCalls()) != 3 {
		t.Fatalf("Statuses of no ids = %v, %v, or it made a call", m, err)
	}
}

func TestHealthOfOneNode(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	contact := time.Date(2026, 3, 1, 10, 42, 7, 123456000, time.UTC)
	follower.Site.HealthReply.LastCentralContact = contact
	follower.Site.HealthReply.Backlog = 3
	c := dial(t, []string{leader.Addr, follower.Addr})

	h, err := c.Health(deadline(t), follower.Addr)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if h.Node != "follower" || h.Backlog != 3 || !h.LastCentralContact.Equal(contact) || !h.OldestEnqueuedAt.IsZero() {
		t.Fatalf("Health = %+v, want the follower's own", h)
	}
	if leader.Site.HealthCalls() != 0 {
		t.Fatal("the leader was asked for the follower's health")
	}
	h, err = c.Health(context.Background(), leader.Addr)
	if err != nil || h.Node != "leader" {
		t.Fatalf("Health of the leader = %+v, %v", h, err)
	}
	if _, err := c.Health(deadline(t), "127.0.0.1:1"); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Health of an address not dialled: %v, want ErrInvalid", err)
	}
}

func TestNoLeaderRetriesUntilDeadline(t *testing.T) {
	a := sitetest.Start(t, "a", sitetest.Options{})
	b := sitetest.Start(t, "b", sitetest.Options{})
	a.SetLeader(false, "")
	b.SetLeader(false, "")
	c := dial(t, []string{a.Addr, b.Addr})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.To("ops").Send(ctx, "s", "b")
	if !errors.Is(err, ports.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send with no leader: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if ctx.Err() == nil {
		t.Fatal("Send gave up before its deadline")
	}
	if !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("error %q does not say why", err)
	}
	// Both nodes were tried, and at least one of them again after a pause.
	na, nb := a.LeaderCalls.Load(), b.LeaderCalls.Load()
	if na < 1 || nb < 1 || na+nb < 3 {
		t.Fatalf("nodes tried a=%d b=%d times, want both, more than once in all", na, nb)
	}
	if a.Site.Calls()+b.Site.Calls() != 0 {
		t.Fatal("a Site was called")
	}

	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	if _, err := c.Status(sctx, "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f50"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Status with no leader: %v, want ErrUnavailable", err)
	}
}

func TestStaleViewLoopEnds(t *testing.T) {
	a := sitetest.Start(t, "a", sitetest.Options{})
	b := sitetest.Start(t, "b", sitetest.Options{})
	a.SetLeader(false, b.Addr)
	b.SetLeader(false, a.Addr)
	c := dial(t, []string{a.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// b routing a second request means the first try has been answered:
	// enough to see how it ended.
	b.OnLeader = func(n int64) {
		if n == 2 {
			cancel()
		}
	}
	_, err := c.To("ops").Send(ctx, "s", "b")
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Send in a stale loop: %v, want ErrUnavailable", err)
	}
	// The tries ended on b's refusal, not by going round until the deadline.
	if !strings.Contains(err.Error(), "does not lead") {
		t.Fatalf("error %q does not say that the request reached a node that does not lead", err)
	}
	if a.Site.Calls()+b.Site.Calls() != 0 {
		t.Fatal("a Site was called")
	}
}

func TestSendWithoutDeadlineFailsAtOnce(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	c := dial(t, []string{follower.Addr, leader.Addr})
	_, err := c.To("ops").Send(context.Background(), "s", "b")
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Send without a deadline: %v, want ErrInvalid naming the deadline", err)
	}
	_, err = c.To("ops").SendWithID(context.Background(), "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f50", "s", "b")
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("SendWithID without a deadline: %v, want ErrInvalid", err)
	}
	if leader.LeaderCalls.Load()+follower.LeaderCalls.Load() != 0 || leader.Site.Calls()+follower.Site.Calls() != 0 {
		t.Fatal("something was sent")
	}
}

func TestInvalidIsReturnedAtOnce(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	const why = "subject: longer than 255 bytes"
	leader.Site.SendHook = func(context.Context, int, ports.SendRequest) (string, error) {
		return "", fmt.Errorf("%s: %w", why, ports.ErrInvalid)
	}
	c := dial(t, []string{follower.Addr, leader.Addr})
	_, err := c.To("ops").Send(deadline(t), strings.Repeat("x", 300), "b")
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Send: %v, want ErrInvalid", err)
	}
	for _, s := range []string{why, "Send", follower.Addr} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not contain %q", err, s)
		}
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1 (no retry)", n)
	}
}

func TestInternalErrorIsNotRetried(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{})
	leader.Site.SendHook = func(context.Context, int, ports.SendRequest) (string, error) { return "", sitetest.ErrBoom }
	c := dial(t, []string{leader.Addr})
	_, err := c.To("ops").Send(deadline(t), "s", "b")
	if err == nil || errors.Is(err, ports.ErrUnavailable) || errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Send: %v, want a plain failure", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q leaks the site's internal error", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}
}

func TestToken(t *testing.T) {
	const token = "s3cret-token"
	leader, follower := sitetest.StartPair(t, sitetest.Options{Token: token})
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"none", nil},
		{"wrong", []Option{WithToken("wr0ng-token")}},
	} {
		c := dial(t, []string{follower.Addr, leader.Addr}, tc.opts...)
		_, err := c.To("ops").Send(deadline(t), "s", "b")
		if !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("%s token: Send: %v, want ErrUnauthenticated", tc.name, err)
		}
		if strings.Contains(err.Error(), "wr0ng") || strings.Contains(err.Error(), token) {
			t.Fatalf("error %q holds a token", err)
		}
		if _, err := c.Health(deadline(t), leader.Addr); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("%s token: Health: %v, want ErrUnauthenticated", tc.name, err)
		}
	}
	if leader.Site.Calls()+follower.Site.Calls() != 0 {
		t.Fatal("an unauthenticated call reached a Site")
	}

	c := dial(t, []string{follower.Addr}, WithToken(token))
	if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
		t.Fatalf("Send with the token via the follower: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}
}

func TestRetriesOnTheNextAddress(t *testing.T) {
	dead := sitetest.DeadAddr(t)
	leader, _ := sitetest.StartPair(t, sitetest.Options{})
	c := dial(t, []string{dead, leader.Addr})
	if got := c.nodes[c.next.Load()].addr; got != dead {
		t.Fatalf("first node to try = %s, want %s", got, dead)
	}
	id, err := c.To("ops").Send(deadline(t), "s", "b")
	if err != nil {
		t.Fatalf("Send with the first node down: %v", err)
	}
	if s := leader.Site.Sends(); len(s) != 1 || s[0].ID != id {
		t.Fatalf("leader's Site got %+v, want one Send of %s", s, id)
	}
	// The node that answered is the first one tried next time.
	if got := c.nodes[c.next.Load()].addr; got != leader.Addr {
		t.Fatalf("first node to try = %s, want %s", got, leader.Addr)
	}
}

func TestRetryKeepsTheID(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	leader.Site.SendHook = func(ctx context.Context, n int, req ports.SendRequest) (string, error) {
		switch n {
		case 0: // the leader is not ready
			return "", fmt.Errorf("no raft leader: %w", ports.ErrUnavailable)
		case 1: // the answer is lost: the try times out
			<-ctx.Done()
			return "", ctx.Err()
		}
		return req.ID, nil
	}
	c := dial(t, []string{follower.Addr, leader.Addr}, WithAttemptTimeout(time.Second))
	id, err := c.To("ops").Send(deadline(t), "s", "b")
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	sends := leader.Site.Sends()
	if len(sends) < 3 {
		t.Fatalf("leader's Site got %d Sends, want at least 3", len(sends))
	}
	for i, s := range sends {
		if s.ID != id {
			t.Fatalf("try %d sent id %q, want %q every time", i, s.ID, id)
		}
	}
}

func TestTLS(t *testing.T) {
	serverTLS, clientTLS := sitetest.TLSConfigs(t)
	leader, follower := sitetest.StartPair(t, sitetest.Options{TLS: serverTLS, MemberCA: tlstest.NewCA(t, "site Raft CA")})
	c := dial(t, []string{follower.Addr}, WithTLS(clientTLS))
	if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
		t.Fatalf("Send over TLS: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}

	plain := dial(t, []string{follower.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := plain.To("ops").Send(ctx, "s", "b"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("plaintext Send to a TLS node: %v, want ErrUnavailable", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}
}

func TestClientCertificate(t *testing.T) {
	serverTLS, clientTLS := sitetest.TLSConfigs(t)
	scripts := tlstest.NewCA(t, "scripts CA")
	leader, _ := sitetest.StartPair(t, sitetest.Options{TLS: serverTLS, MemberCA: tlstest.NewCA(t, "site Raft CA"),
		ClientCAs: []*x509.Certificate{scripts.Cert}})
	anonymous := dial(t, []string{leader.Addr}, WithTLS(clientTLS))
	if _, err := anonymous.To("ops").Send(deadline(t), "s", "b"); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("Send without a client certificate: %v, want ErrUnauthenticated", err)
	}
	withCert := clientTLS.Clone()
	withCert.Certificates = []tls.Certificate{scripts.Issue(t, "oven-watch")}
	c := dial(t, []string{leader.Addr}, WithTLS(withCert))
	if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
		t.Fatalf("Send with a client certificate: %v", err)
	}
}

// TestRateLimitIsWaitedOut: a Send over the caller's rate waits the time
// the site names and goes through; one whose wait is past its deadline
// fails at once as unavailable, saying the limit.
func TestRateLimitIsWaitedOut(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{Limits: siteapi.Limits{Rate: 20, Burst: 1}})
	c := dial(t, []string{follower.Addr, leader.Addr})
	for i := range 3 {
		if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
			t.Fatalf("Send %d: %v", i+1, err)
		}
	}
	if n := len(leader.Site.Sends()); n != 3 {
		t.Fatalf("leader's Site got %d Sends, want 3", n)
	}
	if follower.Server.Refusals().Count("rate limited")+leader.Server.Refusals().Count("rate limited") == 0 {
		t.Fatal("three Sends at once passed a limit of one at once")
	}

	slow, _ := sitetest.StartPair(t, sitetest.Options{Limits: siteapi.Limits{Rate: 0.001, Burst: 1}})
	c = dial(t, []string{slow.Addr})
	if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
		t.Fatal(err)
	}
	_, err := c.To("ops").Send(deadline(t), "s", "b")
	if !errors.Is(err, ports.ErrUnavailable) || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("Send over a slow limit: %v, want ErrUnavailable naming the rate limit", err)
	}
	if n := slow.Server.Refusals().Count("rate limited"); n != 1 {
		t.Fatalf("the site refused %d Sends, want 1 (no retry past the deadline)", n)
	}
}

func TestOversizeIsNotRetried(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{Limits: siteapi.Limits{GRPC: guard.GRPCLimits{MaxRecvMsgBytes: 4096}}})
	c := dial(t, []string{leader.Addr})
	_, err := c.To("ops").Send(deadline(t), "s", strings.Repeat("b", 5000))
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("oversize Send: %v, want ErrInvalid", err)
	}
	sitetest.WaitRefused(t, leader, "request too large", 1)
}

func TestClosed(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{})
	c, err := Dial(leader.Addr)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if got := c.Addrs(); len(got) != 1 || got[0] != leader.Addr {
		t.Fatalf("Addrs = %v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.To("ops").Send(deadline(t), "s", "b"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Status(deadline(t), "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Status after Close: %v, want ErrClosed", err)
	}
}

func TestDial(t *testing.T) {
	if _, err := Dial(" , "); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Dial of no address: %v, want ErrInvalid", err)
	}
	c := dial(t, []string{"127.0.0.1:1", " 127.0.0.1:2", "127.0.0.1:1"})
	if got := strings.Join(c.Addrs(), ","); got != "127.0.0.1:1,127.0.0.1:2" {
		t.Fatalf("Addrs = %s", got)
	}
}

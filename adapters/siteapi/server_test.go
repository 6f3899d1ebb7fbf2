package siteapi_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/ports"
)

// wait bounds every call of these tests: generous, for two busy cores.
const wait = 30 * time.Second

const testID = "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f50"

// client returns a raw site API client of the node at addr.
func client(t *testing.T, addr string, tlsCfg *tls.Config) pb.SiteClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewSiteClient(conn)
}

func deadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func sendReq() *pb.SendRequest {
	return &pb.SendRequest{
		Id: testID, List: "ops", Subject: "Oven 3", Body: "too hot",
		SourceInstance: "line-3", SourceScript: "oven-watch", ExecutionId: "run-7", ParentExecutionId: "run-1",
	}
}

func wantCode(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
	if !strings.Contains(st.Message(), text) {
		t.Fatalf("error text %q does not contain %q", st.Message(), text)
	}
}

func TestNewServerNeedsSite(t *testing.T) {
	if _, err := siteapi.NewServer(siteapi.ServerConfig{}); err == nil {
		t.Fatal("NewServer without a Site succeeded")
	}
}

// TestNewServerChecksLimits: zeros take the defaults, a negative bound is
// refused naming its field (a negative Rate is the documented "no limit").
func TestNewServerChecksLimits(t *testing.T) {
	if _, err := siteapi.NewServer(siteapi.ServerConfig{Site: &sitetest.Site{}, Limits: siteapi.Limits{Rate: -1}}); err != nil {
		t.Fatalf("zero limits and no rate limit: %v", err)
	}
	_, err := siteapi.NewServer(siteapi.ServerConfig{Site: &sitetest.Site{},
		Limits: siteapi.Limits{Burst: -1, Conns: guard.ConnLimits{PerAddress: 9, Total: 3}, GRPC: guard.GRPCLimits{IdleTimeout: -time.Second}}})
	for _, want := range []string{"Burst: must be positive, got -1", "Conns.Total: 3 is below PerAddress (9)", "GRPC.IdleTimeout: must be positive, got -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}

func TestSendViaFollowerReachesLeaderOnce(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	resp, err := client(t, follower.Addr, nil).Send(deadline(t), sendReq())
	if err != nil {
		t.Fatalf("Send via follower: %v", err)
	}
	if resp.GetId() != testID {
		t.Fatalf("id = %q, want %q", resp.GetId(), testID)
	}
	sends := leader.Site.Sends()
	if len(sends) != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", len(sends))
	}
	want := ports.SendRequest{
		ID: testID, List: "ops", Subject: "Oven 3", Body: "too hot",
		SourceInstance: "line-3", SourceScript: "oven-watch", ExecutionID: "run-7", ParentExecutionID: "run-1",
	}
	if sends[0] != want {
		t.Fatalf("leader's Site got %+v, want %+v", sends[0], want)
	}
	if n := follower.Site.Calls(); n != 0 {
		t.Fatalf("follower's Site got %d calls, want 0", n)
	}
}

func TestSendOnLeaderIsLocal(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	if _, err := client(t, leader.Addr, nil).Send(deadline(t), sendReq()); err != nil {
		t.Fatalf("Send on leader: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}
	if n := follower.LeaderCalls.Load(); n != 0 {
		t.Fatalf("follower was asked %d times", n)
	}
}

func TestStatusViaFollower(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	leader.Site.StatusHook = func(_ context.Context, ids []string) (map[string]ports.Status, error) {
		return map[string]ports.Status{ids[0]: ports.StatusDelivered, ids[1]: ports.StatusUnknown}, nil
	}
	ids := []string{testID, "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f51"}
	// No deadline: Status does not need one; the forwarded call is bounded.
	resp, err := client(t, follower.Addr, nil).Status(context.Background(), &pb.StatusRequest{Ids: ids})
	if err != nil {
		t.Fatalf("Status via follower: %v", err)
	}
	got := pb.StatusesFromPB(resp)
	if got[ids[0]] != ports.StatusDelivered || got[ids[1]] != ports.StatusUnknown || len(got) != 2 {
		t.Fatalf("statuses = %v", got)
	}
	calls := leader.Site.StatusCalls()
	if len(calls) != 1 || len(calls[0]) != 2 || calls[0][0] != ids[0] || calls[0][1] != ids[1] {
		t.Fatalf("leader's Site Status calls = %v, want one with %v", calls, ids)
	}
	if n := follower.Site.Calls(); n != 0 {
		t.Fatalf("follower's Site got %d calls, want 0", n)
	}
}

func TestHealthIsTheNodesOwn(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	oldest := time.Date(2026, 3, 1, 10, 42, 7, 123456000, time.UTC)
	follower.Site.HealthReply = ports.SiteHealth{
		Site: "site-a", Node: "follower", Backlog: 42, OldestEnqueuedAt: oldest,
		Replica:          ports.ReplicaState{Node: "follower", Role: ports.RoleFollower, Term: 7, Leader: "leader"},
		LastCentralError: "central unreachable",
		Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 3, Parked: 1, OldestBufferedAt: oldest, Terminal: 9},
			{Kind: ports.OpWrite}},
	}
	resp, err := client(t, follower.Addr, nil).Health(deadline(t), &pb.HealthRequest{})
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	got := pb.HealthFromPB(resp)
	if !reflect.DeepEqual(got, follower.Site.HealthReply) {
		t.Fatalf("Health = %+v, want %+v", got, follower.Site.HealthReply)
	}
	if !got.LastCentralContact.IsZero() {
		t.Fatalf("zero time came back as %v", got.LastCentralContact)
	}
	if leader.Site.Calls() != 0 || follower.LeaderCalls.Load() != 0 {
		t.Fatal("Health was not answered locally")
	}
}

func TestSendNeedsDeadline(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	for _, n := range []*sitetest.Node{leader, follower} {
		_, err := client(t, n.Addr, nil).Send(context.Background(), sendReq())
		wantCode(t, err, codes.InvalidArgument, "Send needs a deadline")
	}
	if leader.Site.Calls()+follower.Site.Calls() != 0 {
		t.Fatal("a Send without a deadline reached a Site")
	}
	if leader.LeaderCalls.Load()+follower.LeaderCalls.Load() != 0 {
		t.Fatal("a Send without a deadline was routed")
	}
}

func TestNoLeader(t *testing.T) {
	n := sitetest.Start(t, "orphan", sitetest.Options{})
	n.SetLeader(false, "")
	c := client(t, n.Addr, nil)
	_, err := c.Send(deadline(t), sendReq())
	wantCode(t, err, codes.Unavailable, "no leader")
	_, err = c.Status(deadline(t), &pb.StatusRequest{Ids: []string{testID}})
	wantCode(t, err, codes.Unavailable, "no leader")
	if n.Site.Calls() != 0 {
		t.Fatal("a follower with no leader called its own Site")
	}
}

func TestStaleViewIsNotForwardedTwice(t *testing.T) {
	a := sitetest.Start(t, "a", sitetest.Options{})
	b := sitetest.Start(t, "b", sitetest.Options{})
	a.SetLeader(false, b.Addr)
	b.SetLeader(false, a.Addr)

	_, err := client(t, a.Addr, nil).Send(deadline(t), sendReq())
	wantCode(t, err, codes.Unavailable, "does not lead")
	_, err = client(t, b.Addr, nil).Status(deadline(t), &pb.StatusRequest{Ids: []string{testID}})
	wantCode(t, err, codes.Unavailable, "does not lead")

	// Each call crossed once: the entry node routed it, the other refused it.
	if na, nb := a.LeaderCalls.Load(), b.LeaderCalls.Load(); na != 2 || nb != 2 {
		t.Fatalf("leader views asked a=%d b=%d times, want 2 and 2", na, nb)
	}
	if a.Site.Calls()+b.Site.Calls() != 0 {
		t.Fatal("a Site was called")
	}
}

func TestForwardedRequestAtFollowerIsRefused(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	ctx := metadata.AppendToOutgoingContext(deadline(t), siteapi.ForwardedKey, "1")
	_, err := client(t, follower.Addr, nil).Send(ctx, sendReq())
	wantCode(t, err, codes.Unavailable, "does not lead")
	if leader.LeaderCalls.Load() != 0 || leader.Site.Calls() != 0 {
		t.Fatal("a forwarded request was forwarded again")
	}
}

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code codes.Code
		text string
	}{
		// The message is one sentence: the code says "invalid" (errtext).
		{"invalid", fmt.Errorf("subject: longer than 255 bytes: %w", ports.ErrInvalid), codes.InvalidArgument,
			"subject: longer than 255 bytes"},
		{"unavailable", fmt.Errorf("no raft leader: %w", ports.ErrUnavailable), codes.Unavailable, "no raft leader"},
		{"unauthenticated", fmt.Errorf("central refused the site: %w", ports.ErrUnauthenticated), codes.Unauthenticated,
			"central refused the site"},
		{"deadline", fmt.Errorf("commit: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "deadline exceeded"},
		{"other", sitetest.ErrBoom, codes.Internal, "internal error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leader, follower := sitetest.StartPair(t, sitetest.Options{})
			leader.Site.SendHook = func(context.Context, int, ports.SendRequest) (string, error) { return "", tc.err }
			for _, n := range []*sitetest.Node{leader, follower} {
				_, err := client(t, n.Addr, nil).Send(deadline(t), sendReq())
				wantCode(t, err, tc.code, tc.text)
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("error %q leaks the internal error", err)
				}
			}
		})
	}
}

func TestToken(t *testing.T) {
	const token = "s3cret-token"
	leader, follower := sitetest.StartPair(t, sitetest.Options{Token: token})
	c := client(t, follower.Addr, nil)

	_, err := c.Send(deadline(t), sendReq())
	wantCode(t, err, codes.Unauthenticated, "token")
	_, err = c.Health(withToken(deadline(t), "wrong"), &pb.HealthRequest{})
	wantCode(t, err, codes.Unauthenticated, "token")
	_, err = c.Status(withToken(deadline(t), token+"x"), &pb.StatusRequest{Ids: []string{testID}})
	wantCode(t, err, codes.Unauthenticated, "token")
	if leader.Site.Calls()+follower.Site.Calls() != 0 || follower.LeaderCalls.Load() != 0 {
		t.Fatal("an unauthenticated call got through")
	}

	// The right token, through the follower: the leader requires it too, so
	// the follower must pass it on.
	if _, err := c.Send(withToken(deadline(t), token), sendReq()); err != nil {
		t.Fatalf("Send with the token: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}
}

func TestTLS(t *testing.T) {
	serverTLS, clientTLS := sitetest.TLSConfigs(t)
	leader, follower := sitetest.StartPair(t, sitetest.Options{TLS: serverTLS, MemberCA: tlstest.NewCA(t, "site Raft CA")})

	if _, err := client(t, follower.Addr, clientTLS).Send(deadline(t), sendReq()); err != nil {
		t.Fatalf("Send over TLS via follower: %v", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := client(t, follower.Addr, nil).Send(ctx, sendReq())
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("plaintext Send to a TLS server: %v, want Unavailable", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends after the plaintext one, want 1", n)
	}
}

func TestPlaintextPeerToTLSLeaderFails(t *testing.T) {
	serverTLS, clientTLS := sitetest.TLSConfigs(t)
	// The follower has no PeerTLS: it cannot reach its TLS leader.
	leader := sitetest.Start(t, "leader", sitetest.Options{TLS: serverTLS})
	follower := sitetest.Start(t, "follower", sitetest.Options{TLS: serverTLS})
	leader.SetLeader(true, "")
	follower.SetLeader(false, leader.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client(t, follower.Addr, clientTLS).Send(ctx, sendReq())
	if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		t.Fatalf("Send: %v, want Unavailable", err)
	}
	if leader.Site.Calls() != 0 {
		t.Fatal("the leader's Site was called")
	}
}

func TestRequestSizeLimit(t *testing.T) {
	leader, _ := sitetest.StartPair(t, sitetest.Options{})
	req := sendReq()
	req.Body = strings.Repeat("x", siteapi.DefaultMaxRequestBytes+1)
	_, err := client(t, leader.Addr, nil).Send(deadline(t), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversize Send: %v, want ResourceExhausted", err)
	}
	if leader.Site.Calls() != 0 {
		t.Fatal("an oversize request reached the Site")
	}
	sitetest.WaitRefused(t, leader, "request too large", 1)
	// The default fits the largest Send the core accepts by default.
	req.Body = strings.Repeat("x", 64<<10)
	req.Subject = strings.Repeat("s", 255)
	if _, err := client(t, leader.Addr, nil).Send(deadline(t), req); err != nil {
		t.Fatalf("a Send of the default limits: %v", err)
	}
}

func TestStop(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	c := client(t, follower.Addr, nil)
	if _, err := c.Send(deadline(t), sendReq()); err != nil {
		t.Fatalf("Send: %v", err)
	}
	follower.Server.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Send(ctx, sendReq())
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Send to a stopped server: %v, want Unavailable", err)
	}
	if n := len(leader.Site.Sends()); n != 1 {
		t.Fatalf("leader's Site got %d Sends, want 1", n)
	}
	// Stop is idempotent (the cleanup stops it again).
	follower.Server.Stop()
}

// TestServeAfterStopReturnsNil: a Stop that comes before Serve has started
// (a shutdown right after the start) ends Serve with nil, as a Stop during
// Serve does, not with an error.
func TestServeAfterStopReturnsNil(t *testing.T) {
	srv, err := siteapi.NewServer(siteapi.ServerConfig{Site: &sitetest.Site{}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	srv.Stop()
	if err := srv.Serve(lis); err != nil {
		t.Fatalf("Serve after Stop: %v", err)
	}
}

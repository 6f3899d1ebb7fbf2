package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

func TestClientMovesToTheLeaderAFollowerNames(t *testing.T) {
	leader := sitetest.Start(t, "leader", sitetest.Options{})
	leader.SetLeader(true, "")
	f1 := sitetest.Start(t, "f1", sitetest.Options{})
	f1.SetLeader(false, leader.Addr)
	f2 := sitetest.Start(t, "f2", sitetest.Options{})
	f2.SetLeader(false, leader.Addr)
	c := dial(t, []string{f1.Addr, f2.Addr, leader.Addr})
	if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
		t.Fatalf("Send: %v", err)
	}
	// f1 named the leader: the client connects to it, and calls it first
	// once the connection is ready.
	waittest.For(t, 10*time.Second, "a ready connection to the named leader", func() (bool, string) {
		st := c.nodes[2].conn.GetState()
		return st == connectivity.Ready, st.String()
	})
	for range 4 {
		if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if _, err := c.Status(deadline(t), "0196a3b0-0000-7000-8000-000000000001"); err != nil {
		t.Fatalf("Status: %v", err)
	}
	// The first Send went through f1, which named the leader: every later
	// call went to the leader itself.
	if n := f1.LeaderCalls.Load(); n != 1 {
		t.Errorf("f1 routed %d calls, want the first one only", n)
	}
	if n := f2.LeaderCalls.Load(); n != 0 {
		t.Errorf("f2 routed %d calls, want none", n)
	}
	if n := leader.LeaderCalls.Load(); n != 6 {
		t.Errorf("the leader served %d calls, want 6 (one Send passed on by f1, four Sends and a Status called directly)", n)
	}
	if got := c.nodes[c.first()].addr; got != leader.Addr {
		t.Errorf("first node to try = %s, want the leader %s", got, leader.Addr)
	}
}

func TestLeaderNamedOutsideTheGivenNodesIsIgnored(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	// The client knows the follower only: the leader the follower names
	// is not one it was given, and it is never called directly.
	c := dial(t, []string{follower.Addr})
	for range 3 {
		if _, err := c.To("ops").Send(deadline(t), "s", "b"); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if n := follower.LeaderCalls.Load(); n != 3 {
		t.Errorf("the follower routed %d Sends, want all 3", n)
	}
	if n := len(leader.Site.Sends()); n != 3 {
		t.Errorf("the leader buffered %d Sends, want 3", n)
	}
}

func TestAWrongLeaderNameCostsOneTry(t *testing.T) {
	dead := sitetest.DeadAddr(t)
	leader := sitetest.Start(t, "leader", sitetest.Options{})
	leader.SetLeader(true, "")
	stale := sitetest.Start(t, "stale", sitetest.Options{})
	// stale believes the dead node leads: it fails to pass the call on and
	// names the dead node, which the client tries once before moving on.
	stale.SetLeader(false, dead)
	c := dial(t, []string{stale.Addr, leader.Addr, dead})
	id, err := c.To("ops").Send(deadline(t), "s", "b")
	if err != nil {
		t.Fatalf("Send past a wrong leader name: %v", err)
	}
	if s := leader.Site.Sends(); len(s) != 1 || s[0].ID != id {
		t.Fatalf("leader's Site got %+v, want one Send of %s", s, id)
	}
	if got := c.nodes[c.first()].addr; got != leader.Addr {
		t.Errorf("first node to try = %s, want the leader %s", got, leader.Addr)
	}
}

// tryRecorder is a try function over c's nodes that records the order
// of the tries and answers each node as answer says.
func tryRecorder(c *Client, answer func(i int, trailer *metadata.MD, ctx context.Context) error) (
	func(context.Context, pb.SiteClient, ...grpc.CallOption) error, *[]int) {
	var order []int
	return func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) error {
		i := slices.IndexFunc(c.nodes, func(n node) bool { return n.rpc == rpc })
		order = append(order, i)
		md := metadata.MD{}
		err := answer(i, &md, ctx)
		for _, o := range opts {
			if tr, ok := o.(grpc.TrailerCallOption); ok {
				*tr.TrailerAddr = md
			}
		}
		return err
	}, &order
}

func TestAWrongLeaderNameIsTriedOnceThenTheRotationGoesOn(t *testing.T) {
	// stale, leader, dead: stale names dead. The client tries stale, then
	// the dead node it named, then goes on from stale: the leader. Without
	// the hint it would try stale, leader; going on from the named node
	// it would try stale, dead, stale, leader.
	c := dial(t, []string{"127.0.0.1:7201", "127.0.0.1:7202", "127.0.0.1:7203"})
	try, order := tryRecorder(c, func(i int, md *metadata.MD, _ context.Context) error {
		switch i {
		case 0:
			*md = metadata.Pairs(pb.LeaderKey, "127.0.0.1:7203")
			return status.Error(codes.Unavailable, "cannot reach the leader")
		case 1:
			return nil
		}
		return status.Error(codes.Unavailable, "connection refused")
	})
	if err := c.retry(deadline(t), "Send", try); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*order, []int{0, 2, 1}) {
		t.Errorf("tries at nodes %v, want [0 2 1]: stale, the node it named, the leader", *order)
	}
}

func TestALeaderTheClientCannotReachCostsNoCall(t *testing.T) {
	// The follower answers and names a leader the client cannot reach (no
	// connection ever becomes ready: packets dropped, here nobody
	// listening); a try there would last the whole deadline. Every call
	// goes on through the follower.
	leaderAddr := sitetest.DeadAddr(t)
	c := dial(t, []string{"127.0.0.1:7101", leaderAddr})
	try, order := tryRecorder(c, func(i int, md *metadata.MD, ctx context.Context) error {
		if i == 0 {
			*md = metadata.Pairs(pb.LeaderKey, leaderAddr)
			return nil
		}
		<-ctx.Done() // blackholed
		return status.FromContextError(ctx.Err()).Err()
	})
	for k := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.retry(ctx, "Send", try)
		cancel()
		if err != nil {
			t.Errorf("call %d: %v", k, err)
		}
	}
	if !slices.Equal(*order, []int{0, 0, 0, 0}) {
		t.Errorf("tries at nodes %v, want the follower's only", *order)
	}
}

func TestANamedLeaderWhoseTryFailedIsNotTriedFirstAgain(t *testing.T) {
	// The leader is connected (its connection ready) but does not answer:
	// the first call that starts there pays one try, and later calls stay
	// with the follower, which answers.
	leader := sitetest.Start(t, "leader", sitetest.Options{})
	leader.SetLeader(true, "")
	c := dial(t, []string{"127.0.0.1:7101", leader.Addr})
	try, order := tryRecorder(c, func(i int, md *metadata.MD, ctx context.Context) error {
		if i == 0 {
			*md = metadata.Pairs(pb.LeaderKey, leader.Addr)
			return nil
		}
		return status.Error(codes.DeadlineExceeded, "no answer in time")
	})
	if err := c.retry(deadline(t), "Send", try); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 10*time.Second, "a ready connection to the named leader", func() (bool, string) {
		st := c.nodes[1].conn.GetState()
		return st == connectivity.Ready, st.String()
	})
	for range 3 {
		if err := c.retry(deadline(t), "Send", try); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(*order, []int{0, 1, 0, 0, 0}) {
		t.Errorf("tries at nodes %v, want [0 1 0 0 0]: the leader tried first once", *order)
	}
}

func TestLeaderHintAcceptsOneHostPortOnly(t *testing.T) {
	c := dial(t, []string{"127.0.0.1:7101", "127.0.0.1:7102"})
	for _, tc := range []struct {
		md   metadata.MD
		want int
	}{
		{metadata.Pairs(pb.LeaderKey, "127.0.0.1:7102"), 1},
		{metadata.Pairs(pb.LeaderKey, "127.0.0.1:7103"), -1}, // not given
		{metadata.Pairs(pb.LeaderKey, "127.0.0.1:7101", pb.LeaderKey, "127.0.0.1:7102"), -1},
		{metadata.Pairs(pb.LeaderKey, " 127.0.0.1:7102"), -1},
		{metadata.Pairs(pb.LeaderKey, strings.Repeat("a", 300)), -1},
		{metadata.Pairs(pb.LeaderKey, ""), -1},
		{nil, -1},
	} {
		if got := c.leaderHint(tc.md); got != tc.want {
			t.Errorf("leaderHint(%v) = %d, want %d", tc.md, got, tc.want)
		}
	}
}

// FuzzLeaderHint feeds whatever a node, or something posing as one, could
// put in the leader trailer through the client's reading of it: the hint
// selects one of the nodes given to Dial by its exact address, or none.
func FuzzLeaderHint(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7101", "127.0.0.1:7103", "", " ", "a\x00b", strings.Repeat("x", 257), "[::1]:7101"} {
		f.Add(s, "")
		f.Add(s, "127.0.0.1:7102")
	}
	addrs := []string{"127.0.0.1:7101", "127.0.0.1:7102", "[::1]:7101"}
	c, err := Dial(strings.Join(addrs, ","))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	f.Fuzz(func(t *testing.T, v1, v2 string) {
		md := metadata.MD{pb.LeaderKey: {v1}}
		if v2 != "" {
			md[pb.LeaderKey] = append(md[pb.LeaderKey], v2)
		}
		i := c.leaderHint(md)
		switch {
		case i == -1:
		case i < 0 || i >= len(addrs):
			t.Fatalf("leaderHint = %d, out of range", i)
		case v2 != "" || addrs[i] != v1:
			t.Fatalf("leaderHint(%q, %q) = %s", v1, v2, addrs[i])
		}
		if i == -1 && v2 == "" && slices.Contains(addrs, v1) {
			t.Fatalf("leaderHint(%q) ignored a given node", v1)
		}
	})
}

func TestARefusalPassedOnByAFollowerNamesTheLeader(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	leader.Site.SendHook = func(context.Context, int, ports.SendRequest) (string, error) {
		return "", fmt.Errorf("list: unknown: %w", ports.ErrInvalid)
	}
	c := dial(t, []string{follower.Addr, leader.Addr})
	if _, err := c.To("nosuch").Send(deadline(t), "s", "b"); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Send = %v, want the leader's refusal", err)
	}
	if got := c.nodes[c.leader.Load()].addr; got != leader.Addr {
		t.Errorf("named leader = %s, want %s", got, leader.Addr)
	}
}

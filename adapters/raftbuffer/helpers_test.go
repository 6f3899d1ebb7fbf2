package raftbuffer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/waittest"
)

// waitFor is the deadline of every wait on a condition: generous, for two
// busy cores under the race detector.
const waitFor = 30 * time.Second

// testLogger discards raft's lines unless OUTBOX_TEST_RAFT_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("OUTBOX_TEST_RAFT_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// cluster is a group of real nodes on 127.0.0.1 in temporary directories.
type cluster struct {
	t     testing.TB
	cfgs  []Config
	nodes []*Node // nil for a stopped node
}

// clusterOpts adjusts every node's configuration before it opens.
type clusterOpts func(i int, c *Config)

// newCluster starts n nodes that form one group. Their listeners are made
// first, so that every node knows every address; Cleanup closes them all.
func newCluster(t testing.TB, n int, opts ...clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t}
	lns := make([]net.Listener, n)
	var peers []Peer
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		lns[i] = ln
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Address: ln.Addr().String()})
	}
	for i := range n {
		cfg := Config{
			NodeID:             peers[i].ID,
			Dir:                t.TempDir(),
			Listener:           lns[i],
			Peers:              slices.Clone(peers),
			Logger:             testLogger().With("test_node", peers[i].ID),
			HeartbeatTimeout:   500 * time.Millisecond,
			ElectionTimeout:    500 * time.Millisecond,
			LeaderLeaseTimeout: 250 * time.Millisecond,
		}
		for _, o := range opts {
			o(i, &cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	// Witness flags and other peer changes made by opts apply to every
	// node's copy of Peers.
	for i := range c.cfgs {
		for j := range c.cfgs[i].Peers {
			c.cfgs[i].Peers[j].Witness = c.cfgs[j].Peers[j].Witness
		}
	}
	c.nodes = make([]*Node, n)
	t.Cleanup(c.closeAll)
	for i := range n {
		c.start(i)
	}
	return c
}

// start opens node i; after the first start it binds its old address again.
func (c *cluster) start(i int) *Node {
	c.t.Helper()
	node, err := Open(context.Background(), c.cfgs[i])
	if err != nil {
		c.t.Fatalf("open %s: %v", c.cfgs[i].NodeID, err)
	}
	c.nodes[i] = node
	c.cfgs[i].Listener = nil
	c.cfgs[i].Bind = c.cfgs[i].Peers[i].Address
	return node
}

// stop closes node i, as a crash would leave the others: no leave.
func (c *cluster) stop(i int) {
	c.t.Helper()
	if err := c.nodes[i].Close(); err != nil {
		c.t.Errorf("close %s: %v", c.cfgs[i].NodeID, err)
	}
	c.nodes[i] = nil
}

func (c *cluster) closeAll() {
	for i, n := range c.nodes {
		if n != nil {
			if err := n.Close(); err != nil {
				c.t.Errorf("close %s: %v", c.cfgs[i].NodeID, err)
			}
			c.nodes[i] = nil
		}
	}
}

// running returns the nodes that are open.
func (c *cluster) running() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// leader waits until the running nodes agree on one of them as leader and
// it knows it, and returns it.
func (c *cluster) leader() *Node {
	c.t.Helper()
	var found *Node
	waittest.For(c.t, waitFor, "a leader every running node agrees on", func() (bool, string) {
		found = nil
		var id string
		var views []string
		for _, n := range c.running() {
			l, _ := n.Leader()
			views = append(views, fmt.Sprintf("%s (%s) follows %q", n.id, n.raft.State(), l))
			if l == "" || (id != "" && l != id) {
				return false, strings.Join(views, ", ")
			}
			id = l
		}
		for _, n := range c.running() {
			if n.id == id && n.raft.State() == raft.Leader {
				found = n
			}
		}
		return found != nil, strings.Join(views, ", ")
	})
	return found
}

// awaitLeader waits, up to waitFor, for a running node that leads and
// passes a Raft barrier (so that its copy holds everything committed
// before), and returns it with its term. Every node's change of role or
// leader wakes it. Unlike leader it fails with an error, not the test, so
// that any goroutine of a test may call it.
func (c *cluster) awaitLeader(ctx context.Context) (*Node, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
		for _, n := range c.running() {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.changes())})
		}
		for _, n := range c.running() {
			if n.raft.State() != raft.Leader {
				continue
			}
			term := n.raft.CurrentTerm()
			if err := n.barrier(ctx); err == nil && n.leads(term) {
				return n, term, nil
			}
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			return nil, 0, fmt.Errorf("no node of the group led within %s: %w", waitFor, ctx.Err())
		}
	}
}

// followers returns the running nodes other than l.
func (c *cluster) followers(l *Node) []*Node {
	var out []*Node
	for _, n := range c.running() {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// scanner is the part of a buffer contents reads.
type scanner interface {
	Scan(ctx context.Context, after uint64, limit int) ([]ports.Buffered, error)
}

// contents reads a node's whole buffer.
func contents(t testing.TB, b scanner) []ports.Buffered {
	t.Helper()
	var all []ports.Buffered
	var after uint64
	for {
		got, err := b.Scan(context.Background(), after, 1000)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if len(got) == 0 {
			return all
		}
		all = append(all, got...)
		after = got[len(got)-1].Seq
	}
}

// sameContents reports whether two buffers' contents are identical, Seqs
// and every field included.
func sameContents(a, b []ports.Buffered) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Seq != b[i].Seq || len(buffertest.DiffSubmission(a[i].Submission, b[i].Submission)) > 0 {
			return false
		}
	}
	return true
}

// requireContents fails unless the node holds exactly want, in order.
func requireContents(t testing.TB, who string, b ports.Buffer, want []ports.Submission) []ports.Buffered {
	t.Helper()
	got := contents(t, b)
	if len(got) != len(want) {
		t.Fatalf("%s holds %d notifications, want %d", who, len(got), len(want))
	}
	for i := range want {
		if d := buffertest.DiffSubmission(want[i], got[i].Submission); len(d) > 0 {
			t.Fatalf("%s: item %d differs: %v", who, i, d)
		}
	}
	return got
}

// waitReplicated waits until every running node holds the same contents as
// the leader l, and returns them. Both sides are read again on every poll:
// a leader just elected may still be applying what it committed before.
func (c *cluster) waitReplicated(l *Node) []ports.Buffered {
	c.t.Helper()
	var want []ports.Buffered
	waittest.For(c.t, waitFor, "every node to hold the leader's contents", func() (bool, string) {
		want = contents(c.t, l)
		for _, n := range c.followers(l) {
			if got := contents(c.t, n); !sameContents(got, want) {
				return false, fmt.Sprintf("%s holds %d notifications, the leader %s %d", n.id, len(got), l.id, len(want))
			}
		}
		return true, ""
	})
	return want
}

// mustAppend appends on b with a deadline.
func mustAppend(t testing.TB, b ports.Buffer, ns ...ports.Submission) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := b.Append(ctx, ns); err != nil {
		t.Fatalf("Append of %d: %v", len(ns), err)
	}
}

// ids returns the ids of ns.
func ids(ns []ports.Submission) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

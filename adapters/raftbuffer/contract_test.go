package raftbuffer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/waittest"
)

func TestContractSingleNode(t *testing.T) {
	buffertest.Exercise(t, func(t *testing.T) ports.Buffer {
		return newCluster(t, 1).leader()
	})
}

// TestContractThreeNodes runs the contract against a three-node group as
// its clients use one: through whichever node leads. On two busy cores an
// election can come in the middle of a subtest; the suite then goes on with
// the new leader instead of failing on the old one.
func TestContractThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node group per subtest")
	}
	buffertest.Exercise(t, func(t *testing.T) ports.Buffer {
		return newLeaderBuffer(newCluster(t, 3))
	})
}

// leaderBuffer is a group's buffer as its clients see it: every call goes
// to the node that leads now. After a change of leader it waits (bounded,
// as every wait of these tests) for the new one and a Raft barrier on it,
// so that the new leader's copy holds everything committed before. A write
// refused because its node lost the leadership meanwhile is sent again to
// the next leader, as the forwarder and the site API do (Append and Remove
// are idempotent); any other failure is the test's.
type leaderBuffer struct {
	c *cluster

	mu      sync.Mutex
	cur     *Node  // the leader calls go to
	term    uint64 // the term in which cur was found leading
	changes int    // leader changes seen, for the log
}

var _ ports.Buffer = (*leaderBuffer)(nil)

// maxLeaderChanges bounds how often one call follows the leadership to
// another node before it gives up.
const maxLeaderChanges = 5

func newLeaderBuffer(c *cluster) *leaderBuffer {
	l := c.leader()
	return &leaderBuffer{c: c, cur: l, term: l.raft.CurrentTerm()}
}

// leads reports whether n still leads in the term it was chosen in.
func (b *leaderBuffer) leads(n *Node, term uint64) bool {
	return n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term
}

// node returns the current leader and its term, first finding a new one if
// the last one no longer leads.
func (b *leaderBuffer) node(ctx context.Context) (*Node, uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leads(b.cur, b.term) {
		return b.cur, b.term, nil
	}
	old := b.cur.id
	l, term, err := b.c.awaitLeader(ctx)
	if err != nil {
		return nil, 0, err
	}
	b.cur, b.term = l, term
	b.changes++
	b.c.t.Logf("leader change %d: %s no longer leads; %s leads in term %d and the suite goes on with it",
		b.changes, old, l.id, term)
	return l, term, nil
}

// write runs op on the leader, and again on the next leader when the node
// it ran on lost the leadership meanwhile.
func (b *leaderBuffer) write(ctx context.Context, op func(*Node) error) error {
	for range maxLeaderChanges {
		n, term, err := b.node(ctx)
		if err != nil {
			return err
		}
		err = op(n)
		if err == nil || ctx.Err() != nil || !errors.Is(err, ports.ErrUnavailable) || b.leads(n, term) {
			return err
		}
	}
	return fmt.Errorf("the leadership moved %d times during one call", maxLeaderChanges)
}

func (b *leaderBuffer) Append(ctx context.Context, ns []ports.Submission) error {
	return b.write(ctx, func(n *Node) error { return n.Append(ctx, ns) })
}

func (b *leaderBuffer) Remove(ctx context.Context, ids []string) error {
	return b.write(ctx, func(n *Node) error { return n.Remove(ctx, ids) })
}

func (b *leaderBuffer) Scan(ctx context.Context, after uint64, limit int) ([]ports.Buffered, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return nil, err
	}
	return n.Scan(ctx, after, limit)
}

func (b *leaderBuffer) Contains(ctx context.Context, ids []string) (map[string]bool, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return nil, err
	}
	return n.Contains(ctx, ids)
}

// Stats answers from the leader; when the node lost the leadership between
// the choice and the answer, the next leader answers.
func (b *leaderBuffer) Stats(ctx context.Context) (ports.BufferStats, error) {
	for range maxLeaderChanges {
		n, term, err := b.node(ctx)
		if err != nil {
			return ports.BufferStats{}, err
		}
		st, err := n.Stats(ctx)
		if err != nil || st.Replica.Role == ports.RoleLeader || b.leads(n, term) {
			return st, err
		}
	}
	return ports.BufferStats{}, fmt.Errorf("the leadership moved %d times during one call", maxLeaderChanges)
}

// TestLeaderBufferFollowsTheLeadership: the contract test's buffer goes on
// through a change of leader, where the node it started with refuses
// writes; it reads from the new leader everything committed before. A
// deliberate hand-over stands in for the election a loaded machine causes.
func TestLeaderBufferFollowsTheLeadership(t *testing.T) {
	c := newCluster(t, 3)
	b := newLeaderBuffer(c)
	first := b.cur
	before := buffertest.NewSubmissions(buffertest.BaseTime, 3)
	mustAppend(t, b, before...)

	waittest.For(t, waitFor, "leadership to move away from "+first.id, waittest.Holds(func() bool {
		if first.raft.State() == raft.Leader {
			_ = first.raft.LeadershipTransfer().Error() // retried until it takes
		}
		return first.raft.State() != raft.Leader
	}))
	after := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Minute), 2)
	if err := first.Append(t.Context(), after); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Append on the former leader: %v, want ErrUnavailable", err)
	}
	mustAppend(t, b, after...)
	if b.cur == first || b.changes != 1 {
		t.Fatalf("the buffer still writes to %s after %d changes", b.cur.id, b.changes)
	}
	requireContents(t, "the new leader", b, append(before, after...))
	st, err := b.Stats(t.Context())
	if err != nil || st.Replica.Role != ports.RoleLeader || st.Replica.Node != b.cur.id || st.Count != 5 {
		t.Fatalf("Stats through the buffer: %+v, %v; want the new leader's, 5 buffered", st, err)
	}
}

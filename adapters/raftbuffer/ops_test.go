package raftbuffer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/opstoretest"
	"github.com/siteline/outbox/ports/waittest"
)

func TestOpStoreContractSingleNode(t *testing.T) {
	opstoretest.Exercise(t, opstoretest.Harness{
		Open: func(t *testing.T) ports.OpStore { return newCluster(t, 1).leader() },
	})
}

// TestOpStoreContractThreeNodes runs the contract through whichever node
// leads, as TestContractThreeNodes does, and its writes-refused area on a
// follower that has applied everything the leader committed.
func TestOpStoreContractThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node group per subtest")
	}
	opstoretest.Exercise(t, opstoretest.Harness{
		Open: func(t *testing.T) ports.OpStore { return newLeaderBuffer(newCluster(t, 3)) },
		Refusing: func(t *testing.T, s ports.OpStore) ports.OpStore {
			b := s.(*leaderBuffer)
			l, _, err := b.node(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			f := b.c.followers(l)[0]
			waitApplied(t, l, f)
			return f
		},
		Replicas: func(t *testing.T, s ports.OpStore) []ports.OpStore {
			b := s.(*leaderBuffer)
			l, _, err := b.node(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			out := []ports.OpStore{l}
			for _, f := range b.c.followers(l) {
				waitApplied(t, l, f)
				out = append(out, f)
			}
			return out
		},
	})
}

// waitApplied waits until f has applied every command l had applied when
// it was called.
func waitApplied(t testing.TB, l, f *Node) {
	t.Helper()
	want, err := l.fsm.applied()
	if err != nil {
		t.Fatalf("%s: applied index: %v", l.id, err)
	}
	waittest.For(t, waitFor, fmt.Sprintf("%s to apply up to index %d", f.id, want), func() (bool, string) {
		got, err := f.fsm.applied()
		return err == nil && got >= want, fmt.Sprintf("applied %d, %v", got, err)
	})
}

// --- ports.OpStore through the leader ------------------------------------------

// Put runs on the leader, and again on the next one when its node lost the
// leadership meanwhile. The first attempt may have committed all the same:
// a change the repeat reports as not applied whose row is now exactly what
// the change makes is counted as applied by that attempt, as a caller that
// reads the row back would find.
func (b *leaderBuffer) Put(ctx context.Context, changes []ports.OpChange) (applied []bool, err error) {
	attempts := 0
	err = b.write(ctx, func(n *Node) error {
		attempts++
		applied, err = n.Put(ctx, changes)
		return err
	})
	if err != nil || attempts == 1 {
		return applied, err
	}
	for i, c := range changes {
		if applied[i] {
			continue
		}
		got, gerr := b.Get(ctx, c.Op.ID)
		want := c.Op
		want.Version = got.Version
		if want.Status.Terminal() {
			want.Payload = ports.OpPayload{}
		}
		if gerr == nil && len(opstoretest.DiffOperation(want, got)) == 0 {
			b.c.t.Logf("Put repeated after a change of leader: change %d (%s) was committed by the first attempt", i, c.Op.ID)
			applied[i] = true
		}
	}
	return applied, nil
}

func (b *leaderBuffer) Purge(ctx context.Context, cutoff time.Time, limit int) (removed int, err error) {
	err = b.write(ctx, func(n *Node) error {
		removed, err = n.Purge(ctx, cutoff, limit)
		return err
	})
	return removed, err
}

func (b *leaderBuffer) Get(ctx context.Context, id string) (ports.Operation, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return ports.Operation{}, err
	}
	return n.Get(ctx, id)
}

func (b *leaderBuffer) Due(ctx context.Context, now time.Time, limit int) ([]ports.Operation, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return nil, err
	}
	return n.Due(ctx, now, limit)
}

func (b *leaderBuffer) List(ctx context.Context, f ports.OpFilter, page ports.PageRequest) (ports.OpPage, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return ports.OpPage{}, err
	}
	return n.List(ctx, f, page)
}

func (b *leaderBuffer) OpStats(ctx context.Context) (ports.OpStats, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return ports.OpStats{}, err
	}
	return n.OpStats(ctx)
}

// --- helpers -------------------------------------------------------------------

// allOps lists every operation of s, newest first, in pages of 7.
func allOps(t testing.TB, s ports.OpStore) []ports.Operation {
	t.Helper()
	var out []ports.Operation
	req := ports.PageRequest{Limit: 7}
	for {
		p, err := s.List(context.Background(), ports.OpFilter{}, req)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out
		}
		req.After = p.Next
	}
}

// diffOps describes how two lists of operations differ, "" when equal.
func diffOps(a, b []ports.Operation) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d operations against %d", len(a), len(b))
	}
	for i := range a {
		if d := opstoretest.DiffOperation(a[i], b[i]); len(d) > 0 {
			return fmt.Sprintf("operation %d (%s): %s", i, a[i].ID, strings.Join(d, "; "))
		}
	}
	return ""
}

// waitOpsReplicated waits until every running node lists the operations
// the leader l lists, every field and version alike, and reads the same
// change feed, positions and epoch alike; it returns the operations.
func (c *cluster) waitOpsReplicated(l *Node) []ports.Operation {
	c.t.Helper()
	var want []ports.Operation
	waittest.For(c.t, waitFor, "every node to hold the leader's operations", func() (bool, string) {
		want = allOps(c.t, l)
		feed := feedPositions(c.t, l)
		for _, n := range c.followers(l) {
			if d := diffOps(want, allOps(c.t, n)); d != "" {
				return false, fmt.Sprintf("%s against the leader %s: %s", n.id, l.id, d)
			}
			if got := feedPositions(c.t, n); got != feed {
				return false, fmt.Sprintf("%s's change feed:\n%s\nthe leader %s's:\n%s", n.id, got, l.id, feed)
			}
		}
		return true, ""
	})
	return want
}

// mustPut commits changes on s and fails unless every one applied.
func mustPut(t testing.TB, s ports.OpStore, changes ...ports.OpChange) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	applied, err := s.Put(ctx, changes)
	if err != nil {
		t.Fatalf("Put of %d: %v", len(changes), err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("Put: change %d (%s from %q) did not apply", i, changes[i].Op.ID, changes[i].From)
		}
	}
}

// lifecycle returns n calls made one millisecond apart and, for each, the
// change that moves it to Retrying and the one that delivers it.
func lifecycle(n int) (ops []ports.Operation, retry, deliver []ports.OpChange) {
	for i := range n {
		op := opstoretest.NewCall(opstoretest.BaseTime.Add(time.Duration(i) * time.Millisecond))
		if i%2 == 1 {
			op = opstoretest.NewWrite(op.CreatedAt)
			op.ID = opstoretest.NewID()
		}
		r := op
		r.Status, r.RetryCount, r.NextAttemptAt = ports.OpRetrying, 1, op.NextAttemptAt.Add(time.Minute)
		d := r
		d.Status, d.TerminalAt = ports.OpDelivered, op.CreatedAt.Add(time.Hour)
		ops = append(ops, op)
		retry = append(retry, opstoretest.Move(ports.OpPending, r))
		deliver = append(deliver, opstoretest.Move(ports.OpRetrying, d))
	}
	return ops, retry, deliver
}

func inserts(ops []ports.Operation) []ports.OpChange {
	out := make([]ports.OpChange, len(ops))
	for i, op := range ops {
		out[i] = opstoretest.Insert(op)
	}
	return out
}

// requireSameReads fails unless n answers Get, Due, List, OpStats and
// Changes as want does.
func requireSameReads(t *testing.T, want, n *Node, ids []string, now time.Time) {
	t.Helper()
	for _, id := range ids {
		a, errA := want.Get(t.Context(), id)
		b, errB := n.Get(t.Context(), id)
		if errors.Is(errA, ports.ErrNotFound) != errors.Is(errB, ports.ErrNotFound) {
			t.Fatalf("Get(%s): %s answers %v, %s %v", id, want.id, errA, n.id, errB)
		}
		if d := opstoretest.DiffOperation(a, b); len(d) > 0 {
			t.Fatalf("Get(%s) on %s differs from %s: %v", id, n.id, want.id, d)
		}
	}
	da, errA := want.Due(t.Context(), now, 1000)
	db, errB := n.Due(t.Context(), now, 1000)
	if errA != nil || errB != nil {
		t.Fatalf("Due: %v, %v", errA, errB)
	}
	if d := diffOps(da, db); d != "" {
		t.Fatalf("Due on %s differs from %s: %s", n.id, want.id, d)
	}
	if d := diffOps(allOps(t, want), allOps(t, n)); d != "" {
		t.Fatalf("List on %s differs from %s: %s", n.id, want.id, d)
	}
	if a, b := feedPositions(t, want), feedPositions(t, n); a != b {
		t.Fatalf("the change feed on %s:\n%s\ndiffers from %s's:\n%s", n.id, b, want.id, a)
	}
	sa, errA := want.OpStats(t.Context())
	sb, errB := n.OpStats(t.Context())
	if errA != nil || errB != nil || !slices.Equal(sa.Kinds, sb.Kinds) {
		t.Fatalf("OpStats on %s: %+v, %v; on %s: %+v, %v", want.id, sa, errA, n.id, sb, errB)
	}
}

// --- the group -------------------------------------------------------------------

// TestOpsFollowersAnswerFromTheirOwnCopy: after Puts and a Purge on the
// leader, every follower answers Get, Due, List and OpStats as the leader
// does, from its own file; its writes are refused.
func TestOpsFollowersAnswerFromTheirOwnCopy(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	ops, retry, deliver := lifecycle(30)
	mustPut(t, l, inserts(ops)...)
	mustPut(t, l, retry[:20]...)
	mustPut(t, l, deliver[:10]...)
	if n, err := l.Purge(t.Context(), opstoretest.BaseTime.Add(time.Hour+5*time.Millisecond), 100); err != nil || n != 5 {
		t.Fatalf("Purge = %d, %v; want 5", n, err)
	}
	c.waitOpsReplicated(l)
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	for _, f := range c.followers(l) {
		requireSameReads(t, l, f, ids, opstoretest.BaseTime.Add(2*time.Minute))
		_, err := f.Put(t.Context(), []ports.OpChange{opstoretest.Insert(opstoretest.NewCall(opstoretest.BaseTime))})
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Fatalf("%s: Put on a follower: %v, want ErrUnavailable", f.id, err)
		}
		if _, err := f.Purge(t.Context(), opstoretest.BaseTime.Add(48*time.Hour), 100); !errors.Is(err, ports.ErrUnavailable) {
			t.Fatalf("%s: Purge on a follower: %v, want ErrUnavailable", f.id, err)
		}
	}
	st, err := l.OpStats(t.Context())
	if err != nil || st.Kinds[0].Backlog+st.Kinds[1].Backlog != 20 || st.Kinds[0].Terminal+st.Kinds[1].Terminal != 5 {
		t.Fatalf("OpStats = %+v, %v; want 20 buffered and 5 terminal left", st, err)
	}
}

// TestOpsLeaderStoppedLosesNothing: every Put acknowledged before the
// leader stops is on the new leader, which goes on from those rows: its
// conditional changes see them.
func TestOpsLeaderStoppedLosesNothing(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	ops, retry, deliver := lifecycle(60)
	for i := 0; i < len(ops); i += 10 {
		mustPut(t, l, inserts(ops[i:i+10])...)
	}
	mustPut(t, l, retry[:40]...)
	mustPut(t, l, deliver[:5]...)
	before := allOps(t, l)

	for i, n := range c.nodes {
		if n == l {
			c.stop(i) // no wait for the followers' copies: a quorum had each Put
		}
	}
	nl := c.leader()
	if nl.id == l.id {
		t.Fatalf("the stopped leader %s still leads", l.id)
	}
	if err := nl.barrier(t.Context()); err != nil {
		t.Fatalf("barrier on %s: %v", nl.id, err)
	}
	if d := diffOps(before, allOps(t, nl)); d != "" {
		t.Fatalf("the new leader %s lost committed operations: %s", nl.id, d)
	}
	// The new leader's conditional changes start from the committed rows:
	// the first 40 are Retrying (the change from Pending is stale), the
	// rest still Pending.
	applied, err := nl.Put(t.Context(), slices.Concat(retry[:1], retry[40:], deliver[5:40]))
	if err != nil {
		t.Fatalf("Put on the new leader: %v", err)
	}
	if applied[0] || slices.Contains(applied[1:], false) {
		t.Fatalf("Put on the new leader applied %v; want all but the first", applied)
	}
	c.waitOpsReplicated(nl)
}

// TestOpsSurviveSnapshotAndRestart: operations written before and after a
// snapshot are on every node after all restart, one of them without its
// buffer file (it restores the snapshot and replays the log after it); the
// counts and indexes come back with the rows.
func TestOpsSurviveSnapshotAndRestart(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	ops, retry, deliver := lifecycle(40)
	mustPut(t, l, inserts(ops[:30])...)
	mustPut(t, l, retry[:20]...)
	c.waitOpsReplicated(l)
	for _, n := range c.running() {
		if err := n.Snapshot(); err != nil {
			t.Fatalf("%s: Snapshot: %v", n.id, err)
		}
	}
	mustPut(t, l, inserts(ops[30:])...)
	mustPut(t, l, deliver[:10]...)
	if n, err := l.Purge(t.Context(), opstoretest.BaseTime.Add(time.Hour+3*time.Millisecond), 100); err != nil || n != 3 {
		t.Fatalf("Purge = %d, %v; want 3", n, err)
	}
	before := c.waitOpsReplicated(l)
	beforeStats, err := l.OpStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	c.closeAll()
	if err := os.Remove(filepath.Join(c.cfgs[2].Dir, bufferFile)); err != nil {
		t.Fatalf("remove buffer file: %v", err)
	}
	for i := range c.nodes {
		c.start(i)
	}
	l = c.leader()
	if d := diffOps(before, c.waitOpsReplicated(l)); d != "" {
		t.Fatalf("after a restart: %s", d)
	}
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	for _, n := range c.running() {
		requireSameReads(t, l, n, ids, opstoretest.BaseTime.Add(2*time.Minute))
		st, err := n.OpStats(t.Context())
		if err != nil || !slices.Equal(st.Kinds, beforeStats.Kinds) {
			t.Fatalf("%s: OpStats after the restart %+v, %v; before %+v", n.id, st, err, beforeStats)
		}
	}
	// Versions go on from the restored rows.
	mustPut(t, l, deliver[10:20]...)
	got, err := l.Get(t.Context(), ops[15].ID)
	if err != nil || got.Version != 3 || got.Status != ports.OpDelivered {
		t.Fatalf("Get after the restart = %+v, %v; want Delivered, version 3", got, err)
	}
}

// TestOpsLaggingFollowerCatchesUpFromSnapshot: a follower stopped while
// operations were written and the log compacted gets them by snapshot.
func TestOpsLaggingFollowerCatchesUpFromSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TrailingLogs = 2
		cfg.SnapshotThreshold = 1 << 30
	})
	l := c.leader()
	ops, retry, _ := lifecycle(30)
	mustPut(t, l, inserts(ops[:5])...)
	c.waitOpsReplicated(l)
	lagIdx := slices.Index(c.nodes, c.followers(l)[0])
	c.stop(lagIdx)
	for i := 5; i < 30; i += 5 {
		mustPut(t, l, inserts(ops[i:i+5])...)
	}
	mustPut(t, l, retry...)
	if err := l.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	back := c.start(lagIdx)
	c.waitOpsReplicated(l)
	// raft records the installed snapshot just after the FSM restored it:
	// the follower may already hold the rows, not yet the record.
	waittest.For(t, waitFor, "the follower to have installed a snapshot", func() (bool, string) {
		got := back.raft.Stats()["last_snapshot_index"]
		return got != "0" && got != "", "last_snapshot_index " + got
	})
	requireSameReads(t, l, back, nil, opstoretest.BaseTime.Add(time.Hour))
}

// TestOpsBounds: a payload over 1 MiB, or other text over 64 KiB, is
// refused before anything is committed; a payload of exactly 1 MiB is
// kept; many changes larger together than one log entry are split and
// all apply in order.
func TestOpsBounds(t *testing.T) {
	l := newCluster(t, 1).leader()
	big := opstoretest.NewWrite(opstoretest.BaseTime)
	big.Payload.Args = nil
	big.Payload.SQL = strings.Repeat("x", maxOpPayload)
	over := opstoretest.NewCall(opstoretest.BaseTime)
	over.Payload.Params = []byte(`"` + strings.Repeat("y", maxOpPayload-1) + `"`)
	longText := opstoretest.NewCall(opstoretest.BaseTime)
	longText.LastError = strings.Repeat("e", maxOpText)
	badUTF8 := opstoretest.NewWrite(opstoretest.BaseTime)
	badUTF8.Payload.SQL = "SELECT '\xff'"
	longID := opstoretest.NewCall(opstoretest.BaseTime)
	longID.ID = strings.Repeat("i", maxIDLen+1)
	for name, bad := range map[string]ports.Operation{"payload": over, "text": longText, "utf-8": badUTF8, "id": longID} {
		_, err := l.Put(t.Context(), []ports.OpChange{opstoretest.Insert(big), opstoretest.Insert(bad)})
		if !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("Put with an oversize or invalid %s: %v, want ErrInvalid", name, err)
		}
		if _, err := l.Get(t.Context(), big.ID); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("a Put refused for its %s stored the other change: %v", name, err)
		}
	}
	mustPut(t, l, opstoretest.Insert(big))
	if got, err := l.Get(t.Context(), big.ID); err != nil || got.Payload.SQL != big.Payload.SQL {
		t.Fatalf("a payload of exactly %d bytes did not round-trip: %v", maxOpPayload, err)
	}

	// Five rows of 400 KiB each, then their moves, in one Put: more than
	// one log entry.
	var changes []ports.OpChange
	var moves []ports.OpChange
	for range 5 {
		op := opstoretest.NewCall(opstoretest.BaseTime)
		op.Payload.Params = []byte(`"` + strings.Repeat("p", 400<<10) + `"`)
		changes = append(changes, opstoretest.Insert(op))
		op.Status = ports.OpRetrying
		moves = append(moves, opstoretest.Move(ports.OpPending, op))
	}
	before, _ := l.fsm.applied()
	mustPut(t, l, append(changes, moves...)...)
	after, _ := l.fsm.applied()
	if after-before < 3 {
		t.Fatalf("a Put of 4 MiB went in %d log entries, want several", after-before)
	}
	for _, m := range moves {
		if got, err := l.Get(t.Context(), m.Op.ID); err != nil || got.Version != 2 || got.Status != ports.OpRetrying {
			t.Fatalf("Get(%s) = %s v%d, %v; want Retrying v2", m.Op.ID, got.Status, got.Version, err)
		}
	}
}

func (b *leaderBuffer) Changes(ctx context.Context, after string, limit int) (ports.OpChanges, error) {
	n, _, err := b.node(ctx)
	if err != nil {
		return ports.OpChanges{}, err
	}
	return n.Changes(ctx, after, limit)
}

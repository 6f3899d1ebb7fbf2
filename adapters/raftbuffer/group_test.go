package raftbuffer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/waittest"
)

func TestFollowersReplicate(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 100)
	mustAppend(t, l, ns[:60]...)
	mustAppend(t, l, ns[60:]...)
	if err := l.Remove(t.Context(), ids(ns[:10])); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	want := c.waitReplicated(l)
	if len(want) != 90 {
		t.Fatalf("the leader holds %d notifications, want 90", len(want))
	}
	for _, f := range c.followers(l) {
		got, err := f.Contains(t.Context(), ids(ns))
		if err != nil {
			t.Fatalf("%s: Contains: %v", f.id, err)
		}
		if len(got) != 90 || got[ns[0].ID] || !got[ns[99].ID] {
			t.Fatalf("%s: Contains finds %d of the 90 buffered ids", f.id, len(got))
		}
		st, err := f.Stats(t.Context())
		if err != nil {
			t.Fatalf("%s: Stats: %v", f.id, err)
		}
		if st.Count != 90 || !st.OldestEnqueuedAt.Equal(ns[10].SiteEnqueuedAt) {
			t.Fatalf("%s: Stats = %d, oldest %s; want 90, %s", f.id, st.Count, st.OldestEnqueuedAt, ns[10].SiteEnqueuedAt)
		}
		if st.Replica.Role != ports.RoleFollower || st.Replica.Leader != l.id || st.Replica.Node != f.id {
			t.Fatalf("%s: Replica = %+v, want a follower of %s", f.id, st.Replica, l.id)
		}
	}
}

func TestFollowerWritesAreRefused(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	f := c.followers(l)[0]
	kept := buffertest.NewSubmission(buffertest.BaseTime)
	mustAppend(t, l, kept)
	c.waitReplicated(l)

	refused := buffertest.NewSubmissions(buffertest.BaseTime, 3)
	err := f.Append(t.Context(), refused)
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Append on a follower: err = %v, want one wrapping ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), `"`+l.id+`"`) {
		t.Errorf("the follower's refusal does not name the leader %s: %v", l.id, err)
	}
	if err := f.Remove(t.Context(), []string{kept.ID}); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Remove on a follower: err = %v, want one wrapping ErrUnavailable", err)
	}

	// An entry the leader appends after the refusal reaches every node; had
	// the follower's writes entered the log, they would be there before it.
	marker := buffertest.NewSubmission(buffertest.BaseTime)
	mustAppend(t, l, marker)
	c.waitReplicated(l)
	for _, n := range c.running() {
		requireContents(t, n.id, n, []ports.Submission{kept, marker})
	}
}

func TestRestartKeepsTheBuffer(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	a := buffertest.NewSubmissions(buffertest.BaseTime, 50)
	mustAppend(t, l, a...)
	c.waitReplicated(l)
	for _, n := range c.running() {
		if err := n.Snapshot(); err != nil {
			t.Fatalf("%s: Snapshot: %v", n.id, err)
		}
	}
	// After the snapshot: more entries, and removals of some from before.
	b := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Hour), 30)
	mustAppend(t, l, b[:15]...)
	mustAppend(t, l, b[15:]...)
	if err := l.Remove(t.Context(), ids(a[:20])); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	// One appended and removed after the snapshot: applied a second time on
	// restart it would take a new Seq, and the nodes' Seqs would part.
	x := buffertest.NewSubmission(buffertest.BaseTime)
	mustAppend(t, l, x)
	if err := l.Remove(t.Context(), []string{x.ID}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	before := c.waitReplicated(l)

	c.closeAll()
	// One node loses its buffer file: it must come back from the snapshot
	// and the log after it.
	if err := os.Remove(filepath.Join(c.cfgs[2].Dir, bufferFile)); err != nil {
		t.Fatalf("remove buffer file: %v", err)
	}
	for i := range c.nodes {
		c.start(i)
	}
	for i, n := range c.nodes {
		if want := i != 2; n.restoreSkipped != want {
			t.Errorf("%s: snapshot restore skipped at start = %v, want %v", n.id, n.restoreSkipped, want)
		}
	}
	l = c.leader()
	after := c.waitReplicated(l)
	if !sameContents(before, after) {
		t.Fatalf("after a restart the buffer holds %d notifications (%d before) or different ones", len(after), len(before))
	}
	want := append(append([]ports.Submission{}, a[20:]...), b...)
	for _, n := range c.running() {
		requireContents(t, n.id, n, want)
		st, err := n.Stats(t.Context())
		if err != nil || st.Count != int64(len(want)) {
			t.Fatalf("%s: Stats = %+v, %v; want Count %d", n.id, st, err, len(want))
		}
	}

	// Seq goes on from where it was, the same on every node.
	d := buffertest.NewSubmission(buffertest.BaseTime)
	mustAppend(t, l, d)
	got := c.waitReplicated(l)
	if last := got[len(got)-1]; last.ID != d.ID || last.Seq <= before[len(before)-1].Seq {
		t.Fatalf("after a restart a new notification got Seq %d, not above %d", last.Seq, before[len(before)-1].Seq)
	}
}

func TestLaggingFollowerCatchesUpFromSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TrailingLogs = 2
		cfg.SnapshotThreshold = 1 << 30 // only the test's Snapshot
	})
	l := c.leader()
	first := buffertest.NewSubmissions(buffertest.BaseTime, 5)
	mustAppend(t, l, first...)
	c.waitReplicated(l)

	lag := c.followers(l)[0]
	lagIdx := 0
	for i, n := range c.nodes {
		if n == lag {
			lagIdx = i
		}
	}
	lagLast := lag.raft.LastIndex()
	c.stop(lagIdx)

	var more []ports.Submission
	for i := range 20 {
		ns := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Duration(i)*time.Minute), 5)
		mustAppend(t, l, ns...)
		more = append(more, ns...)
	}
	if err := l.Remove(t.Context(), ids(first[:2])); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := l.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	firstIdx, err := l.store.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	if firstIdx <= lagLast+1 {
		t.Fatalf("the leader's log still starts at %d, the stopped follower ends at %d: no snapshot needed", firstIdx, lagLast)
	}

	back := c.start(lagIdx)
	c.waitReplicated(l)
	requireContents(t, back.id, back, append(append([]ports.Submission{}, first[2:]...), more...))
	if got := back.raft.Stats()["last_snapshot_index"]; got == "0" || got == "" {
		t.Fatalf("the follower caught up without installing a snapshot (last_snapshot_index %q)", got)
	}
}

func TestLeaderKilledNewLeaderHasEverything(t *testing.T) {
	c := newCluster(t, 3)

	// Lead runs on every node and reports each term it leads.
	type led struct {
		node string
		term uint64
	}
	ledCh := make(chan led, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, n := range c.running() {
		wg.Go(func() {
			n.Lead(ctx, func(ctx context.Context) {
				// The barrier ran: the buffer holds everything committed.
				ledCh <- led{n.id, n.raft.CurrentTerm()}
				<-ctx.Done()
			})
		})
	}

	l := c.leader()
	first := recvLed(t, ledCh)
	if first.node != l.id {
		t.Fatalf("Lead ran on %s, the leader is %s", first.node, l.id)
	}
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 200)
	for i := 0; i < len(ns); i += 20 {
		mustAppend(t, l, ns[i:i+20]...)
	}

	for i, n := range c.nodes {
		if n == l {
			c.stop(i)
		}
	}
	nl := c.leader()
	if nl.id == l.id {
		t.Fatalf("the stopped leader %s still leads", l.id)
	}
	second := recvLed(t, ledCh)
	if second.node != nl.id || second.term <= first.term {
		t.Fatalf("Lead ran on %s in term %d after the failover; want %s in a term above %d",
			second.node, second.term, nl.id, first.term)
	}
	requireContents(t, nl.id, nl, ns)
	more := buffertest.NewSubmission(buffertest.BaseTime)
	mustAppend(t, nl, more)
	c.waitReplicated(nl)
}

// recvLed waits for the next term a Lead fn started in.
func recvLed[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("Lead's fn did not run within %s", waitFor)
	}
	var zero T
	return zero
}

func TestLeadStopsWhenLeadershipEnds(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	started := make(chan struct{}, 1)
	ended := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		l.Lead(ctx, func(ctx context.Context) {
			started <- struct{}{}
			<-ctx.Done()
			close(ended)
		})
	}()
	recvLed(t, started)

	// Hand leadership to another node: fn's context ends.
	waittest.For(t, waitFor, "leadership to move away from "+l.id, waittest.Holds(func() bool {
		if l.raft.State() == raft.Leader {
			_ = l.raft.LeadershipTransfer().Error() // retried until it takes
		}
		return l.raft.State() != raft.Leader
	}))
	recvLed(t, ended)
	cancel()
	recvLed(t, returned)
}

func TestWaitLeaderEndsWithContext(t *testing.T) {
	// One node of a group of two never finds a leader on its own.
	c := newCluster(t, 2)
	c.leader()
	c.stop(1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// It may still believe in the old leader for a moment; wait until it
	// knows it has none.
	n := c.nodes[0]
	waittest.For(t, waitFor, "the lone node to lose its leader", waittest.Holds(func() bool { id, _ := n.Leader(); return id == "" }))
	if _, err := n.WaitLeader(ctx); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("WaitLeader without a quorum: err = %v, want ErrUnavailable", err)
	}
}

// TestCloseWhileAppending: a node closed while callers are appending
// answers every Append (done or refused) and Close returns. With raft's
// buffered apply queue an Append queued just as raft shut down was never
// answered, and Close waited for it for ever (seen once in CI, in a site
// process's exit); the window is narrow, and this test runs into it only
// now and then when the queue is buffered.
func TestCloseWhileAppending(t *testing.T) {
	for round := range 5 {
		c := newCluster(t, 1)
		l := c.leader()
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var stopOnce sync.Once
		halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
		t.Cleanup(halt) // a failed round stops its appenders too
		for range 32 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_ = l.Append(ctx, buffertest.NewSubmissions(buffertest.BaseTime, 1))
					cancel()
				}
			})
		}
		mustAppend(t, l, buffertest.NewSubmission(buffertest.BaseTime))
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("round %d: Close did not return within a minute of appends racing it", round)
		}
		halt()
		c.nodes[0] = nil
	}
}

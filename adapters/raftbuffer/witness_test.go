package raftbuffer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/waittest"
)

func TestWitnessHandsLeadershipOver(t *testing.T) {
	c := newCluster(t, 3, func(i int, cfg *Config) {
		if i == 2 {
			cfg.Peers[2].Witness = true
		}
	})
	w := c.nodes[2]
	if !w.witness || c.nodes[0].witness {
		t.Fatalf("the witness flag did not reach the nodes")
	}
	// Lead on the witness must not run fn in a term it hands over.
	var ran atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Lead(ctx, func(context.Context) { ran.Add(1) })
	}()
	t.Cleanup(func() { cancel(); <-done })

	// A data node leads (a witness elected first hands over), and the
	// witness replicates like any node.
	var l *Node
	waittest.For(t, waitFor, "a data node to lead", waittest.Holds(func() bool { l = c.leader(); return l != w }))
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 10)
	mustAppend(t, l, ns...)
	c.waitReplicated(l)

	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		s, ok := o.Data.(raft.RaftState)
		return ok && s == raft.Leader
	})
	w.raft.RegisterObserver(observer)
	defer w.raft.DeregisterObserver(observer)

	// Force leadership onto the witness, retrying until it takes.
	became := false
	waittest.For(t, waitFor, "the witness to become leader", waittest.Holds(func() bool {
		select {
		case <-obs:
			became = true
			return true
		default:
		}
		if cur := c.leader(); cur != w {
			_ = cur.raft.LeadershipTransferToServer(raft.ServerID(w.id), raft.ServerAddress(w.cfg.Peers[2].Address)).Error()
		}
		return false
	}))
	if !became {
		t.Fatal("the witness never led")
	}
	// It hands leadership on to a data node.
	waittest.For(t, waitFor, "a data node to lead again", waittest.Holds(func() bool {
		id, _ := c.nodes[0].Leader()
		return (id == "n1" || id == "n2") && w.raft.State() != raft.Leader
	}))
	nl := c.leader()
	if nl == w {
		t.Fatalf("the witness still leads")
	}
	more := buffertest.NewSubmissions(buffertest.BaseTime, 3)
	mustAppend(t, nl, more...)
	c.waitReplicated(nl)
	if n := ran.Load(); n != 0 {
		t.Fatalf("Lead's fn ran %d times on the witness, which handed every term over", n)
	}
}

func TestRecoverLonePairSurvivor(t *testing.T) {
	c := newCluster(t, 2)
	l := c.leader()
	a := buffertest.NewSubmissions(buffertest.BaseTime, 25)
	mustAppend(t, l, a...)
	c.waitReplicated(l)
	if err := l.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	b := buffertest.NewSubmissions(buffertest.BaseTime.Add(1), 5)
	mustAppend(t, l, b...)
	c.waitReplicated(l)

	// n2 is lost for good; n1 alone has no quorum.
	c.stop(1)
	n1 := c.nodes[0]
	waittest.For(t, waitFor, "n1 to stop leading without a quorum", waittest.Holds(func() bool { return n1.raft.State() != raft.Leader }))
	if err := n1.Append(t.Context(), buffertest.NewSubmissions(buffertest.BaseTime, 1)); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Append without a quorum: err = %v, want ErrUnavailable", err)
	}
	c.stop(0)

	if err := Recover(c.cfgs[0]); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	n1 = c.start(0)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	id, err := n1.WaitLeader(ctx)
	if err != nil || id != "n1" {
		t.Fatalf("WaitLeader after Recover = %q, %v; want n1", id, err)
	}
	waittest.For(t, waitFor, "n1 to know it leads", waittest.Holds(func() bool { return n1.raft.State() == raft.Leader }))
	d := buffertest.NewSubmissions(buffertest.BaseTime.Add(2), 3)
	mustAppend(t, n1, d...)
	requireContents(t, "n1", n1, append(append(append([]ports.Submission{}, a...), b...), d...))
}

func TestRecoverRefusesANodeWithoutState(t *testing.T) {
	cfg := Config{NodeID: "n1", Dir: t.TempDir(), Bind: "127.0.0.1:0", Peers: []Peer{{ID: "n1", Address: "127.0.0.1:7001"}}}
	if err := Recover(cfg); err == nil {
		t.Fatal("Recover of an empty directory succeeded")
	}
}

// TestWitnessHandsOverToTheLiveDataNode: with n1 dead, a witness that
// leads must hand over to n2, not keep trying the dead n1 (which raft's own
// LeadershipTransfer may pick: n1 is first and, to a new leader, as up to
// date as n2).
func TestWitnessHandsOverToTheLiveDataNode(t *testing.T) {
	c := newCluster(t, 3, func(i int, cfg *Config) {
		if i == 2 {
			cfg.Peers[2].Witness = true
		}
	})
	w := c.nodes[2]
	var l *Node
	waittest.For(t, waitFor, "a data node to lead", waittest.Holds(func() bool { l = c.leader(); return l != w }))
	// Make n2 the leader, then lose n1 for good.
	if l == c.nodes[0] {
		if err := l.raft.LeadershipTransferToServer("n2", raft.ServerAddress(c.cfgs[1].Peers[1].Address)).Error(); err != nil {
			t.Fatalf("transfer to n2: %v", err)
		}
	}
	waittest.For(t, waitFor, "n2 to lead", waittest.Holds(func() bool { return c.nodes[1].raft.State() == raft.Leader }))
	mustAppend(t, c.nodes[1], buffertest.NewSubmissions(buffertest.BaseTime, 5)...)
	c.stop(0)
	n2 := c.nodes[1]
	waittest.For(t, waitFor, "the witness to take leadership", waittest.Holds(func() bool {
		if w.raft.State() == raft.Leader {
			return true
		}
		if n2.raft.State() == raft.Leader {
			_ = n2.raft.LeadershipTransferToServer(raft.ServerID(w.id), raft.ServerAddress(w.cfg.Peers[2].Address)).Error()
		}
		return false
	}))
	// In the witness's first hand-over round (each dead candidate costs an
	// election timeout), not after a retry, n2 leads.
	waittest.For(t, 10*time.Second, "n2 to lead after the witness took over", func() (bool, string) {
		return n2.raft.State() == raft.Leader, fmt.Sprintf("n2 is %s, the witness %s", n2.raft.State(), w.raft.State())
	})
	mustAppend(t, n2, buffertest.NewSubmissions(buffertest.BaseTime.Add(1), 2)...)
}

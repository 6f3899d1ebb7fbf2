package raftbuffer

import (
	"reflect"
	"testing"
)

// TestEndWithNodeSetsTheFuturesShutdown: an Apply's future waits on the
// node's stop as well as on raft's answer, so that a command raft accepted
// but never answers (raft shut down with it in its FSM's queue) ends when
// the node stops rather than holding Close for ever. The field is raft's:
// an upgrade of raft that renames or drops it fails here.
func TestEndWithNodeSetsTheFuturesShutdown(t *testing.T) {
	c := newCluster(t, 1)
	l := c.leader()
	n := &Node{stop: make(chan struct{})}
	f := l.raft.Apply(nil, 0)
	n.endWithNode(f)
	ch := reflect.ValueOf(f).Elem().FieldByName("ShutdownCh")
	if !ch.IsValid() || ch.Pointer() != reflect.ValueOf(n.stop).Pointer() {
		t.Fatalf("the Apply future's ShutdownCh is not the node's stop (%v)", ch)
	}
	_ = f.Error()
}

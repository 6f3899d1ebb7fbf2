package raftbuffer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/waittest"
)

// TestUnsyncedBufferAfterARestart: buffer.db is written unsynced with a
// marker naming the boot beside it; a clean close syncs it and removes the
// marker. At the next start a file marked in this boot (a process killed,
// its writes in the page cache) is trusted as it is, and a file marked in
// another boot (the machine lost power) is set aside, even when it reads
// well, and rebuilt from the snapshot and the log: every node ends with the
// same buffer as before.
func TestUnsyncedBufferAfterARestart(t *testing.T) {
	boot := bootID()
	if boot == "" {
		t.Skip("this kernel gives no boot id: buffer.db is synced on every transaction here")
	}
	c := newCluster(t, 3)
	l := c.leader()
	for i, n := range c.running() {
		mark, err := os.ReadFile(filepath.Join(c.cfgs[i].Dir, bufferFile+unsyncedSuffix))
		if err != nil || string(mark) != boot+"\n" {
			t.Fatalf("%s: marker while open = %q, %v; want this boot's id", n.id, mark, err)
		}
		if !n.fsm.db.NoSync {
			t.Fatalf("%s: buffer.db is synced on every transaction", n.id)
		}
	}
	a := buffertest.NewSubmissions(buffertest.BaseTime, 50)
	mustAppend(t, l, a...)
	c.waitReplicated(l)
	for _, n := range c.running() {
		if err := n.Snapshot(); err != nil {
			t.Fatalf("%s: Snapshot: %v", n.id, err)
		}
	}
	b := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Hour), 30)
	mustAppend(t, l, b...)
	if err := l.Remove(t.Context(), ids(a[:20])); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	before := c.waitReplicated(l)
	c.closeAll()
	for i := range c.nodes {
		if _, err := os.Stat(filepath.Join(c.cfgs[i].Dir, bufferFile+unsyncedSuffix)); !os.IsNotExist(err) {
			t.Fatalf("%s: the marker outlived a clean close: %v", c.cfgs[i].NodeID, err)
		}
	}

	// Node 2's process was killed in this boot; node 3's machine lost power.
	writeMark := func(i int, boot string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(c.cfgs[i].Dir, bufferFile+unsyncedSuffix), []byte(boot+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeMark(1, boot)
	writeMark(2, "another-boot")
	for i := range c.nodes {
		c.start(i)
	}
	for i, n := range c.nodes {
		waittest.For(t, 30*time.Second, n.id+" answering reads", func() (bool, string) {
			_, err := n.Scan(t.Context(), 0, 1)
			return err == nil, fmt.Sprint(err)
		})
		_, err := os.Stat(filepath.Join(c.cfgs[i].Dir, bufferFile+untrustedSuffix))
		if aside := err == nil; aside != (i == 2) || n.restoreSkipped != (i != 2) {
			t.Errorf("%s: set aside %v, snapshot restore skipped %v", n.id, aside, n.restoreSkipped)
		}
	}
	l = c.leader()
	if after := c.waitReplicated(l); !sameContents(before, after) {
		t.Fatalf("after the restart the buffer holds %d notifications (%d before) or different ones", len(after), len(before))
	}
	want := append(append([]ports.Submission{}, a[20:]...), b...)
	for _, n := range c.running() {
		requireContents(t, n.id, n, want)
	}
}

// TestSyncedBufferWithoutABootID: where the kernel gives no boot id,
// buffer.db is synced on every transaction and no marker is written.
func TestSyncedBufferWithoutABootID(t *testing.T) {
	old := bootID
	bootID = func() string { return "" }
	t.Cleanup(func() { bootID = old })
	c := newCluster(t, 1)
	l := c.leader()
	mustAppend(t, l, buffertest.NewSubmissions(buffertest.BaseTime, 3)...)
	if l.fsm.db.NoSync {
		t.Fatal("buffer.db is written unsynced without a boot id")
	}
	if _, err := os.Stat(filepath.Join(c.cfgs[0].Dir, bufferFile+unsyncedSuffix)); !os.IsNotExist(err) {
		t.Fatalf("a marker was written without a boot id: %v", err)
	}
}

// TestRebuiltNodeAnswersOnlyOnceCaughtUp: after the whole group lost power,
// every node rebuilds from an old snapshot. A node alone (no quorum, so no
// way to apply its log) refuses reads with ErrUnavailable instead of
// answering the snapshot's old state; once the group is back, the first
// moment a node Leads its copy holds everything committed, and every
// node's reads answer it.
func TestRebuiltNodeAnswersOnlyOnceCaughtUp(t *testing.T) {
	if bootID() == "" {
		t.Skip("this kernel gives no boot id: buffer.db is synced on every transaction here")
	}
	c := newCluster(t, 3)
	l := c.leader()
	old := buffertest.NewSubmissions(buffertest.BaseTime, 10)
	mustAppend(t, l, old...)
	c.waitReplicated(l)
	for _, n := range c.running() {
		if err := n.Snapshot(); err != nil {
			t.Fatalf("%s: Snapshot: %v", n.id, err)
		}
	}
	recent := buffertest.NewSubmissions(buffertest.BaseTime.Add(time.Hour), 200)
	for i := range recent {
		mustAppend(t, l, recent[i])
	}
	before := c.waitReplicated(l)
	c.closeAll()
	for i := range c.nodes {
		if err := os.WriteFile(filepath.Join(c.cfgs[i].Dir, bufferFile+unsyncedSuffix), []byte("another-boot\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	alone := c.start(2)
	if _, err := alone.Scan(t.Context(), 0, 1000); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("a rebuilt node alone: Scan = %v, want ErrUnavailable", err)
	}
	if _, err := alone.Get(t.Context(), "x"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("a rebuilt node alone: Get = %v, want ErrUnavailable", err)
	}

	c.start(0)
	c.start(1)
	var leader *Node
	waittest.For(t, 30*time.Second, "a node that Leads", func() (bool, string) {
		for _, n := range c.running() {
			if n.Leads() {
				leader = n
				return true, ""
			}
		}
		return false, "no node leads"
	})
	if got := contents(t, leader); !sameContents(before, got) {
		t.Fatalf("at the first moment %s Leads it holds %d notifications, want %d", leader.id, len(got), len(before))
	}
	for _, n := range c.running() {
		waittest.For(t, 30*time.Second, n.id+" answering reads", func() (bool, string) {
			_, err := n.Scan(t.Context(), 0, 1)
			return err == nil, fmt.Sprint(err)
		})
		requireContents(t, n.id, n, append(append([]ports.Submission{}, old...), recent...))
	}
}

// TestFailedSyncAtCloseSetsTheFileAside: a marker whose last sync failed
// matches no boot, so the next start sets the file aside even in the same
// boot.
func TestFailedSyncAtCloseSetsTheFileAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, bufferFile)
	if err := os.WriteFile(path, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := markUnsynced(path, syncFailed); err != nil {
		t.Fatal(err)
	}
	aside, err := setAsideTorn(path, testLogger())
	if err != nil || !aside {
		t.Fatalf("setAsideTorn after a failed sync = %v, %v; want set aside", aside, err)
	}
	if _, err := os.Stat(path + untrustedSuffix); err != nil {
		t.Fatalf("no %s: %v", untrustedSuffix, err)
	}
}

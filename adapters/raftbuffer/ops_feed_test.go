package raftbuffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/opstoretest"
)

// feedPositions lists s's change feed, read in pages of 3, as one line per
// item: its position, id and version; then the epoch.
func feedPositions(t testing.TB, s ports.OpStore) string {
	t.Helper()
	var b strings.Builder
	after, epoch := "", ""
	for {
		c, err := s.Changes(t.Context(), after, 3)
		if err != nil {
			t.Fatalf("Changes: %v", err)
		}
		epoch = c.Epoch
		if len(c.Items) == 0 {
			break
		}
		for _, op := range c.Items {
			fmt.Fprintf(&b, "%s@v%d ", op.ID, op.Version)
		}
		fmt.Fprintf(&b, "| %s\n", c.Next)
		after = c.Next
	}
	fmt.Fprintf(&b, "epoch %q", epoch)
	return b.String()
}

// fsmFeed lists an FSM's feed as (index, id) pairs and its epoch.
func fsmFeed(t *testing.T, f *fsm) (entries []string, epoch string) {
	t.Helper()
	c, err := f.changes(nil, 100000)
	if err != nil {
		t.Fatalf("changes: %v", err)
	}
	var after []byte
	for _, op := range c.Items {
		var idx uint64
		if err := f.view(func(tx *bbolt.Tx) error {
			idx = getUint(tx.Bucket(bucketOpsChanged), idKey(op.ID))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		k := feedKey(idx, op.ID)
		if after != nil && bytes.Compare(k, after) <= 0 {
			t.Fatalf("feed item %s at index %d is not after the one before", op.ID, idx)
		}
		after = k
		entries = append(entries, fmt.Sprintf("%d/%s", idx, op.ID))
	}
	return entries, c.Epoch
}

// checkFeedConsistent verifies, inside tx, that every stored operation has
// exactly one feed entry, at the index ops_changed holds for it (0 when
// none), and that every feed entry names a stored operation.
func checkFeedConsistent(tx *bbolt.Tx) error {
	changes, changed := tx.Bucket(bucketOpsChanges), tx.Bucket(bucketOpsChanged)
	rows := 0
	err := tx.Bucket(bucketOps).ForEach(func(k, _ []byte) error {
		rows++
		id, err := idFromKey(k)
		if err != nil {
			return err
		}
		v := changed.Get(k)
		if v != nil && (len(v) != 8 || binary.BigEndian.Uint64(v) == 0) {
			return fmt.Errorf("operation %s has index %x in ops_changed", id, v)
		}
		if changes.Get(feedKey(getUint(changed, k), id)) == nil {
			return fmt.Errorf("operation %s has no feed entry at its index %d", id, getUint(changed, k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := changes.Stats().KeyN; n != rows {
		return fmt.Errorf("the feed holds %d entries for %d operations", n, rows)
	}
	return changed.ForEach(func(k, _ []byte) error {
		if tx.Bucket(bucketOps).Get(k) == nil {
			return fmt.Errorf("ops_changed holds %x, which is not stored", k)
		}
		return nil
	})
}

// stripFeed makes f's file what a version before the feed wrote: no feed
// buckets, no feed marker or epoch in meta; then reopens it, which
// upgrades it.
func stripFeed(t *testing.T, f *fsm) {
	t.Helper()
	err := f.db.Update(func(tx *bbolt.Tx) error {
		for _, b := range feedBuckets {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		return errors.Join(m.Delete(keyFeed), m.Delete(keyEpoch))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	db, err := openBufferDB(f.path)
	if err != nil {
		t.Fatalf("reopen the stripped file: %v", err)
	}
	f.mu.Lock()
	f.db = db
	f.mu.Unlock()
}

// putOpsLog is a PutOps log entry at index; oldLeader leaves out the feed
// nonce, as a leader of a version before the feed wrote it.
func putOpsLog(t *testing.T, index uint64, oldLeader bool, cs ...ports.OpChange) *raft.Log {
	t.Helper()
	changes := make([]*pb.OpChange, len(cs))
	for i, c := range cs {
		changes[i] = &pb.OpChange{From: string(c.From), Op: opToPB(c.Op)}
	}
	data, err := encodePutOps(changes)
	if oldLeader {
		data, err = encode(cmdPutOps, &pb.PutOps{Changes: changes})
	}
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// TestFeedUpgradeIsDeterministic: two nodes of a group upgraded at
// different points of the log end with the same feed. Node a is upgraded
// before the entry that an old leader wrote, node b after it (it applied
// that entry without a feed); the upgrade gives every row index 0, a
// change written by an old leader keeps index 0, and the first change
// written by an upgraded leader takes its index and fixes the epoch.
func TestFeedUpgradeIsDeterministic(t *testing.T) {
	ops, retry, deliver := lifecycle(6)
	first := putOpsLog(t, 1, true, inserts(ops)...)
	oldLeader := putOpsLog(t, 2, true, retry[0], retry[1])
	newLeader := putOpsLog(t, 3, false, retry[2], deliver[0])

	a, b := newTestFSM(t), newTestFSM(t)
	applyOK(t, a, first)
	stripFeed(t, a)
	applyOK(t, a, oldLeader)
	applyOK(t, b, first, oldLeader)
	stripFeed(t, b)

	for _, f := range []*fsm{a, b} {
		got, epoch := fsmFeed(t, f)
		if len(got) != 6 || epoch != "" {
			t.Fatalf("an upgraded file's feed: %v, epoch %q; want the 6 rows at index 0, no epoch", got, epoch)
		}
		for _, e := range got {
			if !strings.HasPrefix(e, "0/") {
				t.Fatalf("an upgraded file's row %s has a position", e)
			}
		}
	}
	applyOK(t, a, newLeader)
	applyOK(t, b, newLeader)
	ga, ea := fsmFeed(t, a)
	gb, eb := fsmFeed(t, b)
	if strings.Join(ga, " ") != strings.Join(gb, " ") || ea != eb || ea == "" {
		t.Fatalf("two nodes upgraded at different points differ:\n%v epoch %q\n%v epoch %q", ga, ea, gb, eb)
	}
	// Rows 2 (retried) and 0 (delivered) moved to index 3, after the four
	// left at 0, in id order.
	for i, e := range ga {
		atThree := strings.HasPrefix(e, "3/")
		if atThree != (i >= 4) {
			t.Fatalf("feed %v: entry %d is %s", ga, i, e)
		}
	}
	for _, f := range []*fsm{a, b} {
		if err := f.view(checkOpsConsistent); err != nil {
			t.Fatal(err)
		}
	}
}

// applyOK applies logs one by one and fails on an error answer.
func applyOK(t *testing.T, f *fsm, logs ...*raft.Log) {
	t.Helper()
	for _, l := range logs {
		if err, ok := f.Apply(l).(error); ok {
			t.Fatalf("entry %d: %v", l.Index, err)
		}
	}
}

// TestFeedPositionsAreLogIndexes: a change's position is the index of the
// log entry that made it; a row's earlier entry goes when it changes
// again or is purged; the epoch is the nonce of the first command that
// stored a row and nothing later moves it.
func TestFeedPositionsAreLogIndexes(t *testing.T) {
	ops, retry, deliver := lifecycle(4)
	f := newTestFSM(t)
	applyOK(t, f, &raft.Log{Index: 1, Term: 1, Type: raft.LogNoop})
	l2 := putOpsLog(t, 7, false, inserts(ops)...)
	applyOK(t, f, l2)
	cmd, err := decodeCommand(l2.Data)
	if err != nil {
		t.Fatal(err)
	}
	_, epoch := fsmFeed(t, f)
	if want := fmt.Sprintf("%x", cmd.putOps.GetFeedNonce()); epoch != want || len(epoch) != 32 {
		t.Fatalf("epoch %q, want the first command's nonce %s", epoch, want)
	}
	applyOK(t, f, putOpsLog(t, 9, false, retry[1], retry[3]), putOpsLog(t, 12, false, deliver[1]))
	purge, err := encodePurgeOps(timeToPB(opstoretest.BaseTime.Add(2*time.Hour)), 10)
	if err != nil {
		t.Fatal(err)
	}
	applyOK(t, f, &raft.Log{Index: 13, Term: 2, Type: raft.LogCommand, Data: purge})
	got, e := fsmFeed(t, f)
	want := []string{"7/" + ops[0].ID, "7/" + ops[2].ID, "9/" + ops[3].ID}
	if ops[0].ID > ops[2].ID {
		want[0], want[1] = want[1], want[0]
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || e != epoch {
		t.Fatalf("feed %v epoch %q; want %v epoch %q", got, e, want, epoch)
	}
	if err := f.view(checkOpsConsistent); err != nil {
		t.Fatal(err)
	}
}

// FuzzChangesPosition: a position is what central hands back over the
// site link; any string either decodes or is ErrInvalid, and the feed
// after it never panics and never returns an item at or before it.
func FuzzChangesPosition(f *testing.F) {
	fsm, err := openFSM(f.TempDir()+"/"+bufferFile, testLogger())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fsm.close() })
	put, _ := opsSeeds(f)
	fsm.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: put})
	c, err := fsm.changes(nil, 1)
	if err != nil || c.Next == "" {
		f.Fatalf("changes: %+v, %v", c, err)
	}
	for _, seed := range []string{"", c.Next, "!!", "AAAAAAAAAAA", c.Next + "A", "AAAAAAAAAAAA"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		after, err := decodePosition(p)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("decodePosition(%q): %v, want ErrInvalid", p, err)
			}
			return
		}
		page, err := fsm.changes(after, 3)
		if err != nil {
			t.Fatalf("changes after %q: %v", p, err)
		}
		if len(page.Items) > 0 {
			last, err := decodePosition(page.Next)
			if err != nil || bytes.Compare(last, after) <= 0 {
				t.Fatalf("changes after %q ended at %q, not after it", p, page.Next)
			}
		}
	})
}

// BenchmarkFeed measures, on one FSM holding 100,000 operations, reading
// the whole change feed in pages of 1,000 (as central's reconciliation
// does) and upgrading a file of that size written before the feed.
func BenchmarkFeed(b *testing.B) {
	const rows, batch = 100000, 1000
	f, err := openFSM(b.TempDir()+"/"+bufferFile, testLogger())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.close() })
	var logs []*raft.Log
	for i := range rows / batch {
		changes := make([]*pb.OpChange, batch)
		for j := range changes {
			changes[j] = &pb.OpChange{Op: opToPB(opstoretest.NewCall(opstoretest.BaseTime))}
		}
		data, err := encodePutOps(changes)
		if err != nil {
			b.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	f.ApplyBatch(logs)

	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			var after []byte
			n := 0
			for {
				c, err := f.changes(after, batch)
				if err != nil {
					b.Fatal(err)
				}
				if len(c.Items) == 0 {
					break
				}
				n += len(c.Items)
				if after, err = decodePosition(c.Next); err != nil {
					b.Fatal(err)
				}
			}
			if n != rows {
				b.Fatalf("read %d rows, want %d", n, rows)
			}
		}
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})

	b.Run("upgrade", func(b *testing.B) {
		for b.Loop() {
			err := f.db.Update(func(tx *bbolt.Tx) error {
				for _, name := range feedBuckets {
					if err := tx.DeleteBucket(name); err != nil {
						return err
					}
					if _, err := tx.CreateBucket(name); err != nil {
						return err
					}
				}
				if err := tx.Bucket(bucketMeta).Delete(keyFeed); err != nil {
					return err
				}
				return upgradeFeed(tx)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

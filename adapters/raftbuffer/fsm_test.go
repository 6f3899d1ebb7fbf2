package raftbuffer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
)

func newTestFSM(t *testing.T) *fsm {
	t.Helper()
	f, err := openFSM(filepath.Join(t.TempDir(), bufferFile), testLogger())
	if err != nil {
		t.Fatalf("openFSM: %v", err)
	}
	t.Cleanup(func() { f.close() })
	return f
}

// testLogs builds a log of commands: appends, removes, a duplicate, an
// entry of an unknown type, a barrier-like no-op and a configuration.
func testLogs(t *testing.T) []*raft.Log {
	t.Helper()
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 40)
	var logs []*raft.Log
	add := func(typ raft.LogType, data []byte) {
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1 + uint64(len(logs)/10), Type: typ, Data: data})
	}
	cmd := func(data []byte, err error) []byte {
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	add(raft.LogConfiguration, nil)
	add(raft.LogCommand, cmd(encodeAppend(toPBs(ns[:10]))))
	add(raft.LogCommand, cmd(encodeRemove(ids(ns[2:4]))))
	add(raft.LogNoop, nil)
	add(raft.LogCommand, cmd(encodeAppend(toPBs(slices.Concat(ns[10:20], ns[:1], ns[2:3])))))
	add(raft.LogCommand, []byte{99, 1, 2, 3})
	add(raft.LogCommand, cmd(encodeRemove(ids(ns[15:30]))))
	add(raft.LogCommand, cmd(encodeAppend(toPBs(ns[20:40]))))
	return logs
}

func TestFSMIsDeterministic(t *testing.T) {
	logs := testLogs(t)
	one, each := newTestFSM(t), newTestFSM(t)
	resp := one.ApplyBatch(logs)
	for i, l := range logs {
		r := each.Apply(l)
		if (r == nil) != (resp[i] == nil) {
			t.Fatalf("entry %d: batch answered %v, one by one %v", l.Index, resp[i], r)
		}
	}
	if err, _ := resp[5].(error); !errors.Is(err, errUnknownCommand) {
		t.Fatalf("an unknown command type answered %v, want errUnknownCommand", resp[5])
	}
	a, b := contents(t, fsmBuffer{one}), contents(t, fsmBuffer{each})
	if !sameContents(a, b) || len(a) == 0 {
		t.Fatalf("two FSMs fed the same log differ: %d and %d items", len(a), len(b))
	}
	// 10 appended; 2 removed; 10 new, ns[0] skipped, ns[2] back; an
	// unknown entry; 5 of 15 removed; 20 new: 34.
	if len(a) != 34 || a[len(a)-1].Seq != 41 {
		t.Fatalf("the log leaves %d items (last Seq %d), want 34 (last Seq 41)", len(a), a[len(a)-1].Seq)
	}
	ca, oa, _ := one.stats()
	cb, ob, _ := each.stats()
	if ca != cb || !oa.Equal(ob) || ca != int64(len(a)) {
		t.Fatalf("stats differ: %d/%s and %d/%s, %d items", ca, oa, cb, ob, len(a))
	}

	// Replaying entries already applied changes nothing.
	before := a
	one.ApplyBatch(logs)
	one.Apply(logs[1])
	if after := contents(t, fsmBuffer{one}); !sameContents(before, after) {
		t.Fatalf("replaying applied entries changed the buffer")
	}
	if idx, _ := one.applied(); idx != logs[len(logs)-1].Index {
		t.Fatalf("applied index %d, want %d", idx, logs[len(logs)-1].Index)
	}
}

func TestFSMSnapshotRestore(t *testing.T) {
	src := newTestFSM(t)
	src.ApplyBatch(testLogs(t))
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	// Applying after the snapshot does not change what it streams.
	extra := buffertest.NewSubmissions(buffertest.BaseTime, 3)
	data, _ := encodeAppend(toPBs(extra))
	src.Apply(&raft.Log{Index: 100, Term: 9, Type: raft.LogCommand, Data: data})

	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	snap.Release()

	dst := newTestFSM(t)
	mustAppendFSM(t, dst, 1, buffertest.NewSubmissions(buffertest.BaseTime, 5)) // replaced by the restore
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	got := contents(t, fsmBuffer{dst})
	all := contents(t, fsmBuffer{src})
	want := all[:len(all)-3]
	if !sameContents(want, got) {
		t.Fatalf("restored FSM holds %d items, want the %d of the snapshot", len(got), len(want))
	}
	if idx, _ := dst.applied(); idx != 8 {
		t.Fatalf("restored applied index %d, want 8", idx)
	}

	if err := dst.Restore(io.NopCloser(bytes.NewReader([]byte("not a database")))); err == nil {
		t.Fatal("Restore of garbage succeeded")
	}
	if got2 := contents(t, fsmBuffer{dst}); !sameContents(got, got2) {
		t.Fatal("a failed Restore changed the buffer")
	}
}

func mustAppendFSM(t *testing.T, f *fsm, index uint64, ns []ports.Submission) {
	t.Helper()
	data, err := encodeAppend(toPBs(ns))
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}); r != nil {
		t.Fatalf("Apply: %v", r)
	}
}

// fsmBuffer lets the test helpers read an FSM as a buffer.
type fsmBuffer struct{ f *fsm }

func (b fsmBuffer) Scan(_ context.Context, after uint64, limit int) ([]ports.Buffered, error) {
	return b.f.scan(after, limit)
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestDecodeCommandRejects(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":        nil,
		"unknown type": {7},
		"bad append":   {cmdAppend, 0xff, 0xff},
		"bad remove":   {cmdRemove, 0x0a, 0x05, 'x'},
	} {
		if _, err := decodeCommand(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 2)
	app, _ := encodeAppend(toPBs(ns))
	rem, _ := encodeRemove([]string{ns[0].ID, "x"})
	put, purge := opsSeeds(f)
	for _, seed := range [][]byte{nil, {0}, {cmdAppend}, {cmdRemove}, {cmdPutOps}, {cmdPurgeOps}, {99, 1}, app, rem, put, purge} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := decodeCommand(data)
		set := 0
		for _, isSet := range []bool{cmd.append != nil, cmd.remove != nil, cmd.putOps != nil, cmd.purgeOps != nil} {
			if isSet {
				set++
			}
		}
		if err == nil && set != 1 {
			t.Fatalf("decoded a command with %d kinds set: %+v", set, cmd)
		}
		for _, s := range cmd.append.GetNotifications() {
			_ = fromPB(s)
		}
		for _, c := range cmd.putOps.GetChanges() {
			_ = checkChange(c)
			_ = opFromPB(c.GetOp())
		}
		_, _ = decodeItem(data)
		if op, err := decodeOp(data); err == nil {
			_ = opFromPB(op)
		}
	})
}

// FuzzApplyCommand feeds whatever a peer could put in a log entry to a real
// FSM, after a few valid commands: it never panics, never fails the FSM
// (only storage can), and the buffer stays consistent — the count in meta,
// the items and the ids index agree, and so do the operations, their
// indexes and their counts.
func FuzzApplyCommand(f *testing.F) {
	ns := buffertest.NewSubmissions(buffertest.BaseTime, 3)
	app, _ := encodeAppend(toPBs(ns))
	rem, _ := encodeRemove([]string{ns[0].ID, "x", ""})
	empty, _ := encodeAppend([]*pb.Submission{{}})
	put, purge := opsSeeds(f)
	for _, seed := range [][]byte{nil, {0}, {cmdAppend}, {cmdRemove}, {99, 1}, app, rem, empty,
		append([]byte{cmdAppend}, 0x0a, 0x02, 0x0a, 0x00), put, purge, {cmdPutOps, 0x0a, 0x00}} {
		f.Add(seed)
	}
	fsm, err := openFSM(filepath.Join(f.TempDir(), bufferFile), testLogger())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fsm.close() })
	fsm.db.NoSync = true // the fuzzer's throughput; durability is not what is tested
	var index uint64
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{app, put, data, data} {
			index++
			fsm.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: d})
		}
		if err := fsm.failure(); err != nil {
			t.Fatalf("a command failed the FSM: %v", err)
		}
		if err := fsm.view(func(tx *bbolt.Tx) error {
			m := readMeta(tx)
			items, idx := tx.Bucket(bucketItems).Stats().KeyN, tx.Bucket(bucketIDs).Stats().KeyN
			if uint64(items) != m.count || uint64(idx) != m.count {
				t.Fatalf("meta count %d, %d items, %d ids", m.count, items, idx)
			}
			if err := checkOpsConsistent(tx); err != nil {
				t.Fatalf("operations inconsistent: %v", err)
			}
			return tx.Bucket(bucketItems).ForEach(func(_, v []byte) error {
				_, err := decodeItem(v)
				return err
			})
		}); err != nil {
			t.Fatalf("an applied notification cannot be read back: %v", err)
		}
	})
}

func TestTimesKeepNanosecondsAndZero(t *testing.T) {
	in := ports.Submission{ID: "x", SiteEnqueuedAt: time.Date(1960, 1, 2, 3, 4, 5, 6, time.FixedZone("z", -3600))}
	out := fromPB(toPB(in))
	if !out.SiteEnqueuedAt.Equal(in.SiteEnqueuedAt) || out.SiteEnqueuedAt.Location() != time.UTC {
		t.Fatalf("time %s came back as %s", in.SiteEnqueuedAt, out.SiteEnqueuedAt)
	}
	if !out.ExpiresAt.IsZero() || out.TypeData != nil {
		t.Fatalf("zero fields came back set: %+v", out)
	}
}

package raftbuffer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/opstoretest"
)

// opsSeeds returns a valid PutOps and PurgeOps command for the fuzzers.
func opsSeeds(f *testing.F) (put, purge []byte) {
	f.Helper()
	a, b := opstoretest.NewCall(opstoretest.BaseTime), opstoretest.NewWrite(opstoretest.BaseTime)
	done := a
	done.Status, done.TerminalAt = ports.OpDelivered, opstoretest.BaseTime
	put, err := encodePutOps([]*pb.OpChange{
		{Op: opToPB(a)}, {Op: opToPB(b)}, {From: string(ports.OpPending), Op: opToPB(done)},
	})
	if err != nil {
		f.Fatal(err)
	}
	purge, err = encodePurgeOps(timeToPB(opstoretest.BaseTime.Add(time.Second)), 10)
	if err != nil {
		f.Fatal(err)
	}
	return put, purge
}

// checkOpsConsistent verifies, inside tx, that every stored operation has
// exactly its index entries and its feed entry and is counted once, and
// that every index entry names a stored operation that has it.
func checkOpsConsistent(tx *bbolt.Tx) error {
	want := map[string]map[string]bool{}
	for _, b := range opBuckets[1:] {
		want[string(b)] = map[string]bool{}
	}
	counts := map[string]uint64{}
	err := tx.Bucket(bucketOps).ForEach(func(k, v []byte) error {
		op, err := decodeOp(v)
		if err != nil {
			return err
		}
		if !bytes.Equal(k, idKey(op.GetId())) {
			return fmt.Errorf("operation %q stored under another key", op.GetId())
		}
		if checkChange(&pb.OpChange{Op: op}) != nil {
			return fmt.Errorf("an invalid operation is stored: %v", checkChange(&pb.OpChange{Op: op}))
		}
		if ports.OpStatus(op.GetStatus()).Terminal() && (len(op.GetParams()) > 0 || op.GetSql() != "" || len(op.GetArgs()) > 0) {
			return fmt.Errorf("terminal operation %q keeps a payload", op.GetId())
		}
		if op.GetVersion() == 0 {
			return fmt.Errorf("operation %q has version 0", op.GetId())
		}
		for _, e := range opIndexes(op) {
			want[string(e.bucket)][string(e.key)] = true
		}
		counts[string(countKey(op.GetKind(), op.GetStatus()))]++
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range opBuckets[1:] {
		if bytes.Equal(b, bucketOpsCounts) {
			continue
		}
		n := 0
		if err := tx.Bucket(b).ForEach(func(k, _ []byte) error {
			n++
			if !want[string(b)][string(k)] {
				return fmt.Errorf("%s holds %x, which no operation has", b, k)
			}
			return nil
		}); err != nil {
			return err
		}
		if n != len(want[string(b)]) {
			return fmt.Errorf("%s holds %d entries, the operations have %d", b, n, len(want[string(b)]))
		}
	}
	n := 0
	if err := tx.Bucket(bucketOpsCounts).ForEach(func(k, v []byte) error {
		n++
		if got := getUint(tx.Bucket(bucketOpsCounts), k); got != counts[string(k)] {
			return fmt.Errorf("count %q is %d, the operations are %d", k, got, counts[string(k)])
		}
		return nil
	}); err != nil {
		return err
	}
	if n != len(counts) {
		return fmt.Errorf("%d counts kept, %d statuses held", n, len(counts))
	}
	return checkFeedConsistent(tx)
}

// opsLogs is a log of operation commands: inserts, conditional moves (some
// stale), an invalid PutOps, a purge, and an append between them.
func opsLogs(t *testing.T) []*raft.Log {
	t.Helper()
	ops, retry, deliver := lifecycle(20)
	var logs []*raft.Log
	add := func(data []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	changes := func(cs []ports.OpChange) []*pb.OpChange {
		out := make([]*pb.OpChange, len(cs))
		for i, c := range cs {
			out[i] = &pb.OpChange{From: string(c.From), Op: opToPB(c.Op)}
		}
		return out
	}
	add(encodePutOps(changes(inserts(ops))))
	add(encodePutOps(changes(append(retry[:15], retry[:5]...)))) // the repeats are stale
	add(encodeAppend(toPBs(nil)))
	bad := changes(inserts(ops[:1]))
	bad[0].Op.Status = "Sleeping"
	add(encodePutOps(append(changes(deliver[:5]), bad...))) // refused whole
	add(encodePutOps(changes(deliver[:10])))
	add(encodePurgeOps(timeToPB(opstoretest.BaseTime.Add(time.Hour+4*time.Millisecond)), 3))
	add(encodePutOps(changes(inserts(ops[:2])))) // purged ids come back
	return logs
}

// fsmOps lists every operation of an FSM, newest first.
func fsmOps(t *testing.T, f *fsm) []ports.Operation {
	t.Helper()
	p, err := f.listOps(ports.OpFilter{}, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p.Items
}

func TestFSMOpsAreDeterministic(t *testing.T) {
	logs := opsLogs(t)
	one, each := newTestFSM(t), newTestFSM(t)
	resp := one.ApplyBatch(logs)
	for i, l := range logs {
		r := each.Apply(l)
		if fmt.Sprint(r) != fmt.Sprint(resp[i]) {
			t.Fatalf("entry %d: batch answered %v, one by one %v", l.Index, resp[i], r)
		}
	}
	if flags, _ := resp[1].([]bool); len(flags) != 20 || !flags[14] || flags[15] {
		t.Fatalf("the moves answered %v; want 15 applied, 5 stale", resp[1])
	}
	if err, _ := resp[3].(error); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("an invalid PutOps answered %v, want ErrInvalid", resp[3])
	}
	if n, _ := resp[5].(int); n != 3 {
		t.Fatalf("the purge answered %v, want 3", resp[5])
	}
	a, b := fsmOps(t, one), fsmOps(t, each)
	if d := diffOps(a, b); d != "" || len(a) != 19 {
		t.Fatalf("two FSMs fed the same log differ (%d operations, want 19): %s", len(a), d)
	}
	fa, ea := fsmFeed(t, one)
	fb, eb := fsmFeed(t, each)
	if strings.Join(fa, " ") != strings.Join(fb, " ") || ea != eb || len(fa) != 19 || ea == "" {
		t.Fatalf("two FSMs fed the same log have different feeds:\n%v %q\n%v %q", fa, ea, fb, eb)
	}
	for _, f := range []*fsm{one, each} {
		if err := f.view(checkOpsConsistent); err != nil {
			t.Fatal(err)
		}
	}
	// Replaying applied entries changes nothing: no version moves.
	one.ApplyBatch(logs)
	if d := diffOps(a, fsmOps(t, one)); d != "" {
		t.Fatalf("replaying applied entries changed the operations: %s", d)
	}
}

func TestFSMOpsSnapshotRestore(t *testing.T) {
	src := newTestFSM(t)
	src.ApplyBatch(opsLogs(t))
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	dst := newTestFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if d := diffOps(fsmOps(t, src), fsmOps(t, dst)); d != "" {
		t.Fatalf("the restored FSM differs: %s", d)
	}
	fa, ea := fsmFeed(t, src)
	fb, eb := fsmFeed(t, dst)
	if strings.Join(fa, " ") != strings.Join(fb, " ") || ea != eb {
		t.Fatalf("the restored FSM's feed differs:\n%v %q\n%v %q", fa, ea, fb, eb)
	}
	a, _ := src.opStats()
	b, _ := dst.opStats()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("OpStats %+v before, %+v restored", a, b)
	}
	if err := dst.view(checkOpsConsistent); err != nil {
		t.Fatal(err)
	}
}

func TestTimeKeysSortAsTimes(t *testing.T) {
	times := []time.Time{
		{},
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Unix(0, 0),
		time.Unix(0, 1),
		opstoretest.BaseTime,
		opstoretest.BaseTime.Add(time.Microsecond),
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if !timeFromKey(keyTime(time.Time{})).IsZero() {
		t.Fatalf("the zero time does not come back zero")
	}
	for i := 1; i < len(times); i++ {
		if bytes.Compare(keyTime(times[i-1]), keyTime(times[i])) >= 0 {
			t.Fatalf("key of %s does not sort before key of %s", times[i-1], times[i])
		}
		if got := timeFromKey(keyTime(times[i])); !got.Equal(times[i]) || got.Location() != time.UTC {
			t.Fatalf("timeFromKey(%s) = %s", times[i], got)
		}
	}
}

// FuzzListCursor: a cursor is what a site API client hands back; any
// string either decodes or is ErrInvalid, and a List after it never
// panics and never returns an item at or above it.
func FuzzListCursor(f *testing.F) {
	fsm, err := openFSM(f.TempDir()+"/"+bufferFile, testLogger())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fsm.close() })
	put, _ := opsSeeds(f)
	fsm.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: put})
	p, err := fsm.listOps(ports.OpFilter{}, 1, nil)
	if err != nil || p.Next == "" {
		f.Fatalf("listOps: %+v, %v", p, err)
	}
	for _, seed := range []string{"", p.Next, "!!", "AAAA", p.Next + "A"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, c string) {
		after, err := decodeOpCursor(c)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("decodeOpCursor(%q): %v, want ErrInvalid", c, err)
			}
			return
		}
		page, err := fsm.listOps(ports.OpFilter{CreatedFrom: opstoretest.BaseTime}, 2, after)
		if err != nil {
			t.Fatalf("listOps after %q: %v", c, err)
		}
		for _, op := range page.Items {
			if bytes.Compare(indexKey(timeToPB(op.CreatedAt), op.ID), after) >= 0 {
				t.Fatalf("listOps after %q returned %s, not below the cursor", c, op.ID)
			}
		}
	})
}

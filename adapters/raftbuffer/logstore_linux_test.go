package raftbuffer

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// mappedKB is the resident size of the process's mappings of the file at
// path, from /proc/self/smaps.
func mappedKB(t *testing.T, path string) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kb int64
	in := false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasSuffix(line, " "+path)
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); in && ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("smaps: %q: %v", line, err)
			}
			kb += n
		}
	}
	return kb
}

// readAll reads entries first…last back, as the leader does for a follower
// behind the log cache, faulting raft.db's pages into the mapping, and
// checks them.
func readAll(t *testing.T, s *logStore, first, last uint64) {
	t.Helper()
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if want := fmt.Sprintf("entry %08d", i); !bytes.HasPrefix(l.Data, []byte(want)) {
			t.Fatalf("entry %d holds %.20q, want %q…", i, l.Data, want)
		}
	}
}

// TestLogStoreDropsItsMapping: the pages of raft.db that bbolt read leave
// the process's page tables after a compaction and every logDropEvery
// writes, and the entries read the same afterwards.
func TestLogStoreDropsItsMapping(t *testing.T) {
	st, err := openStores(t.TempDir(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer st.store.Close()
	const entries, size = 20000, 1000 // about 20 MB of log
	pad := bytes.Repeat([]byte{'x'}, size)
	batch := make([]*raft.Log, 0, 100)
	for i := uint64(1); i <= entries; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand,
			Data: append([]byte(fmt.Sprintf("entry %08d", i)), pad...)})
		if len(batch) == cap(batch) {
			if err := st.store.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	const resident, dropped = 8 << 10, 1 << 10 // kB
	readAll(t, st.store, 1, entries)
	if kb := mappedKB(t, st.store.path); kb < resident {
		t.Fatalf("raft.db has %d kB mapped after reading %d entries back; the test needs at least %d", kb, entries, resident)
	}
	// A compaction drops the mapping.
	if err := st.store.DeleteRange(1, entries/2); err != nil {
		t.Fatal(err)
	}
	if kb := mappedKB(t, st.store.path); kb > dropped {
		t.Fatalf("raft.db has %d kB mapped after a compaction, want at most %d", kb, dropped)
	}
	readAll(t, st.store, entries/2+1, entries)
	if kb := mappedKB(t, st.store.path); kb < resident/2 {
		t.Fatalf("raft.db has %d kB mapped after reading back; the test needs at least %d", kb, resident/2)
	}
	// So do logDropEvery writes.
	for i := range uint64(logDropEvery) {
		if err := st.store.SetUint64([]byte("k"), i); err != nil {
			t.Fatal(err)
		}
	}
	if kb := mappedKB(t, st.store.path); kb > dropped {
		t.Fatalf("raft.db has %d kB mapped after %d writes, want at most %d", kb, logDropEvery, dropped)
	}
	readAll(t, st.store, entries/2+1, entries)
}

// TestLogStoreCompactsInChunks: a compaction longer than logDeleteChunk
// entries, done a chunk a transaction, deletes exactly the range asked.
func TestLogStoreCompactsInChunks(t *testing.T) {
	st, err := openStores(t.TempDir(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer st.store.Close()
	const entries = 3*logDeleteChunk + 100
	batch := make([]*raft.Log, 0, 1000)
	for i := uint64(1); i <= entries; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %08d", i))})
		if len(batch) == cap(batch) || i == entries {
			if err := st.store.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	const upTo = 2*logDeleteChunk + 50 // two whole chunks and part of a third
	if err := st.store.DeleteRange(1, upTo); err != nil {
		t.Fatal(err)
	}
	first, err := st.store.FirstIndex()
	if err != nil || first != upTo+1 {
		t.Fatalf("first index %d (%v), want %d", first, err, upTo+1)
	}
	last, err := st.store.LastIndex()
	if err != nil || last != entries {
		t.Fatalf("last index %d (%v), want %d", last, err, entries)
	}
	var l raft.Log
	if err := st.store.GetLog(upTo, &l); err != raft.ErrLogNotFound {
		t.Fatalf("entry %d after the compaction: %v, want ErrLogNotFound", upTo, err)
	}
	readAll(t, st.store, upTo+1, entries)
}

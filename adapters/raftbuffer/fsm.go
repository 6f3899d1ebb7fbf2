package raftbuffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
)

// The buffer's bbolt file: items by Seq, the Seq of each id, and meta.
var (
	bucketItems = []byte("items")
	bucketIDs   = []byte("ids")
	bucketMeta  = []byte("meta")

	keyFormat       = []byte("format")
	keyNextSeq      = []byte("next_seq")
	keyCount        = []byte("count")
	keyAppliedIndex = []byte("applied_index")
	keyAppliedTerm  = []byte("applied_term")
)

// formatV1 is the layout written in meta/format.
const formatV1 = 1

// bufferFile is the FSM's file in the node's directory.
const bufferFile = "buffer.db"

// fsm is the Raft state machine: a thin, deterministic layer over the bbolt
// file. Everything it applies comes from the command (ids, times,
// provenance); it reads no clock and generates nothing. It keeps no Go state
// per notification: counts and the next Seq live in meta, in the same
// transaction as the data and the last applied log index.
type fsm struct {
	path string
	log  *slog.Logger

	// mu guards db: Restore swaps the file under the write lock; everything
	// else holds the read lock while it uses db.
	mu sync.RWMutex
	db *bbolt.DB

	// failed is set, once, when a write transaction could not commit: the
	// applied state no longer follows the log, so the FSM refuses to apply
	// or snapshot anything more. failedCh is closed then.
	failMu   sync.Mutex
	failed   error
	failedCh chan struct{}

	// unsynced is set when the file is written without an fsync per
	// transaction, a marker beside it (see unsynced.go); setAside when
	// openFSM set the previous file aside as possibly torn.
	unsynced bool
	setAside bool

	// commits counts write transactions and dropSize is the file's size at
	// the last dropMapping (ApplyBatch runs on one goroutine): the file's
	// pages leave the RSS every dropEvery transactions or dropGrowth bytes.
	commits  int
	dropSize int64
}

// How often the buffer file's pages are dropped from the RSS.
const (
	dropEvery  = 1024
	dropGrowth = 32 << 20
)

var _ raft.BatchingFSM = (*fsm)(nil)

// meta is the meta bucket of one transaction.
type meta struct {
	nextSeq      uint64
	count        uint64
	appliedIndex uint64
	appliedTerm  uint64
}

// boltOptions are the options of the buffer's bbolt file. The initial mmap
// is large (virtual address space only) so that the file rarely has to be
// remapped: a remap waits for every read transaction, a snapshot being
// streamed included. The map freelist is fast with many free pages, and not
// syncing it saves a write per transaction (bbolt rebuilds it at open).
func boltOptions(mmap int) *bbolt.Options {
	return &bbolt.Options{
		Timeout:         5 * time.Second,
		InitialMmapSize: mmap,
		FreelistType:    bbolt.FreelistMapType,
		NoFreelistSync:  true,
	}
}

// bufferMmapSize is the initial mmap of buffer.db: 1 GiB, about two million
// buffered notifications of a few hundred bytes before the first remap.
const bufferMmapSize = 1 << 30

// openFSM opens (creating if needed) the buffer file at path, first
// setting it aside if it may be torn, and marks it as written unsynced
// where the kernel gives a boot id.
func openFSM(path string, log *slog.Logger) (*fsm, error) {
	aside, err := setAsideTorn(path, log)
	if err != nil {
		return nil, err
	}
	db, err := openBufferDB(path)
	if err != nil {
		return nil, err
	}
	f := &fsm{path: path, log: log, db: db, failedCh: make(chan struct{}), setAside: aside}
	boot := bootID()
	if boot == "" {
		// Synced from now on: a marker left from elsewhere would set this
		// file aside at every later start.
		err = clearUnsynced(path)
	} else {
		err = markUnsynced(path, boot)
		f.unsynced, db.NoSync = true, true
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return f, nil
}

func openBufferDB(path string) (*bbolt.DB, error) {
	db, err := bbolt.Open(path, 0o600, boltOptions(bufferMmapSize))
	if err != nil {
		return nil, fmt.Errorf("open buffer file %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		names := append([][]byte{bucketItems, bucketIDs, bucketMeta}, opBuckets...)
		for _, name := range append(names, feedBuckets...) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		switch f := getUint(m, keyFormat); f {
		case 0:
			if err := putUint(m, keyFormat, formatV1); err != nil {
				return err
			}
			if err := putUint(m, keyNextSeq, 1); err != nil {
				return err
			}
		case formatV1:
		default:
			return fmt.Errorf("format %d is newer than this program knows (%d)", f, formatV1)
		}
		return upgradeFeed(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare buffer file %s: %w", path, err)
	}
	return db, nil
}

// close closes the bbolt file; an unsynced one is synced first and its
// marker removed after. A file that could not be synced gets a marker that
// no boot matches.
func (f *fsm) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		return nil
	}
	var serr error
	if f.unsynced {
		if serr = f.db.Sync(); serr != nil {
			// Pages the kernel could not write may read back stale even in
			// this boot: a marker no boot matches sets the file aside.
			serr = errors.Join(fmt.Errorf("sync buffer file: %w", serr), markUnsynced(f.path, syncFailed))
		}
	}
	err := f.db.Close()
	f.db = nil
	if err != nil {
		return errors.Join(serr, fmt.Errorf("close buffer file: %w", err))
	}
	if serr != nil || !f.unsynced {
		return serr
	}
	return clearUnsynced(f.path)
}

// fail records the first fatal error and closes failedCh.
func (f *fsm) fail(err error) {
	f.failMu.Lock()
	defer f.failMu.Unlock()
	if f.failed == nil {
		f.failed = err
		close(f.failedCh)
		f.log.Error("raftbuffer: the buffer file could not be written; this node stops applying the log",
			"err", err)
	}
}

// failure returns the fatal error, nil if none.
func (f *fsm) failure() error {
	f.failMu.Lock()
	defer f.failMu.Unlock()
	return f.failed
}

// Apply applies one log entry (raft calls ApplyBatch; Apply is for
// raft.RecoverCluster and tests).
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies the entries in one bbolt write transaction, synced
// for the whole batch where the file is not written unsynced. Entries at or below the last applied index stored in
// the file were applied before (a restart replays the log from the last
// snapshot) and are skipped. Each entry's response is nil or an error: a
// command that cannot be read or is invalid changes nothing and answers an
// error; a write that cannot commit fails the FSM for good.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	resp := make([]any, len(logs))
	fill := func(err error) []any {
		for i := range resp {
			resp[i] = err
		}
		return resp
	}
	if err := f.failure(); err != nil {
		return fill(err)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()

	tx, err := f.db.Begin(true)
	if err != nil {
		f.fail(fmt.Errorf("begin write: %w", err))
		return fill(f.failure())
	}
	defer tx.Rollback()
	if f.commits++; f.commits%dropEvery == 0 || tx.Size()-f.dropSize > dropGrowth {
		dropMapping(tx)
		f.dropSize = tx.Size()
	}
	m := readMeta(tx)
	changed := false
	for i, l := range logs {
		if l.Index <= m.appliedIndex {
			continue
		}
		if l.Type == raft.LogCommand {
			answer, err := applyCommand(tx, &m, l)
			if err != nil {
				f.fail(fmt.Errorf("apply log %d: %w", l.Index, err))
				return fill(f.failure())
			}
			resp[i] = answer
		}
		m.appliedIndex, m.appliedTerm = l.Index, l.Term
		changed = true
	}
	if !changed {
		return resp
	}
	if err := writeMeta(tx, m); err != nil {
		f.fail(fmt.Errorf("write meta: %w", err))
		return fill(f.failure())
	}
	if err := tx.Commit(); err != nil {
		f.fail(fmt.Errorf("commit: %w", err))
		return fill(f.failure())
	}
	return resp
}

// applyCommand applies one command inside tx. answer is the command's
// answer: an error when it cannot be read or is invalid (nothing changed),
// else nil for Append and Remove, the applied flags for PutOps, the count
// removed for PurgeOps. err is a storage failure. The entry's index
// places the changes of operations in the feed.
func applyCommand(tx *bbolt.Tx, m *meta, l *raft.Log) (answer any, err error) {
	cmd, err := decodeCommand(l.Data)
	if err != nil {
		return err, nil
	}
	switch {
	case cmd.putOps != nil:
		return applyPutOps(tx, cmd.putOps, l.Index)
	case cmd.purgeOps != nil:
		return applyPurgeOps(tx, cmd.purgeOps)
	}
	items, ids := tx.Bucket(bucketItems), tx.Bucket(bucketIDs)
	items.FillPercent = 0.9 // Seqs only grow: pack the pages
	switch {
	case cmd.append != nil:
		// Check and encode everything first, so that a refused command
		// changes nothing.
		ns := cmd.append.GetNotifications()
		vals := make([][]byte, len(ns))
		for i, s := range ns {
			if err := checkID(s.GetId()); err != nil {
				return fmt.Errorf("notification %d: %w", i, err), nil
			}
			if vals[i], err = encodeItem(s); err != nil {
				return fmt.Errorf("notification %d: %w", i, err), nil
			}
		}
		if m.nextSeq > math.MaxUint64-uint64(len(ns)) {
			return fmt.Errorf("sequence exhausted: %w", ports.ErrInvalid), nil
		}
		for i, s := range ns {
			key := idKey(s.GetId())
			if ids.Get(key) != nil {
				continue
			}
			seq := uintBytes(m.nextSeq)
			if err := items.Put(seq, vals[i]); err != nil {
				return nil, err
			}
			if err := ids.Put(key, seq); err != nil {
				return nil, err
			}
			m.nextSeq++
			m.count++
		}
	case cmd.remove != nil:
		for _, id := range cmd.remove.GetIds() {
			if checkID(id) != nil {
				continue // never buffered
			}
			key := idKey(id)
			v := ids.Get(key)
			if v == nil {
				continue
			}
			seq := bytes.Clone(v)
			if err := items.Delete(seq); err != nil {
				return nil, err
			}
			if err := ids.Delete(key); err != nil {
				return nil, err
			}
			m.count--
		}
	}
	return nil, nil
}

// checkID refuses ids the buffer cannot keep.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty id: %w", ports.ErrInvalid)
	case len(id) > maxIDLen:
		return fmt.Errorf("id of %d bytes is over %d: %w", len(id), maxIDLen, ports.ErrInvalid)
	}
	return nil
}

// idKey is the key of id in the ids bucket: a tag byte, then the 16 bytes of
// a canonical UUID, or the text of any other id.
func idKey(id string) []byte {
	if u, err := uuid.Parse(id); err == nil && u.String() == id {
		return append([]byte{1}, u[:]...)
	}
	return append([]byte{2}, id...)
}

func readMeta(tx *bbolt.Tx) meta {
	b := tx.Bucket(bucketMeta)
	return meta{
		nextSeq:      getUint(b, keyNextSeq),
		count:        getUint(b, keyCount),
		appliedIndex: getUint(b, keyAppliedIndex),
		appliedTerm:  getUint(b, keyAppliedTerm),
	}
}

func writeMeta(tx *bbolt.Tx, m meta) error {
	b := tx.Bucket(bucketMeta)
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{keyNextSeq, m.nextSeq}, {keyCount, m.count}, {keyAppliedIndex, m.appliedIndex}, {keyAppliedTerm, m.appliedTerm}} {
		if err := putUint(b, kv.k, kv.v); err != nil {
			return err
		}
	}
	return nil
}

func uintBytes(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func getUint(b *bbolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putUint(b *bbolt.Bucket, k []byte, v uint64) error { return b.Put(k, uintBytes(v)) }

// --- reads -------------------------------------------------------------------

// view runs fn in a read transaction of the current file.
func (f *fsm) view(fn func(tx *bbolt.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return fmt.Errorf("buffer file is closed: %w", ports.ErrUnavailable)
	}
	return f.db.View(fn)
}

// applied returns the last applied log index stored in the file.
func (f *fsm) applied() (index uint64, err error) {
	err = f.view(func(tx *bbolt.Tx) error {
		index = readMeta(tx).appliedIndex
		return nil
	})
	return index, err
}

// scan returns up to limit notifications with a Seq above after.
func (f *fsm) scan(after uint64, limit int) ([]ports.Buffered, error) {
	if after == math.MaxUint64 {
		return nil, nil
	}
	out := make([]ports.Buffered, 0, min(limit, 1024))
	err := f.view(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketItems).Cursor()
		for k, v := c.Seek(uintBytes(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			s, err := decodeItem(v)
			if err != nil {
				return fmt.Errorf("item %x: %w", k, err)
			}
			out = append(out, ports.Buffered{Seq: binary.BigEndian.Uint64(k), Submission: s})
		}
		return nil
	})
	return out, err
}

// contains returns the subset of ids that are buffered.
func (f *fsm) contains(ids []string) (map[string]bool, error) {
	out := make(map[string]bool)
	err := f.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIDs)
		for _, id := range ids {
			if checkID(id) == nil && b.Get(idKey(id)) != nil {
				out[id] = true
			}
		}
		return nil
	})
	return out, err
}

// stats returns the count from meta and the enqueue time of the first item.
func (f *fsm) stats() (count int64, oldest time.Time, err error) {
	err = f.view(func(tx *bbolt.Tx) error {
		count = int64(readMeta(tx).count)
		_, v := tx.Bucket(bucketItems).Cursor().First()
		if v == nil {
			return nil
		}
		s, err := decodeItem(v)
		if err != nil {
			return err
		}
		oldest = s.SiteEnqueuedAt
		return nil
	})
	return count, oldest, err
}

// --- snapshots ---------------------------------------------------------------

// Snapshot opens a read transaction: a point-in-time view of the file that
// Persist streams while Apply goes on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.failure(); err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return nil, errors.New("buffer file is closed")
	}
	tx, err := f.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	return &snapshot{tx: tx}, nil
}

// snapshot is a read transaction waiting to be streamed.
type snapshot struct {
	tx   *bbolt.Tx
	once sync.Once
}

// Persist writes the whole bbolt file as of the transaction to sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	defer s.Release()
	if _, err := s.tx.WriteTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("stream buffer snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close buffer snapshot: %w", err)
	}
	return nil
}

// Release ends the read transaction; it may be called more than once.
func (s *snapshot) Release() {
	s.once.Do(func() { _ = s.tx.Rollback() })
}

// Restore replaces the file with the snapshot's: the stream goes to a
// temporary file beside it, which is checked, then renamed over the current
// file while no one reads it.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	tmp := f.path + ".restore"
	if err := writeFileSync(tmp, rc); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore buffer snapshot: %w", err)
	}
	check, err := openBufferDB(tmp)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore buffer snapshot: %w", err)
	}
	if err := check.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore buffer snapshot: %w", err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db != nil {
		if err := f.db.Close(); err != nil {
			f.db = nil
			f.fail(fmt.Errorf("close buffer file for a restore: %w", err))
			return f.failure()
		}
		f.db = nil
	}
	if err := os.Rename(tmp, f.path); err != nil {
		f.fail(fmt.Errorf("rename restored buffer file: %w", err))
		return f.failure()
	}
	if err := syncDir(filepath.Dir(f.path)); err != nil {
		f.fail(err)
		return f.failure()
	}
	db, err := openBufferDB(f.path)
	if err != nil {
		f.fail(err)
		return f.failure()
	}
	db.NoSync = f.unsynced
	f.db = db
	return nil
}

// writeFileSync copies r to a new file at path and syncs it.
func writeFileSync(path string, r io.Reader) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// toPBs converts a batch for an Append command.
func toPBs(ns []ports.Submission) []*pb.Submission {
	out := make([]*pb.Submission, len(ns))
	for i, n := range ns {
		out[i] = toPB(n)
	}
	return out
}

package raftbuffer

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
)

// The cached operations' buckets in buffer.db: the rows by id, four
// indexes and the counts, all kept in step inside each Apply transaction.
// An index key is a time (timeKey) followed by the id's text, its value
// empty; the buffered index puts the kind and a 0 byte in front.
var (
	bucketOps         = []byte("ops")
	bucketOpsDue      = []byte("ops_due")      // (NextAttemptAt, id) of Pending and Retrying rows
	bucketOpsCreated  = []byte("ops_created")  // (CreatedAt, id) of every row
	bucketOpsTerminal = []byte("ops_terminal") // (TerminalAt, id) of terminal rows
	bucketOpsBuffered = []byte("ops_buffered") // (kind, CreatedAt, id) of Pending, Retrying and Parked rows
	bucketOpsCounts   = []byte("ops_counts")   // kind, 0, status → count
)

// opBuckets are the buckets of the cached operations.
var opBuckets = [][]byte{bucketOps, bucketOpsDue, bucketOpsCreated, bucketOpsTerminal, bucketOpsBuffered, bucketOpsCounts}

// opKinds are the kinds OpStats reports, in its order.
var opKinds = []ports.OpKind{ports.OpCall, ports.OpWrite}

// timeKeyLen is the length of a time in an index key.
const timeKeyLen = 12

// timeKey encodes t so that byte order is time order, for any time: the
// Unix seconds with the sign bit flipped, then the nanoseconds, big-endian.
// The zero time (nil) is 12 zero bytes, before every other, as it is in
// time order.
func timeKey(t *pb.Time) []byte {
	if t == nil {
		return make([]byte, timeKeyLen)
	}
	b := binary.BigEndian.AppendUint64(make([]byte, 0, timeKeyLen), uint64(t.GetSeconds())^(1<<63))
	return binary.BigEndian.AppendUint32(b, uint32(t.GetNanos()))
}

// timeFromKey reads the time at the start of an index key.
func timeFromKey(k []byte) time.Time {
	if bytes.Equal(k[:timeKeyLen], make([]byte, timeKeyLen)) {
		return time.Time{}
	}
	sec := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
	return time.Unix(sec, int64(binary.BigEndian.Uint32(k[8:]))).UTC()
}

// keyTime is timeKey of a time.Time (the zero time is the zero *pb.Time).
func keyTime(t time.Time) []byte { return timeKey(timeToPB(t)) }

func indexKey(t *pb.Time, id string) []byte { return append(timeKey(t), id...) }

func bufferedKey(kind string, t *pb.Time, id string) []byte {
	return append(append(append([]byte(kind), 0), timeKey(t)...), id...)
}

func countKey(kind, status string) []byte { return append(append([]byte(kind), 0), status...) }

// opIndexEntry is one index entry of a row.
type opIndexEntry struct {
	bucket []byte
	key    []byte
}

// opIndexes lists the index entries of op.
func opIndexes(op *pb.Operation) []opIndexEntry {
	st := ports.OpStatus(op.GetStatus())
	out := []opIndexEntry{{bucketOpsCreated, indexKey(op.GetCreatedAt(), op.GetId())}}
	if st == ports.OpPending || st == ports.OpRetrying {
		out = append(out, opIndexEntry{bucketOpsDue, indexKey(op.GetNextAttemptAt(), op.GetId())})
	}
	if st.Terminal() {
		out = append(out, opIndexEntry{bucketOpsTerminal, indexKey(op.GetTerminalAt(), op.GetId())})
	}
	if st.Buffered() {
		out = append(out, opIndexEntry{bucketOpsBuffered, bufferedKey(op.GetKind(), op.GetCreatedAt(), op.GetId())})
	}
	return out
}

// unindexOp removes a stored row's index entries and count.
func unindexOp(tx *bbolt.Tx, op *pb.Operation) error {
	for _, e := range opIndexes(op) {
		if err := tx.Bucket(e.bucket).Delete(e.key); err != nil {
			return err
		}
	}
	counts := tx.Bucket(bucketOpsCounts)
	k := countKey(op.GetKind(), op.GetStatus())
	if n := getUint(counts, k); n > 1 {
		return putUint(counts, k, n-1)
	}
	return counts.Delete(k)
}

// indexOp adds a row's index entries and count.
func indexOp(tx *bbolt.Tx, op *pb.Operation) error {
	for _, e := range opIndexes(op) {
		if err := tx.Bucket(e.bucket).Put(e.key, []byte{}); err != nil {
			return err
		}
	}
	counts := tx.Bucket(bucketOpsCounts)
	k := countKey(op.GetKind(), op.GetStatus())
	return putUint(counts, k, getUint(counts, k)+1)
}

// storedOp reads the row of id, nil when absent.
func storedOp(tx *bbolt.Tx, id string) (*pb.Operation, error) {
	v := tx.Bucket(bucketOps).Get(idKey(id))
	if v == nil {
		return nil, nil
	}
	op, err := decodeOp(v)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", clipText(id), err)
	}
	return op, nil
}

// applyPutOps applies a PutOps command inside tx: every change is checked
// first (one invalid change refuses the command, nothing changes), then
// each applies in order when the stored status is its from. The answer is
// the applied flags, or the refusal; err is a storage failure. A change
// that applies moves its row to the feed position of log entry index.
func applyPutOps(tx *bbolt.Tx, m *pb.PutOps, index uint64) (resp any, err error) {
	changes := m.GetChanges()
	for i, c := range changes {
		if err := checkChange(c); err != nil {
			return fmt.Errorf("change %d: %w", i, err), nil
		}
	}
	ops := tx.Bucket(bucketOps)
	applied := make([]bool, len(changes))
	for i, c := range changes {
		op := c.GetOp()
		old, err := storedOp(tx, op.GetId())
		if err != nil {
			return nil, err
		}
		if old.GetStatus() != c.GetFrom() {
			continue
		}
		op.Version = old.GetVersion() + 1
		if ports.OpStatus(op.GetStatus()).Terminal() {
			op.Params, op.Sql, op.Args = nil, "", nil
		}
		v, err := encodeOp(op)
		if err != nil {
			return fmt.Errorf("change %d: %w", i, err), nil
		}
		if old != nil {
			if err := unindexOp(tx, old); err != nil {
				return nil, err
			}
		}
		if err := ops.Put(idKey(op.GetId()), v); err != nil {
			return nil, err
		}
		if err := indexOp(tx, op); err != nil {
			return nil, err
		}
		if err := feedOp(tx, op.GetId(), old != nil, index, m.GetFeedNonce()); err != nil {
			return nil, err
		}
		applied[i] = true
	}
	return applied, nil
}

// applyPurgeOps removes up to the command's limit (at most maxPurgeOps)
// terminal rows whose TerminalAt is before its cutoff, oldest first, and
// answers how many.
func applyPurgeOps(tx *bbolt.Tx, m *pb.PurgeOps) (resp any, err error) {
	limit := min(int(m.GetLimit()), maxPurgeOps)
	cutoff := timeKey(m.GetCutoff())
	var ids []string
	c := tx.Bucket(bucketOpsTerminal).Cursor()
	for k, _ := c.First(); k != nil && len(ids) < limit; k, _ = c.Next() {
		if len(k) < timeKeyLen || bytes.Compare(k[:timeKeyLen], cutoff) >= 0 {
			break
		}
		ids = append(ids, string(k[timeKeyLen:]))
	}
	ops := tx.Bucket(bucketOps)
	for _, id := range ids {
		op, err := storedOp(tx, id)
		if err != nil {
			return nil, err
		}
		if op == nil {
			return nil, fmt.Errorf("terminal index names operation %s, which is not stored", clipText(id))
		}
		if err := unindexOp(tx, op); err != nil {
			return nil, err
		}
		if err := unfeedOp(tx, id); err != nil {
			return nil, err
		}
		if err := ops.Delete(idKey(id)); err != nil {
			return nil, err
		}
	}
	return len(ids), nil
}

// --- reads -------------------------------------------------------------------

// getOp returns the operation id, or ErrNotFound.
func (f *fsm) getOp(id string) (ports.Operation, error) {
	var out ports.Operation
	err := f.view(func(tx *bbolt.Tx) error {
		if checkID(id) != nil {
			return fmt.Errorf("operation %q: %w", clipText(id), ports.ErrNotFound)
		}
		op, err := storedOp(tx, id)
		if err != nil {
			return err
		}
		if op == nil {
			return fmt.Errorf("operation %s: %w", id, ports.ErrNotFound)
		}
		out = opFromPB(op)
		return nil
	})
	return out, err
}

// dueOps returns up to limit Pending or Retrying operations due at or
// before now, from the due index.
func (f *fsm) dueOps(now time.Time, limit int) ([]ports.Operation, error) {
	var out []ports.Operation
	upTo := keyTime(now)
	err := f.view(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketOpsDue).Cursor()
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			if bytes.Compare(k[:timeKeyLen], upTo) > 0 {
				break
			}
			op, err := indexedOp(tx, k[timeKeyLen:])
			if err != nil {
				return err
			}
			out = append(out, op)
		}
		return nil
	})
	return out, err
}

// indexedOp reads the row an index entry names.
func indexedOp(tx *bbolt.Tx, id []byte) (ports.Operation, error) {
	op, err := storedOp(tx, string(id))
	if err != nil {
		return ports.Operation{}, err
	}
	if op == nil {
		return ports.Operation{}, fmt.Errorf("an index names operation %s, which is not stored", clipText(string(id)))
	}
	return opFromPB(op), nil
}

// encodeOpCursor and decodeOpCursor: a List cursor is the created index
// key of the page's last item, in unpadded URL-safe base64.
func encodeOpCursor(key []byte) string { return base64.RawURLEncoding.EncodeToString(key) }

func decodeOpCursor(c string) ([]byte, error) { return decodeKey(c, "cursor", timeKeyLen) }

// decodeKey reads an index key handed out in base64: a prefix of n bytes
// (a time, a log index) followed by an id of 1 to maxIDLen bytes;
// anything else is ErrInvalid, named what.
func decodeKey(s, what string, n int) ([]byte, error) {
	if len(s) > base64.RawURLEncoding.EncodedLen(n+maxIDLen) {
		return nil, fmt.Errorf("malformed %s: %w", what, ports.ErrInvalid)
	}
	k, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(k) <= n {
		return nil, fmt.Errorf("malformed %s: %w", what, ports.ErrInvalid)
	}
	return k, nil
}

// listOps walks the created index from the newest key below the cursor
// (and below CreatedTo) down to CreatedFrom, keeping the rows that match
// f, until it has one more than the page.
func (f *fsm) listOps(flt ports.OpFilter, limit int, after []byte) (ports.OpPage, error) {
	var upper []byte // exclusive
	if !flt.CreatedTo.IsZero() {
		upper = keyTime(flt.CreatedTo)
	}
	if after != nil && (upper == nil || bytes.Compare(after, upper) < 0) {
		upper = after
	}
	var lower []byte // inclusive
	if !flt.CreatedFrom.IsZero() {
		lower = keyTime(flt.CreatedFrom)
	}
	var page ports.OpPage
	var keys [][]byte
	err := f.view(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketOpsCreated).Cursor()
		var k []byte
		if upper == nil {
			k, _ = c.Last()
		} else if k, _ = c.Seek(upper); k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
		for ; k != nil && len(page.Items) <= limit; k, _ = c.Prev() {
			if upper != nil && bytes.Compare(k, upper) >= 0 {
				continue
			}
			if lower != nil && bytes.Compare(k[:timeKeyLen], lower) < 0 {
				break
			}
			op, err := indexedOp(tx, k[timeKeyLen:])
			if err != nil {
				return err
			}
			if opMatches(op, flt) {
				page.Items = append(page.Items, op)
				keys = append(keys, bytes.Clone(k))
			}
		}
		return nil
	})
	if err != nil {
		return ports.OpPage{}, err
	}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		page.Next = encodeOpCursor(keys[limit-1])
	}
	return page, nil
}

// opMatches applies the filter's kind, statuses and target (the created
// range is the walk's).
func opMatches(op ports.Operation, f ports.OpFilter) bool {
	return (f.Kind == "" || op.Kind == f.Kind) &&
		(len(f.Statuses) == 0 || slices.Contains(f.Statuses, op.Status)) &&
		(f.Target == "" || op.Target == f.Target)
}

// opStats reads the counts and the first buffered key of each kind.
func (f *fsm) opStats() (ports.OpStats, error) {
	var out ports.OpStats
	err := f.view(func(tx *bbolt.Tx) error {
		counts, buffered := tx.Bucket(bucketOpsCounts), tx.Bucket(bucketOpsBuffered)
		for _, kind := range opKinds {
			n := func(st ports.OpStatus) int64 { return int64(getUint(counts, countKey(string(kind), string(st)))) }
			ks := ports.OpKindStats{
				Kind:     kind,
				Backlog:  n(ports.OpPending) + n(ports.OpRetrying),
				Parked:   n(ports.OpParked),
				Terminal: n(ports.OpDelivered) + n(ports.OpFailed) + n(ports.OpDiscarded),
			}
			prefix := append([]byte(kind), 0)
			if k, _ := buffered.Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(k) >= len(prefix)+timeKeyLen {
				ks.OldestBufferedAt = timeFromKey(k[len(prefix):])
			}
			out.Kinds = append(out.Kinds, ks)
		}
		return nil
	})
	return out, err
}

package raftbuffer

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/siteline/outbox/ports"
)

// The change feed of the cached operations: every row has one entry in
// ops_changes, keyed by its position, the Raft log index of the entry that
// last changed it followed by its id; ops_changed holds each row's index,
// to find that entry again. Both are written in the Apply transaction, so
// every node holds the same positions. A row stored before the feed existed
// has index 0 (no ops_changed entry), so it comes first; so does a change
// committed by a leader that did not know the feed yet (see feedOp).
var (
	bucketOpsChanges = []byte("ops_changes") // index (8 bytes) + id → empty
	bucketOpsChanged = []byte("ops_changed") // id key → index of the row's last change

	// keyFeed marks a file whose feed is kept (1); keyEpoch holds the
	// feed's epoch once a row was stored.
	keyFeed  = []byte("feed")
	keyEpoch = []byte("feed_epoch")
)

// feedBuckets are the buckets of the change feed.
var feedBuckets = [][]byte{bucketOpsChanges, bucketOpsChanged}

// feedV1 is the feed's layout written in meta/feed.
const feedV1 = 1

// positionLen is the length of the log index in a position.
const positionLen = 8

// feedKey is the position of a change of id by log entry index.
func feedKey(index uint64, id string) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, positionLen+len(id)), index), id...)
}

// upgradeFeed gives a file written before the feed existed its feed: every
// row it holds gets index 0. It depends only on the file's rows, so every
// node that upgrades the same file gets the same feed. A file that keeps
// the feed already is left as it is.
func upgradeFeed(tx *bbolt.Tx) error {
	m := tx.Bucket(bucketMeta)
	switch v := getUint(m, keyFeed); v {
	case feedV1:
		return nil
	case 0:
	default:
		return fmt.Errorf("feed layout %d is newer than this program knows (%d)", v, feedV1)
	}
	changes := tx.Bucket(bucketOpsChanges)
	err := tx.Bucket(bucketOps).ForEach(func(k, _ []byte) error {
		id, err := idFromKey(k)
		if err != nil {
			return err
		}
		return changes.Put(feedKey(0, id), []byte{})
	})
	if err != nil {
		return fmt.Errorf("upgrade the change feed: %w", err)
	}
	return putUint(m, keyFeed, feedV1)
}

// idFromKey is the id whose key (idKey) is k.
func idFromKey(k []byte) (string, error) {
	switch {
	case len(k) == 17 && k[0] == 1:
		return uuid.UUID(k[1:]).String(), nil
	case len(k) > 1 && k[0] == 2:
		return string(k[1:]), nil
	}
	return "", fmt.Errorf("operation key %x is malformed", k)
}

// feedOp moves the feed entry of id to the change made by log entry
// index, a PutOps command carrying nonce. A command without a nonce was
// written by a leader of a version before the feed: its change has no
// position (index 0), as it would on a node that applied the command
// before it was upgraded. The first command with a nonce that stores a
// row fixes the epoch: its nonce, in hex. A row stored before (known) has
// an entry to move; a new one has none.
func feedOp(tx *bbolt.Tx, id string, known bool, index uint64, nonce []byte) error {
	if len(nonce) != feedNonceLen {
		index = 0
	}
	if known {
		if err := unfeedOp(tx, id); err != nil {
			return err
		}
	}
	if err := tx.Bucket(bucketOpsChanges).Put(feedKey(index, id), []byte{}); err != nil {
		return err
	}
	if index == 0 {
		return nil
	}
	if err := putUint(tx.Bucket(bucketOpsChanged), idKey(id), index); err != nil {
		return err
	}
	m := tx.Bucket(bucketMeta)
	if m.Get(keyEpoch) != nil {
		return nil
	}
	return m.Put(keyEpoch, []byte(hex.EncodeToString(nonce)))
}

// unfeedOp removes the feed entry of id.
func unfeedOp(tx *bbolt.Tx, id string) error {
	changed := tx.Bucket(bucketOpsChanged)
	k := idKey(id)
	if err := tx.Bucket(bucketOpsChanges).Delete(feedKey(getUint(changed, k), id)); err != nil {
		return err
	}
	return changed.Delete(k)
}

// feedNonceLen is the length of a PutOps command's feed nonce: random
// bytes the leader draws, so that two groups (a site rebuilt from nothing
// included, whose first entries have the same index and term and may
// carry the same id) never share an epoch.
const feedNonceLen = 16

// encodePosition and decodePosition: a position is a feed key in unpadded
// URL-safe base64.
func encodePosition(key []byte) string { return base64.RawURLEncoding.EncodeToString(key) }

func decodePosition(p string) ([]byte, error) { return decodeKey(p, "position", positionLen) }

// changes reads up to limit rows of the feed after the position after
// (nil for the start), with the epoch.
func (f *fsm) changes(after []byte, limit int) (ports.OpChanges, error) {
	var out ports.OpChanges
	if after != nil {
		out.Next = encodePosition(after)
	}
	var last []byte
	err := f.view(func(tx *bbolt.Tx) error {
		out.Epoch = string(tx.Bucket(bucketMeta).Get(keyEpoch))
		c := tx.Bucket(bucketOpsChanges).Cursor()
		var k []byte
		if after == nil {
			k, _ = c.First()
		} else if k, _ = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, _ = c.Next()
		}
		for ; k != nil && len(out.Items) < limit; k, _ = c.Next() {
			if len(k) <= positionLen {
				return fmt.Errorf("feed key %x is malformed", k)
			}
			op, err := indexedOp(tx, k[positionLen:])
			if err != nil {
				return err
			}
			out.Items = append(out.Items, op)
			last = k
		}
		if last != nil {
			out.Next = encodePosition(last)
		}
		return nil
	})
	if err != nil {
		return ports.OpChanges{}, err
	}
	return out, nil
}

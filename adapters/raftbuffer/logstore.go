package raftbuffer

import (
	"sync"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// logStore is the Raft log and stable store (raft.db) with its pages
// dropped from the node's page tables now and then, as the FSM does for
// buffer.db: bbolt maps the file read-only, and every page it reads —
// the entries the leader sends to a follower behind the log cache, every
// entry a compaction deletes — stays mapped and counts in the RSS, so the
// RSS would grow with the log's peak size (hundreds of MB while a million
// notifications are buffered faster than snapshots compact the log). The
// pages stay in the page cache and come back on the next read.
//
// bbolt remaps only while it commits a write transaction, so every method
// that writes, and Close, holds mu, and dropFileMapping runs under it: the
// range it finds in /proc/self/maps is raft.db's until mu is released.
// Reads take no lock; dropping pages under a reader only makes it read
// them again from the page cache.
type logStore struct {
	*raftboltdb.BoltStore
	path string // absolute, as /proc/self/maps names the file

	mu     sync.Mutex
	writes int // write transactions since the last drop
}

// logDropEvery is how many write transactions of raft.db pass between two
// drops of its mapping: at most a few MB of log read back in between.
const logDropEvery = 1024

func (s *logStore) wrote() {
	if s.writes++; s.writes >= logDropEvery {
		s.drop()
	}
}

// drop drops raft.db's pages from the page tables; mu is held.
func (s *logStore) drop() {
	s.writes = 0
	dropFileMapping(s.path)
}

// StoreLog implements raft.LogStore.
func (s *logStore) StoreLog(l *raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.wrote()
	return s.BoltStore.StoreLog(l)
}

// StoreLogs implements raft.LogStore.
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.wrote()
	return s.BoltStore.StoreLogs(logs)
}

// logDeleteChunk is how many entries one write transaction of a
// compaction deletes.
const logDeleteChunk = 16384

// DeleteRange implements raft.LogStore. A compaction after a long burst
// can delete most of a million entries; in one transaction bbolt would
// read every page of them into the mapping and hold every rewritten page
// in memory until the commit (nodes peaked at 660–820 MB of RSS), so it
// deletes logDeleteChunk entries a transaction, oldest first (a failure
// leaves a shorter log, never a hole), and drops the mapping after each.
func (s *logStore) DeleteRange(lo, hi uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for from := lo; from <= hi; {
		to := hi
		if hi-from >= logDeleteChunk {
			to = from + logDeleteChunk - 1
		}
		err := s.BoltStore.DeleteRange(from, to)
		s.drop()
		if err != nil {
			return err
		}
		if to == hi {
			break
		}
		from = to + 1
	}
	return nil
}

// Set implements raft.StableStore.
func (s *logStore) Set(k, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.wrote()
	return s.BoltStore.Set(k, v)
}

// SetUint64 implements raft.StableStore.
func (s *logStore) SetUint64(k []byte, v uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.wrote()
	return s.BoltStore.SetUint64(k, v)
}

// Close closes raft.db (bbolt unmaps it) under mu.
func (s *logStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.BoltStore.Close()
}

package raftbuffer

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// buffer.db is written without an fsync per transaction. The Raft log is
// what makes an entry durable: it is synced on a quorum before the entry
// commits, and buffer.db is only the state that applying the log produced.
// Syncing that state too cost each commit two more fsyncs on its path (bbolt
// syncs the pages, then the meta page), about a sixth of a cached call's
// time.
//
// A process that dies (kill -9, a crash) loses nothing unsynced: the
// writes are in the kernel's page cache, which outlives the process, and
// each transaction is whole there. An operating system that stops (power
// loss, a kernel panic) may leave the file torn, its meta page on disk but
// not the pages it points to; bbolt cannot tell. So while the file is open
// a marker beside it holds the kernel's boot id, written and synced before
// the first unsynced write. A clean close syncs the file and removes the
// marker. At the next open a marker from the same boot means the page cache
// survived and the file is trusted; a marker from another boot means it may
// be torn, and it is set aside: the node starts with an empty file, and
// Raft restores the newest snapshot and applies the log after it (the log
// keeps every entry after the last snapshot, so nothing is missing).
//
// Where the kernel gives no boot id (outside Linux), buffer.db is synced
// on every transaction as before, and no marker is written.

// unsyncedSuffix names the marker beside buffer.db; untrustedSuffix the
// file set aside after another boot.
const (
	unsyncedSuffix  = ".unsynced"
	untrustedSuffix = ".untrusted"
)

// bootID returns an identifier of the running kernel's boot, "" where the
// platform has none. A variable for tests, which play another boot.
var bootID = kernelBootID

// syncFailed is the marker of a file whose last sync failed: it matches no
// boot.
const syncFailed = "sync-failed"

// setAsideTorn renames the buffer file at path to path.untrusted (replacing
// the one a previous restart set aside) when a marker says it was written
// unsynced during another boot, or its last sync failed, and reports
// whether it did. The marker stays: openFSM rewrites it for this boot, and
// until then a second power loss finds it again.
func setAsideTorn(path string, log *slog.Logger) (bool, error) {
	mark, err := os.ReadFile(path + unsyncedSuffix)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", path+unsyncedSuffix, err)
	}
	boot := bootID()
	if boot != "" && string(bytes.TrimSpace(mark)) == boot {
		return false, nil // same boot: every write is in the page cache
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	aside := path + untrustedSuffix
	if err := os.Rename(path, aside); err != nil {
		return false, fmt.Errorf("set aside %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return false, err
	}
	log.Warn("raftbuffer: the buffer file was written unsynced before the machine restarted, or its last sync "+
		"failed, and may be torn; it is set aside and the node rebuilds it from its snapshot and log", "file", aside)
	return true, nil
}

// markUnsynced writes the marker for this boot and syncs it, before the
// first unsynced write.
func markUnsynced(path, boot string) error {
	mark := path + unsyncedSuffix
	if err := writeFileSync(mark, bytes.NewReader([]byte(boot+"\n"))); err != nil {
		return fmt.Errorf("write %s: %w", mark, err)
	}
	return syncDir(filepath.Dir(path))
}

// clearUnsynced removes the marker once the file is synced.
func clearUnsynced(path string) error {
	if err := os.Remove(path + unsyncedSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path+unsyncedSuffix, err)
	}
	return syncDir(filepath.Dir(path))
}

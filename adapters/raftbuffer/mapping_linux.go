package raftbuffer

import (
	"syscall"

	"go.etcd.io/bbolt"
)

// dropMapping drops buffer.db's pages from the process's page tables
// (MADV_DONTNEED on bbolt's shared, read-only mapping): they stay in the
// page cache and come back on the next access, but no longer count in the
// node's RSS. Without it every page bbolt ever read stays mapped, and the
// RSS of a node with a million buffered notifications grows with its file.
// It runs inside a write transaction, the only place bbolt remaps, so the
// range is the current mapping; tx.Size() is the used part of it.
func dropMapping(tx *bbolt.Tx) {
	info := tx.DB().Info()
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, info.Data, uintptr(tx.Size()), syscall.MADV_DONTNEED)
}

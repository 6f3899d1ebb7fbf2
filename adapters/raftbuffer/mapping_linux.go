package raftbuffer

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
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

// dropFileMapping drops the pages of every mapping of the file at path (an
// absolute path) from the process's page tables, as dropMapping does for
// buffer.db, finding the ranges in /proc/self/maps. The caller makes sure
// no mapping of the file is replaced while it runs (see logStore). A
// failure to read the maps leaves the pages mapped: only the RSS pays.
func dropFileMapping(path string) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode path; bbolt's mapping is
		// read-only and shared ("r--s"), whose pages the page cache holds.
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "r--s" || !strings.HasSuffix(line, " "+path) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED)
	}
}

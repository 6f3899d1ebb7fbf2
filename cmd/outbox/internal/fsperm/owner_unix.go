//go:build unix

package fsperm

import (
	"io/fs"
	"syscall"
)

// Owner returns the uid that owns the file fi describes.
func Owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

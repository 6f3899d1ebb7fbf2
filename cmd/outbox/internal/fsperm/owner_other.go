//go:build !unix

package fsperm

import "io/fs"

// Owner reports no owner where files have no Unix uid.
func Owner(fs.FileInfo) (int, bool) { return 0, false }

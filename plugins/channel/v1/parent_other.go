//go:build !unix

package channel

import "os"

// pipeReaderGone is nil where the system cannot tell that a pipe lost its
// reader: only the parent check applies.
func pipeReaderGone(*os.File) func() bool { return nil }

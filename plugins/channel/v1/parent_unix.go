//go:build unix

package channel

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeReaderGone returns a check of whether f, when it is the write end of
// a pipe, has lost its last reader (poll reports POLLERR on Linux, POLLHUP on
// the BSDs), or nil when f is no pipe.
func pipeReaderGone(f *os.File) func() bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	isPipe := false
	if cerr := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		isPipe = unix.Fstat(int(fd), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
	}); cerr != nil || !isPipe {
		return nil
	}
	return func() bool {
		gone := false
		_ = rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd)}}
			n, err := unix.Poll(fds, 0)
			gone = err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
		})
		return gone
	}
}

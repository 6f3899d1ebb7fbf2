// Package proctest reads Linux's /proc for the tests of process lifetimes:
// whether a process lives, its parent, its children, and waiting until a
// process is gone. The tests that kill central, a host or a plugin's parent
// use it to show that no plugin process outlives them.
package proctest

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stat returns the state and parent pid of process pid from /proc/PID/stat;
// ok is false when the process does not exist.
func stat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// Alive reports whether process pid exists and is not a zombie (a killed
// process whose parent has not reaped it yet is dead for this purpose).
func Alive(pid int) bool {
	state, _, ok := stat(pid)
	return ok && state != 'Z' && state != 'X'
}

// Parent returns the parent pid of process pid, failing the test when the
// process does not exist.
func Parent(t testing.TB, pid int) int {
	t.Helper()
	_, ppid, ok := stat(pid)
	if !ok {
		t.Fatalf("no process %d", pid)
	}
	return ppid
}

// Children returns the live processes whose parent is pid.
func Children(t testing.TB, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := stat(child); ok && ppid == pid && Alive(child) {
			out = append(out, child)
		}
	}
	return out
}

// ReadPID reads the first line a helper process printed on r, prefix and
// then a process id, and returns that id once it names a live process; a
// test that fails later kills it (SIGKILL) at its end.
func ReadPID(t testing.TB, r io.Reader, prefix string) int {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	pid, aerr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, prefix)))
	if err != nil || aerr != nil || !Alive(pid) {
		t.Fatalf("the helper printed %q (%v, %v), not %q and a live process id", line, err, aerr, prefix)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// WaitGone waits until every process of pids is gone and returns how long
// that took. When one still lives after within, it kills the ones left
// with SIGKILL (so that a failed test leaves nothing running) and fails the
// test, saying what.
func WaitGone(t testing.TB, within time.Duration, what string, pids ...int) time.Duration {
	t.Helper()
	start := time.Now()
	left := pids
	for len(left) > 0 {
		if time.Since(start) > within {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still run %s after %s", left, within, what)
		}
		var still []int
		for _, pid := range left {
			if Alive(pid) {
				still = append(still, pid)
			}
		}
		left = still
		if len(left) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(start)
}

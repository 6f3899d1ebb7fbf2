package opscli

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the terminal side a command reads its
// standard input from, and the other side a test types on.
func openPTY(t *testing.T) (tty, typist *os.File) {
	t.Helper()
	typist, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { typist.Close() })
	fd := int(typist.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Skipf("the pseudo-terminal's number: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty, typist
}

// TestUsersPutPromptsOnATerminal: on a terminal, outbox users put asks a
// new user's password without offering to keep a current one, and an
// existing user's saying that empty keeps it.
func TestUsersPutPromptsOnATerminal(t *testing.T) {
	c := newTestCentral(t)
	put := func(user, typed string) (int, string) {
		t.Helper()
		tty, typist := openPTY(t)
		if _, err := typist.WriteString(typed); err != nil {
			t.Fatal(err)
		}
		var out, errw bytes.Buffer
		code := Users(t.Context(), Env{Environ: c.environ(), Stdin: tty, Stdout: &out, Stderr: &errw, Version: "test", TLS: noTLS},
			[]string{"put", user, "-role", "viewer"})
		return code, errw.String()
	}
	code, stderr := put("carol", "carol's pw\ncarol's pw\n")
	if code != exitOK || !strings.HasPrefix(stderr, "Password for the new user carol: \nRepeat it: \n") || strings.Contains(stderr, "empty keeps") {
		t.Fatalf("a new user: exit %d, stderr %q", code, stderr)
	}
	if !jsonEqual(t, c.last().Body, `{"role":"viewer","password":"carol's pw"}`) {
		t.Errorf("body %s", c.last().Body)
	}
	code, stderr = put("carol", "\n")
	if code != exitOK || !strings.HasPrefix(stderr, "New password for carol (empty keeps the current one): \n") {
		t.Fatalf("an existing user: exit %d, stderr %q", code, stderr)
	}
	if !jsonEqual(t, c.last().Body, `{"role":"viewer"}`) {
		t.Errorf("body %s", c.last().Body)
	}
	n := len(c.requests())
	if code, stderr = put("dave", "\n"); code != exitUsage || stderr != "Password for the new user dave: \noutbox users put: no password given: a new user needs one\n" {
		t.Errorf("a new user, no password: exit %d, stderr %q", code, stderr)
	}
	if reqs := c.requests(); len(reqs) != n+1 || reqs[n].Method != "GET" {
		t.Errorf("a new user without a password was put")
	}
}

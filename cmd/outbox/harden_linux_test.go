package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCentralEnvironmentUnreadableToItsUser plays a plugin (or any process)
// running as central's user that reads /proc/<central>/environ, where the
// database DSN and the variables env: references name live. The real
// binary runs `outbox central`; a reader of the same user must be refused.
// Root reads any process's /proc files, so when the test runs as root (as
// in CI) both central and the reader run as the user nobody. A control
// reader first shows that an ordinary process of that user is readable
// here, so the refusal is central's doing.
func TestCentralEnvironmentUnreadableToItsUser(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat to read /proc with")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep for the control process")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("running as root and no user nobody to run central and the reader as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	// A directory central's user can enter, with the binary and the data.
	dir, err := os.MkdirTemp("", "outbox-dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "outbox")
	copyFile(t, outboxBinary(t), bin, 0o755)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	const canary = "OUTBOX_SECRET_CANARY=a-value-only-central-holds"
	asUser := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}
	read := func(pid int) (string, error) {
		out, err := asUser(exec.Command(cat, fmt.Sprintf("/proc/%d/environ", pid))).CombinedOutput()
		return string(out), err
	}

	// The control: a process of the same user that did not make itself
	// undumpable is readable.
	ctl := asUser(exec.Command(sleep, "300"))
	ctl.Env = []string{canary}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Process.Kill(); _ = ctl.Wait() })
	if out, err := read(ctl.Process.Pid); err != nil || !strings.Contains(out, "CANARY") {
		t.Skipf("this system hides even ordinary processes' environment from their user (%v), so the test proves nothing here", err)
	}

	config := filepath.Join(dir, "central.yaml")
	if err := os.WriteFile(config, []byte("plugins: {builtin: [none]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := asUser(exec.Command(bin, "central", "-config", config))
	cmd.Env = childEnv(canary, "OUTBOX_DATA_DIR="+data, "OUTBOX_LOG_FORMAT=json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range lines { // drain, so that Wait can close the pipe
		}
		_ = cmd.Wait()
	})
	deadline := time.After(startTimeout)
	var seen []string
	for started := false; !started; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("central ended before it started:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			started = strings.Contains(l, `"msg":"central started"`)
		case <-deadline:
			t.Fatalf("central did not start within %s:\n%s", startTimeout, strings.Join(seen, "\n"))
		}
	}

	out, err := read(cmd.Process.Pid)
	if err == nil || strings.Contains(out, "CANARY") {
		// Not printed: it is this test's environment.
		t.Fatalf("a process of central's user read /proc/%d/environ (%d bytes, err %v)", cmd.Process.Pid, len(out), err)
	}
	if !strings.Contains(out, "Permission denied") {
		t.Errorf("the reader failed for another reason than a refusal: %v %s", err, out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

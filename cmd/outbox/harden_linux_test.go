package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
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

// TestPluginMemoryUnreadableToItsUser plays the review's scanner: a process
// running as the plugins' user — what a third-party plugin is — reads the
// e-mail plugin's /proc/<pid>/environ and mem after one delivery, looking
// for the SMTP password the plugin host resolved for it. The real binary
// serves the plugin (`outbox plugin serve email`, which is channel.Serve);
// the test's own plugin host starts it, as central does. When the test runs
// as root (root reads any process's /proc files), the plugin runs as the
// user nobody through setpriv — the wrapper configs/README.md shows — and
// so does the scanner. A control process of the same user first shows that
// the scanner reads an ordinary process, so the refusal is the plugin's
// doing.
func TestPluginMemoryUnreadableToItsUser(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep for the control process")
	}
	var (
		cred     *syscall.Credential
		setpriv  string
		socketGr string
	)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("running as root and no user nobody to run the plugin and the scanner as: %v", err)
		}
		g, err := user.LookupGroupId(u.Gid)
		if err != nil {
			t.Skipf("no group of nobody: %v", err)
		}
		if setpriv, err = exec.LookPath("setpriv"); err != nil {
			t.Skip("running as root and no setpriv to run the plugin as nobody")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		socketGr = g.Name
	}
	// The outbox binary and the scanner (this test binary), where the
	// plugins' user can run them.
	dir, err := os.MkdirTemp("", "outbox-plugin-dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "outbox")
	copyFile(t, outboxBinary(t), bin, 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	scanner := filepath.Join(dir, "scanner")
	copyFile(t, self, scanner, 0o755)
	asUser := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}
	scan := func(pid int, needle string) map[string]string {
		t.Helper()
		cmd := asUser(exec.Command(scanner))
		cmd.Env = childEnv(procScanEnv + "=" + strconv.Itoa(pid) + " " + needle)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scanner: %v\n%s", err, out)
		}
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if file, verdict, ok := strings.Cut(l, ": "); ok {
				got[file] = verdict
			}
		}
		return got
	}

	// The control: a process of the same user that did not make itself
	// undumpable is read, environment and memory.
	canary := "ctl-" + rand.Text()
	ctl := asUser(exec.Command(sleep, "300"))
	ctl.Env = []string{"OUTBOX_CANARY=" + canary}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Process.Kill(); _ = ctl.Wait() })
	if got := scan(ctl.Process.Pid, canary); got["environ"] != "found" || got["mem"] != "found" {
		t.Skipf("this system keeps even ordinary processes of a user from reading each other (%v), so the test proves nothing here", got)
	}

	// The plugin, started by a plugin host as central starts it, with the
	// SMTP password resolved from an env: reference.
	password := "smtp-pw-" + rand.Text()
	t.Setenv("OUTBOX_SECRET_TEST_SMTP_PASSWORD", password)
	envCanary := "env-" + rand.Text()
	p := pluginhost.Plugin{Type: "email", Command: bin, Args: []string{"plugin", "serve", "email"},
		Env: []string{"OUTBOX_PLUGIN_CANARY=" + envCanary}}
	if cred != nil {
		p.Args = append([]string{fmt.Sprintf("--reuid=%d", cred.Uid), fmt.Sprintf("--regid=%d", cred.Gid), "--clear-groups", "--", bin}, p.Args...)
		p.Command = setpriv
	}
	host, err := pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{p}, Logger: slog.New(slog.DiscardHandler),
		Secrets: secretref.Policy{EnvPrefix: "OUTBOX_SECRET_"}, SocketGroup: socketGr})
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Close() })
	ch, ok := host.Channel("email")
	if !ok {
		t.Fatal("no email channel")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The SMTP server is on loopback, which the policy refuses: the
	// delivery fails at once, after the plugin received the password.
	res := ch.Deliver(ctx, ports.Delivery{
		Notification: ports.Notification{ID: "0194f0d2-0000-7000-8000-0000000000ab", Type: "email", List: "ops",
			Subject: "s", Body: "b", CreatedAt: time.Now().UTC()},
		Targets: []string{"ops@example.com"},
		Settings: map[string]string{"host": "127.0.0.1", "port": "2525", "tls": "none", "from": "outbox@example.com",
			"auth": "plain", "username": "outbox", "password": "env:OUTBOX_SECRET_TEST_SMTP_PASSWORD"},
	})
	if res.Outcome == ports.OutcomeSuccess || strings.Contains(res.Error, password) {
		t.Fatalf("delivery: %v %q", res.Outcome, res.Error)
	}
	st := host.Status()
	if len(st) != 1 || st[0].PID <= 0 {
		t.Fatalf("plugin status %+v", st)
	}
	pid := st[0].PID

	got := scan(pid, envCanary)
	if got["environ"] != "error "+fmt.Sprintf("open /proc/%d/environ: permission denied", pid) {
		t.Errorf("a process of the plugin's user read its /proc/%d/environ: %s", pid, got["environ"])
	}
	got = scan(pid, password)
	if got["mem"] != "error "+fmt.Sprintf("open /proc/%d/mem: permission denied", pid) {
		t.Errorf("a process of the plugin's user read its /proc/%d/mem: %s (found means the SMTP password)", pid, got["mem"])
	}
}

package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/plugins/builtin"
	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// procStat returns the state and parent pid of process pid from
// /proc/PID/stat; ok is false when the process does not exist.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	_, rest, found := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !found || len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// alive reports whether process pid exists and is not a zombie (a process
// killed whose parent has not reaped it yet is dead for this purpose).
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// childrenOf returns the live processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
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
		if _, ppid, ok := procStat(child); ok && ppid == pid && alive(child) {
			out = append(out, child)
		}
	}
	return out
}

// TestCentralKilledLeavesNoPlugin kills central with SIGKILL: every plugin
// process it ran must be gone within seconds (on Linux by the parent-death
// signal central asks for, and by each plugin's own check of its parent).
func TestCentralKilledLeavesNoPlugin(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	p := start(t, t.TempDir(), childEnv("OUTBOX_LOG_FORMAT=json", "OUTBOX_NODE_ID=e2e-orphan"), "central")
	p.waitFor(t, `"msg":"central started"`, startTimeout)
	central := p.cmd.Process.Pid
	plugins := childrenOf(t, central)
	if len(plugins) != len(builtin.Types()) {
		t.Fatalf("central %d has children %v, want its %d built-in plugins", central, plugins, len(builtin.Types()))
	}
	for _, pid := range plugins {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !strings.Contains(string(cmdline), "plugin\x00serve\x00") {
			t.Fatalf("child %d of central is not a plugin: %q", pid, cmdline)
		}
	}
	gone, took := killCentral(t, p)
	if gone != len(plugins) {
		t.Fatalf("%d plugin processes seen at the kill, want %d", gone, len(plugins))
	}
	t.Logf("all %d plugin processes of central were gone %s after it was killed (SIGKILL)", gone,
		took.Round(time.Millisecond))
}

// pluginGrace is how long a plugin process may outlive a central killed
// with SIGKILL.
const pluginGrace = 15 * time.Second

// killCentral kills central p with SIGKILL, as a crash would, and waits
// until every plugin process it ran has exited too. It fails the test when
// one outlives central by pluginGrace (and kills it then). It returns how
// many plugin processes central had and how long after the kill the last
// of them was gone. Off Linux, where /proc does not name them, it only
// kills central.
func killCentral(t *testing.T, p *proc) (plugins int, took time.Duration) {
	t.Helper()
	var left []int
	if runtime.GOOS == "linux" {
		left = childrenOf(t, p.cmd.Process.Pid)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	killed := time.Now()
	plugins = len(left)
	for len(left) > 0 {
		if time.Since(killed) > pluginGrace {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("plugin processes %v still run %s after central was killed", left, pluginGrace)
		}
		var still []int
		for _, pid := range left {
			if alive(pid) {
				still = append(still, pid)
			}
		}
		left = still
		time.Sleep(10 * time.Millisecond)
	}
	return plugins, time.Since(killed)
}

// TestPluginServeStopsOnSIGTERM: `outbox plugin serve TYPE`, as central
// starts it, exits with status 0 on SIGTERM.
func TestPluginServeStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, childEnv(channel.Handshake.MagicCookieKey+"="+channel.Handshake.MagicCookieValue,
		"PLUGIN_PROTOCOL_VERSIONS=1", "TMPDIR="+dir), "plugin", "serve", "email")
	p.waitFor(t, "|grpc|", startTimeout) // go-plugin's handshake line: it serves
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, 15*time.Second); code != 0 {
		t.Fatalf("outbox plugin serve exited %d after SIGTERM, want 0:\n%s", code, p.Output())
	}
	if !strings.Contains(p.Output(), "SIGTERM: refusing new deliveries") {
		t.Errorf("no log line of the stop:\n%s", p.Output())
	}
	t.Logf("outbox plugin serve exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
}

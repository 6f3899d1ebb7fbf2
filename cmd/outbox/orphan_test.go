package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/pluginhost/proctest"

	"github.com/siteline/outbox/plugins/builtin"
	channel "github.com/siteline/outbox/plugins/channel/v1"
)

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
	plugins := proctest.Children(t, central)
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
		left = proctest.Children(t, p.cmd.Process.Pid)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	return len(left), proctest.WaitGone(t, pluginGrace, "central was killed", left...)
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

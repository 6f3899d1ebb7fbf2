package pluginhost_test

import (
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/siteline/outbox/adapters/pluginhost"
)

// TestPluginRunsAsAnotherUser runs the plugin as the user nobody through
// setpriv, as the README tells an operator to, with the socket group that
// lets central reach the plugin's socket: the plugin answers, and it runs as
// nobody. It needs root (to switch users) and setpriv.
func TestPluginRunsAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching a plugin to another user needs root here (an operator uses sudo with a rule instead)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	group, err := user.LookupGroupId(nobody.Gid)
	if err != nil {
		t.Skipf("no group of nobody: %v", err)
	}
	self := selfPlugin(t, "test")
	// The test binary, where nobody may run it.
	dir, err := os.MkdirTemp("", "outbox-plugin-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "plugin")
	in, err := os.Open(self.Command)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	in.Close()
	if cerr := out.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}

	p := self
	p.Command = setpriv
	p.Args = append([]string{"--reuid=" + nobody.Uid, "--regid=" + nobody.Gid, "--clear-groups", "--", bin}, self.Args...)
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{p}, SocketGroup: group.Name})
	got := reported(t, deliver(t, mustChannel(t, h, "test"), delivery(map[string]string{"report": ""}, "t")))
	if want, _ := strconv.Atoi(nobody.Uid); got.UID != want {
		t.Fatalf("the plugin runs as uid %d, want nobody's %d", got.UID, want)
	}
}

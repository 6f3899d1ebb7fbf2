package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/pluginhost"
)

func TestHostPlugins(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"jsonpost": 0o755, "fax": 0o755, "notes": 0o644, "jsonpost.sha256": 0o755} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	// A link to a binary elsewhere (a versioned install) is a plugin too.
	target := filepath.Join(t.TempDir(), "sms-2.0")
	if err := os.WriteFile(target, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "sms")); err != nil {
		t.Fatal(err)
	}
	pager := filepath.Join(t.TempDir(), "pager")
	if err := os.WriteFile(pager, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pin := strings.Repeat("ab", 32)
	cfg := PluginsConfig{
		Builtin: []string{"email"}, Dir: dir, MaxConcurrency: 16,
		External: []ExternalPlugin{
			{Type: "jsonpost", SHA256: strings.ToUpper(pin), MaxConcurrency: 4},
			{Type: "pager", Command: pager, Args: []string{"-v"}},
		},
	}
	got, err := cfg.hostPlugins("/usr/bin/outbox")
	if err != nil {
		t.Fatal(err)
	}
	want := []pluginhost.Plugin{
		{Type: "email", Command: "/usr/bin/outbox", Args: []string{"plugin", "serve", "email"}, MaxConcurrency: 16},
		{Type: "fax", Command: filepath.Join(dir, "fax"), MaxConcurrency: 16},
		{Type: "jsonpost", Command: filepath.Join(dir, "jsonpost"), SHA256: pin, MaxConcurrency: 4},
		{Type: "sms", Command: filepath.Join(dir, "sms"), MaxConcurrency: 16},
		{Type: "pager", Command: pager, Args: []string{"-v"}, MaxConcurrency: 16},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d plugins %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Type != w.Type || g.Command != w.Command || strings.Join(g.Args, " ") != strings.Join(w.Args, " ") ||
			g.SHA256 != w.SHA256 || g.MaxConcurrency != w.MaxConcurrency {
			t.Errorf("plugin %d: got %+v, want %+v", i, g, w)
		}
	}

	// All built-ins by default; none with [none].
	all, err := PluginsConfig{}.hostPlugins("/x")
	if err != nil || len(all) != 4 {
		t.Errorf("default: %d plugins, %v", len(all), err)
	}
	none, err := PluginsConfig{Builtin: []string{"none"}}.hostPlugins("/x")
	if err != nil || len(none) != 0 {
		t.Errorf("none: %d plugins, %v", len(none), err)
	}

	// A file taking a running built-in's type, or a pin for a missing file.
	if err := os.WriteFile(filepath.Join(dir, "email"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (PluginsConfig{Dir: dir}).hostPlugins("/x"); err == nil || !strings.Contains(err.Error(), "built-in channel \"email\"") {
		t.Errorf("a plugin file named email: %v", err)
	}
	_, err = PluginsConfig{Builtin: []string{"none"}, Dir: dir, External: []ExternalPlugin{{Type: "mms"}}}.hostPlugins("/x")
	if err == nil || !strings.Contains(err.Error(), `no executable "mms"`) {
		t.Errorf("pin of a missing file: %v", err)
	}
	if _, err := (PluginsConfig{Dir: filepath.Join(dir, "nope")}).hostPlugins("/x"); err == nil {
		t.Error("a missing plugins.dir was accepted")
	}
}

// TestPluginFilesWritableByOthersRefused: a third-party plugin binary, or
// the directory holding it, that its group or others may write is refused
// at start, naming the path and its mode: whoever could replace it would
// run code as central's user. Before, central ran it.
func TestPluginFilesWritableByOthersRefused(t *testing.T) {
	bin := func(dir, name string, mode os.FileMode) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return path
	}
	chmod := func(path string, mode os.FileMode) string {
		t.Helper()
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	open := chmod(t.TempDir(), 0o775)
	bin(open, "jsonpost", 0o755)
	closed := t.TempDir()
	bin(closed, "fax", 0o757)
	ok := t.TempDir()
	good := bin(ok, "good", 0o755)
	elsewhere := chmod(t.TempDir(), 0o777)
	target := bin(elsewhere, "sms-2.0", 0o755)
	links := t.TempDir()
	if err := os.Symlink(target, filepath.Join(links, "sms")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg  PluginsConfig
		want string
	}{
		"group-writable plugins.dir": {PluginsConfig{Dir: open}, "plugins.dir: " + open + " has mode drwxrwxr-x: writable by its group or others"},
		"others-writable binary":     {PluginsConfig{Dir: closed}, "plugins.dir: " + filepath.Join(closed, "fax") + " has mode -rwxr-xrwx"},
		"link to a writable dir":     {PluginsConfig{Dir: links}, "plugins.dir: " + elsewhere + " has mode drwxrwxrwx"},
		"external in a writable dir": {PluginsConfig{External: []ExternalPlugin{{Type: "x", Command: filepath.Join(open, "jsonpost")}}},
			"plugins.external[0].command: " + open + " has mode drwxrwxr-x"},
		"external missing": {PluginsConfig{External: []ExternalPlugin{{Type: "x", Command: filepath.Join(ok, "nope")}}},
			"plugins.external[0].command: lstat " + filepath.Join(ok, "nope") + ": no such file or directory"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.cfg.hostPlugins("/x")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	if _, err := (PluginsConfig{Dir: ok, External: []ExternalPlugin{{Type: "y", Command: good}}}).hostPlugins("/x"); err != nil {
		t.Fatalf("a plugin only its owner may write was refused: %v", err)
	}
}

// TestPluginAncestorsWritableByOthersRefused plays the attacker of the
// second review: plugins/ is 0755 but its parent is 0777, so anyone may
// rename plugins/ away and put a directory of their own in its place, whose
// binaries central runs (plugins are executed again by path at every
// restart). Every directory on the way to a third-party plugin, through
// symbolic links too, is checked from / down; a sticky directory (as /tmp,
// where the tests' directories live) is accepted when root or central's
// user owns it and the entry the path goes through. Before, central ran
// plugins/evil.
func TestPluginAncestorsWritableByOthersRefused(t *testing.T) {
	mkdir := func(path string, mode os.FileMode) string {
		t.Helper()
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return path
	}
	bin := func(dir, name string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	base := t.TempDir()
	t.Chdir(base) // for the relative paths
	// The review's layout: a 0777 parent of a 0755 plugins/.
	open := mkdir(filepath.Join(base, "open"), 0o777)
	plugins := mkdir(filepath.Join(open, "plugins"), 0o755)
	bin(plugins, "evil")
	// A group-writable directory two levels above an external binary.
	group := mkdir(filepath.Join(base, "group"), 0o775)
	deep := mkdir(filepath.Join(mkdir(filepath.Join(group, "opt"), 0o755), "bin"), 0o755)
	pager := bin(deep, "pager")
	// A safe directory reached through a link that lives in open/.
	safe := mkdir(filepath.Join(base, "safe"), 0o755)
	safePlugins := mkdir(filepath.Join(safe, "plugins"), 0o755)
	bin(safePlugins, "fax")
	if err := os.Symlink(safePlugins, filepath.Join(open, "link")); err != nil {
		t.Fatal(err)
	}
	// A safe link to the safe directory, and a sticky directory like /tmp.
	good := mkdir(filepath.Join(base, "good"), 0o755)
	if err := os.Symlink(safePlugins, filepath.Join(good, "plugins")); err != nil {
		t.Fatal(err)
	}
	sticky := mkdir(filepath.Join(base, "sticky"), 0o777|os.ModeSticky)
	stickyPlugins := mkdir(filepath.Join(sticky, "plugins"), 0o755)
	bin(stickyPlugins, "sms")

	for name, c := range map[string]struct {
		cfg  PluginsConfig
		want string
	}{
		"others-writable parent of plugins.dir": {PluginsConfig{Dir: plugins},
			"plugins.dir: " + open + " has mode drwxrwxrwx: writable by its group or others"},
		"group-writable ancestor of an external command": {PluginsConfig{External: []ExternalPlugin{{Type: "pager", Command: pager}}},
			"plugins.external[0].command: " + group + " has mode drwxrwxr-x: writable by its group or others"},
		"link in an others-writable directory": {PluginsConfig{Dir: filepath.Join(open, "link")},
			"plugins.dir: " + open + " has mode drwxrwxrwx"},
		"relative path": {PluginsConfig{Dir: "open/plugins"},
			"plugins.dir: " + open + " has mode drwxrwxrwx"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.cfg.hostPlugins("/x")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	for name, cfg := range map[string]PluginsConfig{
		"the tests' own layout under the temporary directory": {Dir: safePlugins},
		"a link in a safe directory":                          {Dir: filepath.Join(good, "plugins")},
		"a sticky directory of central's user":                {Dir: stickyPlugins},
		// The kernel reads good/plugins/.. as safe (the link's target's
		// parent), not as good.
		"through a link, then ..": {Dir: good + "/plugins/../plugins",
			External: []ExternalPlugin{{Type: "sms", Command: stickyPlugins + "/./sms"}}},
		"relative, through a link": {Dir: "good/plugins"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cfg.hostPlugins("/x"); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}

	// In a sticky directory anyone may write, an entry of another user is
	// that user's to swap, and so is a sticky directory another user owns.
	t.Run("sticky directory, another user's entry", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("giving a directory to another user needs root")
		}
		theirs := mkdir(filepath.Join(sticky, "theirs"), 0o755)
		bin(theirs, "sms")
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := PluginsConfig{Dir: theirs}.hostPlugins("/x")
		if want := "plugins.dir: " + theirs + " belongs to uid 65534, neither root nor central's user, in " + sticky; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error with %q", err, want)
		}
		other := mkdir(filepath.Join(base, "other-sticky"), 0o777|os.ModeSticky)
		mine := mkdir(filepath.Join(other, "plugins"), 0o755)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err = PluginsConfig{Dir: mine}.hostPlugins("/x")
		if want := "plugins.dir: " + other + " has mode dtrwxrwxrwx and belongs to uid 65534"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error with %q", err, want)
		}
	})
}

// TestCentralRefusesAPluginUnderAWritableParent runs the review's attack
// on the real binary: plugins/ is 0755 under a 0777 parent, and holds a
// binary that leaves a mark when it runs. Central refuses to start, naming
// the parent and its mode, and never runs the binary. Before, it ran it.
func TestCentralRefusesAPluginUnderAWritableParent(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	plugins := filepath.Join(open, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(base, "evil-ran")
	if err := os.WriteFile(filepath.Join(plugins, "evil"), []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(base, "central.yaml")
	if err := os.WriteFile(config, []byte("data_dir: ./data\nlink: {listen: \"\"}\nsmtp_capture: {addr: \"\"}\n"+
		"plugins: {builtin: [none], dir: "+plugins+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runToEnd(t, base, childEnv(), "central", "-config", config)
	if want := "plugins.dir: " + open + " has mode drwxrwxrwx: writable by its group or others"; code == 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, want a refusal naming %q:\n%s", code, want, out)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("central ran the plugin under a directory anyone may write")
	}
}

func TestPluginsSocketGroup(t *testing.T) {
	unknown, root := defaultConfig(), defaultConfig()
	unknown.Plugins.Host.SocketGroup, root.Plugins.Host.SocketGroup = "no-such-group-for-outbox", "0"
	if r := centralSchema.Check(unknown); len(r) != 1 ||
		r[0].Error() != `plugins.socket_group: no group "no-such-group-for-outbox" on this machine` {
		t.Errorf("unknown group: %v", r)
	}
	if r := centralSchema.Check(root); len(r) != 0 {
		t.Errorf("group 0: %v", r)
	}
}

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
			"plugins.external[0].command: stat " + filepath.Join(ok, "nope")},
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

func TestPluginsSocketGroup(t *testing.T) {
	if r := (PluginsConfig{SocketGroup: "no-such-group-for-outbox"}).validate(); len(r) != 1 ||
		r[0].Error() != `plugins.socket_group: no group "no-such-group-for-outbox" on this machine` {
		t.Errorf("unknown group: %v", r)
	}
	if r := (PluginsConfig{SocketGroup: "0"}).validate(); len(r) != 0 {
		t.Errorf("group 0: %v", r)
	}
}

//go:build unix

package fsperm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotWritableByOthers: a binary others could replace, by writing it or
// the directory that holds it, is refused; through a symbolic link too.
func TestNotWritableByOthers(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := NotWritableByOthers(bin); err != nil {
		t.Fatalf("a 0755 binary in a 0755 directory: %v", err)
	}
	if uid, ok := Owner(mustStat(t, bin)); !ok || uid != os.Getuid() {
		t.Errorf("Owner = %d, %v; want %d", uid, ok, os.Getuid())
	}
	if err := os.Chmod(bin, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := NotWritableByOthers(bin); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("a 0775 binary: %v", err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "link")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	if err := NotWritableByOthers(link); err == nil || !strings.Contains(err.Error(), open) {
		t.Errorf("a link in a 0777 directory: %v", err)
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

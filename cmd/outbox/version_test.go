package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionShowsTheRevision builds the binary from a copy of this source
// committed to a fresh git repository in a temporary directory (the Go
// tool records version control information only where .git is a
// directory, not in a git worktree, and a copy keeps uncommitted work in
// the test), with -buildvcs=true (a GOFLAGS of -buildvcs=false is common on
// build machines), and checks what `outbox version` prints: that commit,
// its time, not modified; and once a tracked file is changed, modified.
func TestVersionShowsTheRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: apt-get install git")
	}
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_COMMITTER_NAME=test",
			"GIT_COMMITTER_EMAIL=test@example.com", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("the source is not a git checkout: cannot tell which files to copy")
	}
	src := strings.TrimSpace(string(top))
	dir := t.TempDir()
	for _, f := range strings.Split(run(src, git, "ls-files", "--cached", "--others", "--exclude-standard"), "\n") {
		b, err := os.ReadFile(filepath.Join(src, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(dir, git, "init", "-q")
	run(dir, git, "add", "-A")
	run(dir, git, "commit", "-q", "-m", "the source under test")
	head := run(dir, git, "rev-parse", "HEAD")
	const committed = "2026-01-02T03:04:05Z"

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	build := func() (buildVersion, string) {
		t.Helper()
		bin := filepath.Join(dir, "outbox-under-test")
		args := []string{"build", "-buildvcs=true", "-o", bin}
		if raceEnabled {
			args = append(args, "-race") // shares the build cache with outboxBinary
		}
		run(dir, goTool, append(args, "./cmd/outbox")...)
		defer os.Remove(bin)
		text := run(dir, bin, "version")
		for _, want := range []string{head[:12], "revision: " + head, "time:     " + committed} {
			if !strings.Contains(text, want) {
				t.Errorf("outbox version printed %q, without %q", text, want)
			}
		}
		var v buildVersion
		if err := json.Unmarshal([]byte(run(dir, bin, "version", "-json")), &v); err != nil {
			t.Fatal(err)
		}
		return v, text
	}

	v, _ := build()
	if v.Revision != head || v.Modified {
		t.Errorf("a clean checkout of %s: revision %q, modified %v", head, v.Revision, v.Modified)
	}
	if v.Time != committed {
		t.Errorf("time %q, want the commit's %s", v.Time, committed)
	}
	if v.Module != "github.com/siteline/outbox" || v.ModuleVersion == "" || !strings.HasPrefix(v.Go, "go") || v.Platform == "" {
		t.Errorf("build information %+v", v)
	}

	readme := filepath.Join(dir, "README.md")
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(readme, append(b, "\nchanged\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, text := build(); v.Revision != head || !v.Modified || !strings.Contains(text, head+" (modified)") {
		t.Errorf("a checkout with a changed README.md: revision %q, modified %v, printed %q", v.Revision, v.Modified, text)
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// siteConfigFile writes a minimal site node's configuration for node
// (data in dir/data-NODE) and returns its path.
func siteConfigFile(t *testing.T, dir, node string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := `site: plant-9
node: ` + node + `
data_dir: ./data-` + node + `
members:
  - {id: a, raft: 127.0.0.1:7201, api: 127.0.0.1:7101}
  - {id: b, raft: 127.0.0.1:7202, api: 127.0.0.1:7102}
central:
  addr: 127.0.0.1:7443
  token: file:token
`
	path := filepath.Join(dir, node+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runEnv runs the binary's dispatcher in-process with environ.
func runEnv(environ []string, args ...string) (code int, stdout, stderr string) {
	var out, errw bytes.Buffer
	code = run(context.Background(), args, environ, &out, &errw)
	return code, out.String(), errw.String()
}

// TestSiteRecoverRefusesAnOperand: a file named as an operand is never
// taken for -config: "OUTBOX_CONFIG=a.yaml outbox site recover b.yaml -yes"
// is refused before a.yaml is read, and -config before recover works.
func TestSiteRecoverRefusesAnOperand(t *testing.T) {
	dir := t.TempDir()
	a, b := siteConfigFile(t, dir, "a"), siteConfigFile(t, dir, "b")
	environ := []string{"OUTBOX_CONFIG=" + a}
	code, out, errw := runEnv(environ, "site", "recover", b, "-yes")
	if code != exitUsage || out != "" || !strings.HasPrefix(errw, `outbox site recover: unexpected argument "`) {
		t.Fatalf("site recover b.yaml -yes: exit %d, stdout %q, stderr %q", code, out, errw)
	}
	for _, node := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(dir, "data-"+node)); err == nil {
			t.Errorf("node %s's data was touched", node)
		}
	}
	// Flags before recover: recover still, with node b's file.
	code, out, errw = runEnv(nil, "site", "-config", b, "recover")
	if code != exitUsage || !strings.Contains(out, `would make node "b"`) {
		t.Errorf("site -config b.yaml recover: exit %d, stdout %q, stderr %q", code, out, errw)
	}
	// Any other operand of site is refused, before or after the flags.
	for _, args := range [][]string{{"site", "-config", b, "frob"}, {"site", "frob", "-config", b}} {
		if code, _, errw := runEnv(nil, args...); code != exitUsage || !strings.Contains(errw, `unexpected argument "frob"`) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errw)
		}
	}
}

// TestCommandsRefuseOperandsTheyDoNotTake: every command with no (or a
// fixed number of) operands refuses another one with exit 2 before it
// acts, with the command's name first.
func TestCommandsRefuseOperandsTheyDoNotTake(t *testing.T) {
	dir := t.TempDir()
	missing := []string{"OUTBOX_CONFIG=" + filepath.Join(dir, "missing.yaml")}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"central", "extra.yaml"}, `outbox central: unexpected argument "extra.yaml"`},
		{[]string{"migrate", "up", "extra.yaml"}, `outbox migrate: unexpected argument "extra.yaml"`},
		{[]string{"migrate", "down", "extra.yaml", "-yes"}, `outbox migrate: unexpected argument "extra.yaml"`},
		{[]string{"site", "extra.yaml"}, `outbox site: unexpected argument "extra.yaml"`},
		{[]string{"dev", "extra"}, `outbox dev: unexpected argument "extra"`},
		{[]string{"version", "extra"}, `outbox version: unexpected argument "extra"`},
		{[]string{"completion", "bash", "zsh"}, `outbox completion: unexpected argument "zsh"`},
		{[]string{"plugin", "list", "extra"}, `outbox plugin list: unexpected argument "extra"`},
		{[]string{"plugin", "deliver", "smtp", "extra"}, `outbox plugin deliver: unexpected argument "extra"`},
		{[]string{"login", "extra"}, `outbox login: unexpected argument "extra"`},
		{[]string{"logout", "extra"}, `outbox logout: unexpected argument "extra"`},
		// The client commands that act, before they dial.
		{[]string{"notify", "send", "-list", "ops", "extra"}, `outbox notify send: unexpected argument "extra"`},
		{[]string{"users", "delete", "bob", "extra"}, `outbox users delete: `},
		{[]string{"tokens", "delete", "t1", "extra"}, `outbox tokens delete: `},
		{[]string{"lists", "delete", "ops", "extra"}, `outbox lists delete: `},
		{[]string{"site-calls", "retry", "plant-1", "-all", "extra"}, `outbox site-calls retry: `},
	} {
		code, out, errw := runEnv(missing, tt.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errw, tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, out, errw, tt.want)
		}
	}
}

// TestFlagsBeforeTheSubcommand: migrate's action may follow flags, as the
// usage says flags may come anywhere (site's recover: above).
func TestFlagsBeforeTheSubcommand(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "outbox.db")
	store := []string{"-store-driver", "sqlite", "-store-dsn", dsn, "-log-level", "error"}
	// status reads a database that is there: an empty file is an empty one.
	if err := os.WriteFile(dsn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errw := runOutbox(append(append([]string{"migrate"}, store...), "status")...)
	if code != exitOK || !strings.Contains(out, "0001_init") || strings.Contains(out, "applied") {
		t.Fatalf("migrate FLAGS status: exit %d, want the pending migrations\n%s%s", code, out, errw)
	}
	// A flag only the action knows, before it, still finds the action.
	code, out, errw = runOutbox(append(append([]string{"migrate", "-yes"}, store...), "down")...)
	if code != exitOK || !strings.Contains(out, "No migration is applied") {
		t.Errorf("migrate -yes FLAGS down: exit %d\n%s%s", code, out, errw)
	}
}

// TestFlagErrorsOfTheBinary: every flag error names the command first, and
// an argument like a flag is clipped, with a hint at --.
func TestFlagErrorsOfTheBinary(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"notify", "send", "-list", "ops", "-subject"}, "outbox notify send: flag needs an argument: -subject\n"},
		{[]string{"notifications", "retry", "-status", "Parked", "-yes=maybe"}, "outbox notifications retry: invalid boolean value \"maybe\" for -yes"},
		{[]string{"dev", "-free-ports=maybe"}, "outbox dev: invalid boolean value \"maybe\" for -free-ports"},
		{[]string{"central", "-config"}, "outbox central: flag needs an argument: -config\n"},
		{[]string{"write", "db", "-- comment\nDELETE FROM t WHERE " + strings.Repeat("x = 1 AND ", 20) + "y = 2"},
			"outbox write: flag provided but not defined: -"},
	} {
		code, out, errw := runOutbox(tt.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errw, tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, out, errw, tt.want)
		}
	}
	_, _, errw := runOutbox("write", "db", "-- comment\nDELETE FROM t WHERE "+strings.Repeat("x = 1 AND ", 20)+"y = 2")
	first, _, _ := strings.Cut(errw, "\n")
	if !strings.Contains(first, "goes after --") || strings.Contains(first, "y = 2") {
		t.Errorf("write db \"-- …\": first line %q, want the value clipped and a hint at --", first)
	}
	if !strings.Contains(errw, "goes after --: outbox write db --") {
		t.Errorf("outbox write's usage does not show --:\n%s", errw)
	}
}

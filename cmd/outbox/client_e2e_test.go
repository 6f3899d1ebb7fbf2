package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/ports"
)

// runCLI runs the built outbox binary with env and stdin to its end and
// returns its exit code, stdout and stderr.
func runCLI(t *testing.T, env []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, outboxBinary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errw bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errw
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run outbox %v: %v", args, err)
	}
	return code, out.String(), errw.String()
}

// cliEnv is the environment of a CLI user whose configuration directory is
// home/.config, talking to server.
func cliEnv(home, server string, extra ...string) []string {
	return childEnv(append([]string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "OUTBOX_SERVER=" + server}, extra...)...)
}

// TestDevTokenLoginAndLogout walks the operator CLI's way in against a real
// outbox dev: the admin token dev prints works (and is in no log line);
// outbox login with the password on stdin keeps a 0600 file the operator
// commands then use; the token of a demoted or deleted account loses its
// power at once; outbox logout kills the token; a password given as a flag
// is refused. Before outbox login, the CLI had no way in but a token nobody
// could make.
func TestDevTokenLoginAndLogout(t *testing.T) {
	p, info := startDev(t)
	defer stopDev(t, p)
	server := strings.TrimSuffix(info.page, "/")

	// The printed token: an admin's, on the terminal only.
	line := p.waitFor(t, "export OUTBOX_SERVER=", time.Second)
	fields := strings.Fields(line)
	if len(fields) != 3 || fields[1] != "OUTBOX_SERVER="+server || !strings.HasPrefix(fields[2], "OUTBOX_TOKEN=obx_") {
		t.Fatalf("printed %q, want export OUTBOX_SERVER=%s OUTBOX_TOKEN=obx_…", line, server)
	}
	devToken := strings.TrimPrefix(fields[2], "OUTBOX_TOKEN=")
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.HasPrefix(l, "{") && strings.Contains(l, devToken[:20]) {
			t.Errorf("the dev token is in a log line: %s", l)
		}
	}
	dc, err := client.New(info.page, devToken)
	if err != nil {
		t.Fatal(err)
	}
	if me, err := dc.Me(t.Context()); err != nil || me.Role != ports.RoleAdmin {
		t.Fatalf("the printed token: %+v %v", me, err)
	}
	if code, out, errw := runCLI(t, childEnv("OUTBOX_SERVER="+server, "OUTBOX_TOKEN="+devToken), "", "kpi"); code != 0 || !strings.Contains(out, "queue depth") {
		t.Fatalf("outbox kpi with the printed lines: exit %d\n%s%s", code, out, errw)
	}

	// outbox login, the password on stdin.
	home := t.TempDir()
	env := cliEnv(home, server)
	if code, out, errw := runCLI(t, env, "", "login", "--name", "admin", "--password", devTestPassword); code != exitUsage ||
		!strings.Contains(errw, "-password is refused") || strings.Contains(out+errw, devTestPassword) {
		t.Fatalf("login with --password: exit %d\n%s%s", code, out, errw)
	}
	file := filepath.Join(home, ".config", "outbox", "login.json")
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused login left %s (%v)", file, err)
	}
	if code, _, errw := runCLI(t, env, devTestPassword+"\n", "login", "--name", "admin", "--password-stdin", "--expires", "31d"); code != exitFailure ||
		!strings.Contains(errw, "expires_at: at most 30 days ahead") {
		t.Fatalf("login beyond http.login_token_max_ttl: exit %d\n%s", code, errw)
	}
	code, out, errw := runCLI(t, env, devTestPassword+"\n", "login", "--name", "admin", "--password-stdin", "--expires", "2h")
	if code != 0 || !strings.Contains(out, "Logged in to "+server+" as admin (admin)") {
		t.Fatalf("login: exit %d\n%s%s", code, out, errw)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the login file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(file)); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("the login directory: %v, mode %v; want 0700", err, di.Mode())
	}
	saved := readSavedLogin(t, file)
	if saved.Server != server || saved.Name != "admin" || time.Until(saved.ExpiresAt) > 2*time.Hour || time.Until(saved.ExpiresAt) < time.Hour {
		t.Fatalf("saved %+v", saved)
	}
	if code, out, errw := runCLI(t, env, "", "notifications", "list"); code != 0 || strings.Contains(errw, "unauthenticated") {
		t.Fatalf("notifications list after login: exit %d\n%s%s", code, out, errw)
	}

	// A second account's login: its power follows the account.
	if code, out, errw := runCLI(t, env, "bob's long password\n", "users", "put", "bob", "--role", "admin", "--password-stdin"); code != 0 {
		t.Fatalf("users put bob: exit %d\n%s%s", code, out, errw)
	}
	bobHome := t.TempDir()
	bobEnv := cliEnv(bobHome, server)
	if code, out, errw := runCLI(t, bobEnv, "bob's long password\n", "login", "--name", "bob", "--password-stdin"); code != 0 {
		t.Fatalf("bob's login: exit %d\n%s%s", code, out, errw)
	}
	if code, out, errw := runCLI(t, bobEnv, "", "users", "list"); code != 0 || !strings.Contains(out, "bob") {
		t.Fatalf("bob lists the users: exit %d\n%s%s", code, out, errw)
	}
	if code, out, errw := runCLI(t, env, "", "users", "put", "bob", "--role", "viewer"); code != 0 {
		t.Fatalf("demote bob: exit %d\n%s%s", code, out, errw)
	}
	if code, _, errw := runCLI(t, bobEnv, "", "users", "list"); code != exitFailure || !strings.Contains(errw, "this needs the admin role") {
		t.Fatalf("demoted bob lists the users: exit %d\n%s", code, errw)
	}
	if code, _, errw := runCLI(t, bobEnv, "", "kpi"); code != 0 {
		t.Fatalf("demoted bob reads the KPIs: exit %d\n%s", code, errw)
	}
	if code, out, errw := runCLI(t, env, "", "users", "delete", "bob"); code != 0 {
		t.Fatalf("delete bob: exit %d\n%s%s", code, out, errw)
	}
	if code, _, errw := runCLI(t, bobEnv, "", "kpi"); code != exitFailure || !strings.Contains(errw, "unknown or revoked token") ||
		!strings.Contains(errw, "run outbox login again") {
		t.Fatalf("deleted bob reads the KPIs: exit %d\n%s", code, errw)
	}

	// The audit log has it all, with the actors.
	code, out, errw = runCLI(t, env, "", "audit", "--kind", "user", "--name", "bob", "--json")
	var page struct {
		Items []struct{ Actor, Action string } `json:"items"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 3 {
		t.Fatalf("audit: exit %d\n%s%s", code, out, errw)
	}
	for i, want := range []string{"deleted", "changed", "created"} {
		if page.Items[i].Action != want || page.Items[i].Actor != "admin" {
			t.Errorf("audit record %d: %+v, want admin %s", i, page.Items[i], want)
		}
	}

	// A file others can read is refused, and its token not sent.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errw := runCLI(t, env, "", "kpi"); code != exitUsage || !strings.Contains(errw, "open to others") {
		t.Fatalf("kpi with a login file open to others: exit %d\n%s", code, errw)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}

	// outbox logout revokes the token and deletes the file.
	if code, out, errw := runCLI(t, env, "", "logout"); code != 0 || !strings.Contains(out, "Logged out of "+server) {
		t.Fatalf("logout: exit %d\n%s%s", code, out, errw)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the login file after logout: %v", err)
	}
	old, _ := client.New(info.page, saved.Token)
	if _, err := old.Me(t.Context()); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("the token after logout: %v, want unauthenticated", err)
	}
	if code, _, errw := runCLI(t, env, "", "kpi"); code != exitFailure || !strings.Contains(errw, "run outbox login") {
		t.Fatalf("kpi after logout: exit %d\n%s", code, errw)
	}
	if code, out, _ := runCLI(t, env, "", "logout"); code != 0 || !strings.Contains(out, "Not logged in") {
		t.Fatalf("logout twice: exit %d\n%s", code, out)
	}
}

// savedLogin is the part of outbox login's file these tests read.
type savedLogin struct {
	Server    string    `json:"server"`
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

func readSavedLogin(t *testing.T, path string) savedLogin {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s savedLogin
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
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
		!strings.Contains(errw, "--password is refused") || strings.Contains(out+errw, devTestPassword) {
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
	if code, _, errw := runCLI(t, bobEnv, "", "users", "list"); code != exitFailure || !strings.Contains(errw, "forbidden") {
		t.Fatalf("demoted bob lists the users: exit %d\n%s", code, errw)
	}
	if code, _, errw := runCLI(t, bobEnv, "", "kpi"); code != 0 {
		t.Fatalf("demoted bob reads the KPIs: exit %d\n%s", code, errw)
	}
	if code, out, errw := runCLI(t, env, "", "users", "delete", "bob"); code != 0 {
		t.Fatalf("delete bob: exit %d\n%s%s", code, out, errw)
	}
	if code, _, errw := runCLI(t, bobEnv, "", "kpi"); code != exitFailure || !strings.Contains(errw, "unauthenticated") ||
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

func readSavedLogin(t *testing.T, path string) savedLogin {
	t.Helper()
	s, err := readLogin(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLoginRefusesAPasswordFlag: a password given as a flag is refused
// before anything is sent, and never repeated.
func TestLoginRefusesAPasswordFlag(t *testing.T) {
	a, env := opsEnv(t, nil)
	for _, args := range [][]string{
		{"--name", "admin", "--password", "hunter2-secret-pw"},
		{"--name=admin", "--password=hunter2-secret-pw"},
		{"--password", "hunter2-secret-pw", "--password-stdin"},
	} {
		var out, errw bytes.Buffer
		code := loginCmd(context.Background(), args, append(env, "HOME="+t.TempDir()), strings.NewReader("x\n"), &out, &errw)
		if code != exitUsage || !strings.Contains(errw.String(), "--password is refused") || strings.Contains(out.String()+errw.String(), "hunter2") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestLoginTokenGoesOnlyToItsServer: the token outbox login keeps is sent
// to the server that made it, never to another one; an expired one is not
// sent; each says why on a 401.
func TestLoginTokenGoesOnlyToItsServer(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"GET /kpis": {status: http.StatusUnauthorized, body: `{"error":{"code":"unauthenticated","message":"no credential"}}`},
	})
	server := strings.TrimPrefix(env[0], "OUTBOX_SERVER=")
	home := t.TempDir()
	path := filepath.Join(home, ".config", "outbox", "login.json")
	write := func(s savedLogin) {
		t.Helper()
		if err := writeLogin(path, s); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"HOME=" + home, "TZ=UTC"}
	lastAuth := func() string {
		r := a.requests()
		return r[len(r)-1].Auth
	}
	write(savedLogin{Server: "http://central.example:8080", Name: "admin", Token: "obx_other_secret", ExpiresAt: time.Now().Add(time.Hour)})
	code, _, errw := opsRunCmd(runKPI, append(base, "OUTBOX_SERVER="+server))
	if code != exitFailure || lastAuth() != "" || !strings.Contains(errw, "logged in to http://central.example:8080, not "+server) {
		t.Errorf("another server's login: exit %d, auth %q, stderr %q", code, lastAuth(), errw)
	}
	write(savedLogin{Server: normalServer(server), Name: "admin", Token: "obx_mine_secret", ExpiresAt: time.Now().Add(-time.Minute)})
	code, _, errw = opsRunCmd(runKPI, base) // the server comes from the login
	if code != exitFailure || lastAuth() != "" || !strings.Contains(errw, "expired at") {
		t.Errorf("an expired login: exit %d, auth %q, stderr %q", code, lastAuth(), errw)
	}
	write(savedLogin{Server: normalServer(server), Name: "admin", Token: "obx_mine_secret", ExpiresAt: time.Now().Add(time.Hour)})
	code, _, errw = opsRunCmd(runKPI, base)
	if code != exitFailure || lastAuth() != "Bearer obx_mine_secret" || !strings.Contains(errw, "run outbox login again") {
		t.Errorf("a valid login: exit %d, auth %q, stderr %q", code, lastAuth(), errw)
	}
	// OUTBOX_TOKEN wins over the login.
	if opsRunCmd(runKPI, append(base, "OUTBOX_TOKEN="+opsTestToken)); lastAuth() != "Bearer "+opsTestToken {
		t.Errorf("OUTBOX_TOKEN with a login: auth %q", lastAuth())
	}
	// A link in place of the file is refused.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(home, "elsewhere.json")
	if err := os.WriteFile(target, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if code, _, errw := opsRunCmd(runKPI, base); code != exitUsage || !strings.Contains(errw, "not a regular file") {
		t.Errorf("a link as the login file: exit %d, stderr %q", code, errw)
	}
}

func TestOpsTokensExpires(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"POST /tokens": {status: http.StatusCreated, body: `{"id":"t1","name":"ci","role":"operator","expires_at":"2026-04-01T00:00:00Z","secret":"obx_t1_S"}`},
		"GET /tokens": {body: `[{"id":"t1","name":"ci","role":"operator","expires_at":"2026-04-01T00:00:00Z","expired":true},
			{"id":"t2","name":"admin/cli-1a2b","role":"admin","account":"admin","expires_at":"2026-04-01T00:00:00Z"}]`},
	})
	code, stdout, stderr := opsRunCmd(runTokens, env, "create", "ci", "--role", "operator", "--expires", "30d")
	if code != exitOK || !strings.Contains(stdout, "2026-04-01 00:00:00") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var body struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(a.requests()[0].Body), &body); err != nil || body.ExpiresAt.Sub(time.Now().Add(30*24*time.Hour)).Abs() > time.Minute {
		t.Errorf("body %s, want expires_at in 30 days", a.requests()[0].Body)
	}
	if code, stdout, _ := opsRunCmd(runTokens, env, "list"); code != exitOK ||
		!regexpLine(stdout, `^t1\s+ci\s+operator\s+-\s+-\s+2026-04-01 00:00:00 \(expired\)$`) ||
		!regexpLine(stdout, `^t2\s+admin/cli-1a2b\s+admin\s+admin\s+-\s+2026-04-01 00:00:00$`) {
		t.Errorf("list: %d\n%s", code, stdout)
	}
	for _, bad := range []string{"soon", "0d", "-1h", "99999d"} {
		if code, _, stderr := opsRunCmd(runTokens, env, "create", "ci", "--role", "operator", "--expires", bad); code != exitUsage || !strings.Contains(stderr, "--expires") {
			t.Errorf("--expires %s: %d %q", bad, code, stderr)
		}
	}
}

func TestOpsAudit(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"GET /audit": {pages: map[string]string{
			"":  `{"items":[{"id":9,"at":"2026-03-01T10:00:00Z","actor":"admin","kind":"list","name":"ops","action":"changed","summary":"targets 1 → 2 (1 added, 0 removed)"}],"next":"9"}`,
			"9": `{"items":[{"id":3,"at":"2026-03-01T09:00:00Z","actor":"config","kind":"list","name":"ops","action":"created","summary":"type email, 1 target"}]}`,
		}},
	})
	code, stdout, stderr := opsRunCmd(runAudit, env, "--kind", "list", "--name", "ops", "--limit", "1")
	if code != exitOK || !regexpLine(stdout, `^2026-03-01 10:00:00\s+admin\s+list\s+ops\s+changed\s+targets 1 → 2`) ||
		!strings.Contains(stderr, "--after 9") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if q := a.requests()[0].Query; q.Get("kind") != "list" || q.Get("name") != "ops" || q.Get("limit") != "1" {
		t.Errorf("query %v", q)
	}
	code, stdout, _ = opsRunCmd(runAudit, env, "--all-pages")
	if code != exitOK || !strings.Contains(stdout, "changed") || !strings.Contains(stdout, "config") {
		t.Errorf("all pages: %d\n%s", code, stdout)
	}
	for _, args := range [][]string{{"--kind", "plugin"}, {"--limit", "500"}, {"--after", "x"}, {"extra"}} {
		if code, _, stderr := opsRunCmd(runAudit, env, args...); code != exitUsage {
			t.Errorf("%v: exit %d %q", args, code, stderr)
		}
	}
}

// TestLoginKeepsItsDirectoryPrivate replays the review: outbox login
// accepted a 0755 ~/.config/outbox, though the docs promise 0700, and a
// --password-file every user may read. Now a directory others may read is
// made 0700 (and said so), one others may write is refused before the
// password is even asked, and so is a password file others may read.
func TestLoginKeepsItsDirectoryPrivate(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"POST /login": {status: http.StatusUnauthorized, body: `{"error":{"code":"unauthenticated","message":"wrong name or password"}}`},
	})
	home := t.TempDir()
	dir := filepath.Join(home, ".config", "outbox")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	login := func(stdin string, args ...string) (int, string) {
		var out, errw bytes.Buffer
		code := loginCmd(context.Background(), append([]string{"--name", "admin"}, args...), env, strings.NewReader(stdin), &out, &errw)
		return code, errw.String()
	}
	mode := func() fs.FileMode {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}

	// 0755: made private, then the login goes on.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	code, errw := login("a password\n", "--password-stdin")
	if code != exitFailure || mode() != 0o700 || !strings.Contains(errw, "was open to others (mode 0755); it is now 0700") ||
		!strings.Contains(errw, "wrong name or password") {
		t.Fatalf("a 0755 directory: exit %d, mode %04o, stderr %q", code, mode(), errw)
	}
	sent := len(a.requests())

	// 0775 and 0777: refused, before any password is read or sent.
	for _, m := range []fs.FileMode{0o775, 0o777} {
		if err := os.Chmod(dir, m); err != nil {
			t.Fatal(err)
		}
		code, errw := login("a password\n", "--password-stdin")
		if code != exitFailure || !strings.Contains(errw, "may be written by its group or others") || mode() != m {
			t.Fatalf("a %04o directory: exit %d, stderr %q", m, code, errw)
		}
		// A saved login there is refused too.
		if err := os.WriteFile(filepath.Join(dir, loginFileName), []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readLogin(filepath.Join(dir, loginFileName)); err == nil || !strings.Contains(err.Error(), "may be written by its group or others") {
			t.Fatalf("reading a login in a %04o directory: %v", m, err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}

	// A password file every user may read is refused; the group may.
	pwFile := filepath.Join(home, "admin.pw")
	if err := os.WriteFile(pwFile, []byte("a password\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pwFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, errw = login("", "--password-file", pwFile)
	if code != exitUsage || !strings.Contains(errw, "may be read or written by every user of this machine (mode 0644): refused") {
		t.Fatalf("a 0644 password file: exit %d, stderr %q", code, errw)
	}
	if n := len(a.requests()); n != sent {
		t.Fatalf("%d requests sent for refused logins", n-sent)
	}
	if err := os.Chmod(pwFile, 0o640); err != nil {
		t.Fatal(err)
	}
	if code, errw := login("", "--password-file", pwFile); code != exitFailure || !strings.Contains(errw, "wrong name or password") {
		t.Fatalf("a 0640 password file: exit %d, stderr %q", code, errw)
	}
}

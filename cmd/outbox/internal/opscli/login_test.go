package opscli

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// TestLoginKeepsATokenTheCommandsUse: outbox login with the password on
// stdin keeps a 0600 file, in a 0700 directory, whose token the operator
// commands use, with the account's role; outbox logout revokes it.
func TestLoginKeepsATokenTheCommandsUse(t *testing.T) {
	c := newTestCentral(t)
	home := t.TempDir()
	env := []string{"OUTBOX_SERVER=" + c.srv.URL, "HOME=" + home, "TZ=UTC"}
	code, stdout, stderr := runCmd(t, Login, env, testPassword+"\n", "--name", "operator", "--password-stdin", "--expires", "2h")
	if code != exitOK || !strings.Contains(stdout, "Logged in to "+c.srv.URL+" as operator (operator)") {
		t.Fatalf("login: exit %d\n%s%s", code, stdout, stderr)
	}
	file := filepath.Join(home, ".config", "outbox", loginFileName)
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the login file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(file)); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("the login directory: %v, mode %v; want 0700", err, di.Mode())
	}
	saved, err := readLogin(file)
	if err != nil || saved.Server != c.srv.URL || saved.Name != "operator" || time.Until(saved.ExpiresAt) > 2*time.Hour {
		t.Fatalf("saved %+v, %v", saved, err)
	}
	if code, _, stderr := runCmd(t, KPI, env, ""); code != exitOK || c.last().Auth != "Bearer "+saved.Token {
		t.Fatalf("kpi with the login: exit %d, auth %q, %s", code, c.last().Auth, stderr)
	}
	if code, _, stderr := runCmd(t, Users, env, "", "list"); code != exitFailure || !strings.Contains(stderr, "this needs the admin role") {
		t.Errorf("an operator's login listed the users: exit %d, %s", code, stderr)
	}
	if code, stdout, stderr := runCmd(t, Logout, env, ""); code != exitOK || !strings.Contains(stdout, "Logged out of "+c.srv.URL) {
		t.Fatalf("logout: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("logout left %s (%v)", file, err)
	}
	if code, _, stderr := runCmd(t, KPI, c.environToken(saved.Token), ""); code != exitFailure || !strings.Contains(stderr, "unknown or revoked token") {
		t.Errorf("the token works after logout: exit %d, %s", code, stderr)
	}
}

// TestLoginRefusesAPasswordFlag: a password given as a flag is refused
// before anything is sent, and never repeated.
func TestLoginRefusesAPasswordFlag(t *testing.T) {
	c := newTestCentral(t)
	for _, args := range [][]string{
		{"--name", "admin", "--password", "hunter2-secret-pw"},
		{"--name=admin", "--password=hunter2-secret-pw"},
		{"--password", "hunter2-secret-pw", "--password-stdin"},
	} {
		code, stdout, stderr := runCmd(t, Login, c.environ("HOME="+t.TempDir()), "x\n", args...)
		if code != exitUsage || !strings.Contains(stderr, "-password is refused") || strings.Contains(stdout+stderr, "hunter2") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if n := len(c.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestLoginTokenGoesOnlyToItsServer: the token outbox login keeps is sent
// to the server that made it, never to another one; an expired one is not
// sent; each says why on a 401.
func TestLoginTokenGoesOnlyToItsServer(t *testing.T) {
	c := newTestCentral(t)
	server := c.srv.URL
	home := t.TempDir()
	path := filepath.Join(home, ".config", "outbox", loginFileName)
	write := func(s savedLogin) {
		t.Helper()
		if err := writeLogin(path, s); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"HOME=" + home, "TZ=UTC"}
	write(savedLogin{Server: "http://central.example:8080", Name: "admin", Token: c.tokens[ports.RoleAdmin], ExpiresAt: time.Now().Add(time.Hour)})
	sent := len(c.requests())
	code, _, errw := runCmd(t, KPI, append(base, "OUTBOX_SERVER="+server), "")
	if code != exitFailure || len(c.requests()) != sent || errw != "outbox kpi: outbox login logged in to http://central.example:8080, not "+server+": run outbox login -server "+server+"\n" {
		t.Errorf("another server's login: exit %d, %d requests, stderr %q", code, len(c.requests())-sent, errw)
	}
	write(savedLogin{Server: normalServer(server), Name: "admin", Token: c.tokens[ports.RoleAdmin], ExpiresAt: time.Now().Add(-time.Minute)})
	code, _, errw = runCmd(t, KPI, base, "") // the server comes from the login
	if code != exitFailure || len(c.requests()) != sent || !strings.Contains(errw, "expired at") || strings.Count(errw, "\n") != 1 {
		t.Errorf("an expired login: exit %d, %d requests, stderr %q", code, len(c.requests())-sent, errw)
	}
	write(savedLogin{Server: normalServer(server), Name: "admin", Token: "obx_revoked_secret", ExpiresAt: time.Now().Add(time.Hour)})
	code, _, errw = runCmd(t, KPI, base, "")
	if code != exitFailure || c.last().Auth != "Bearer obx_revoked_secret" || !strings.Contains(errw, "run outbox login again") {
		t.Errorf("a dead login: exit %d, auth %q, stderr %q", code, c.last().Auth, errw)
	}
	// OUTBOX_TOKEN wins over the login.
	if code, _, _ := runCmd(t, KPI, append(base, "OUTBOX_TOKEN="+c.tokens[ports.RoleViewer]), ""); code != exitOK ||
		c.last().Auth != "Bearer "+c.tokens[ports.RoleViewer] {
		t.Errorf("OUTBOX_TOKEN with a login: exit %d, auth %q", code, c.last().Auth)
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
	if code, _, errw := runCmd(t, KPI, base, ""); code != exitUsage || !strings.Contains(errw, "not a regular file") {
		t.Errorf("a link as the login file: exit %d, stderr %q", code, errw)
	}
}

func TestOpsTokensExpires(t *testing.T) {
	c := newTestCentral(t)
	code, stdout, stderr := runCmd(t, Tokens, c.environ(), "", "create", "ci", "--role", "operator", "--expires", "30d")
	expires := time.Now().Add(30 * 24 * time.Hour).UTC()
	if code != exitOK || !regexpLine(stdout, `^expires:\s+`+expires.Format("2006-01-02")) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var body struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(c.last().Body), &body); err != nil || body.ExpiresAt.Sub(expires).Abs() > time.Minute {
		t.Errorf("body %s, want expires_at in 30 days", c.last().Body)
	}
	// A login's token: bound to its account.
	if code, _, stderr := runCmd(t, Login, c.environ("HOME="+t.TempDir()), testPassword+"\n", "--name", "admin", "--password-stdin"); code != exitOK {
		t.Fatalf("login: exit %d %s", code, stderr)
	}
	if code, stdout, _ := runCmd(t, Tokens, c.environ(), "", "list"); code != exitOK ||
		!regexpLine(stdout, `^\S+\s+ci\s+operator\s+-\s+\S+ \S+ UTC\s+`+expires.Format("2006-01-02")) ||
		!regexpLine(stdout, `^\S+\s+admin/cli-\S+\s+admin\s+admin\s+`) {
		t.Errorf("list: %d\n%s", code, stdout)
	}
	for _, bad := range []string{"soon", "0d", "-1h", "99999d"} {
		if code, _, stderr := runCmd(t, Tokens, c.environ(), "", "create", "ci", "--role", "operator", "--expires", bad); code != exitUsage || !strings.Contains(stderr, "-expires") {
			t.Errorf("--expires %s: %d %q", bad, code, stderr)
		}
	}
}

func TestOpsAudit(t *testing.T) {
	c := newTestCentral(t)
	for _, targets := range [][]string{{"--target", "a@example.com"}, {"--target", "a@example.com", "--target", "b@example.com"}} {
		if code, _, stderr := runCmd(t, Lists, c.environ(), "", append([]string{"put", "audited", "--type", "email"}, targets...)...); code != exitOK {
			t.Fatalf("put: exit %d %s", code, stderr)
		}
	}
	code, stdout, stderr := runCmd(t, Audit, c.environ(), "", "--kind", "list", "--name", "audited", "--limit", "1")
	if code != exitOK || !regexpLine(stdout, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+\s+token:cli-admin\s+list\s+audited\s+changed\s+targets 1 → 2`) ||
		!regexp.MustCompile(`older records: repeat with -after \S+`).MatchString(stderr) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if q := c.last().Query; q.Get("kind") != "list" || q.Get("name") != "audited" || q.Get("limit") != "1" {
		t.Errorf("query %v", q)
	}
	code, stdout, _ = runCmd(t, Audit, c.environ(), "", "--all-pages", "--limit", "1", "--name", "audited")
	if code != exitOK || !strings.Contains(stdout, "changed") || !strings.Contains(stdout, "created") {
		t.Errorf("all pages: %d\n%s", code, stdout)
	}
	n := len(c.requests())
	for _, args := range [][]string{{"--kind", "plugin"}, {"--limit", "500"}, {"--after", "x"}, {"extra"}} {
		if code, _, stderr := runCmd(t, Audit, c.environ(), "", args...); code != exitUsage {
			t.Errorf("%v: exit %d %q", args, code, stderr)
		}
	}
	if len(c.requests()) != n {
		t.Errorf("requests sent for bad usage")
	}
}

// TestLoginKeepsItsDirectoryPrivate replays the review: outbox login
// accepted a 0755 ~/.config/outbox, though the docs promise 0700, and a
// --password-file every user may read. Now a directory others may read is
// made 0700 (and said so), one others may write is refused before the
// password is even asked, and so is a password file others may read.
func TestLoginKeepsItsDirectoryPrivate(t *testing.T) {
	c := newTestCentral(t)
	home := t.TempDir()
	dir := filepath.Join(home, ".config", "outbox")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	env := c.environ("HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	login := func(stdin string, args ...string) (int, string) {
		code, _, stderr := runCmd(t, Login, env, stdin, append([]string{"--name", "admin"}, args...)...)
		return code, stderr
	}
	mode := func() fs.FileMode {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}

	// 0755: made private, then the login goes on (to a wrong password).
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	code, errw := login("a wrong password\n", "--password-stdin")
	if code != exitFailure || mode() != 0o700 || !strings.Contains(errw, "was open to others (mode 0755); it is now 0700") ||
		!strings.Contains(errw, "wrong name or password") {
		t.Fatalf("a 0755 directory: exit %d, mode %04o, stderr %q", code, mode(), errw)
	}
	sent := len(c.requests())

	// 0775 and 0777: refused, before any password is read or sent.
	for _, m := range []fs.FileMode{0o775, 0o777} {
		if err := os.Chmod(dir, m); err != nil {
			t.Fatal(err)
		}
		code, errw := login(testPassword+"\n", "--password-stdin")
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
	if err := os.WriteFile(pwFile, []byte(testPassword+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pwFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, errw = login("", "--password-file", pwFile)
	if code != exitUsage || !strings.Contains(errw, "may be read or written by every user of this machine (mode 0644): refused") {
		t.Fatalf("a 0644 password file: exit %d, stderr %q", code, errw)
	}
	if n := len(c.requests()); n != sent {
		t.Fatalf("%d requests sent for refused logins", n-sent)
	}
	if err := os.Chmod(pwFile, 0o640); err != nil {
		t.Fatal(err)
	}
	if code, errw := login("", "--password-file", pwFile); code != exitOK {
		t.Fatalf("a 0640 password file: exit %d, stderr %q", code, errw)
	}
}

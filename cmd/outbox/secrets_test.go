package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/support/secretref"
)

// secretsSetup is a configuration directory with an allowed secrets
// directory, a token inside it, a symbolic link in it leading out, and a
// file outside it holding what an attacker wants.
type secretsSetup struct {
	dir     string // the configuration file's directory
	outside string // a file outside the allowed directory
}

const stolenValue = "central-private-value"

func newSecretsSetup(t *testing.T) secretsSetup {
	t.Helper()
	s := secretsSetup{dir: t.TempDir()}
	s.outside = filepath.Join(s.dir, "link.key")
	if err := os.Mkdir(filepath.Join(s.dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	for path, v := range map[string]string{filepath.Join(s.dir, "secrets", "hook"): "https://hooks.example.com/x", s.outside: stolenValue} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(s.outside, filepath.Join(s.dir, "secrets", "escape")); err != nil {
		t.Fatal(err)
	}
	// The reviewer's: a link to central's own environment, which an error
	// used to name with central's process id.
	if err := os.Symlink("/proc/self/environ", filepath.Join(s.dir, "secrets", "self")); err != nil {
		t.Fatal(err)
	}
	return s
}

// attacks are references an admin might write to read what central can:
// each with what the refusal must name.
func (s secretsSetup) attacks() map[string]string {
	return map[string]string{
		"file:/etc/passwd":         "outside the directories secrets.dirs allows",
		"file:" + s.outside:        "outside the directories secrets.dirs allows",
		"file:../x":                "outside the directories secrets.dirs allows",
		"file:secrets/../link.key": "outside the directories secrets.dirs allows",
		"file:secrets/escape":      "a symbolic link leads outside the directories secrets.dirs allows",
		"file:secrets/self":        "a symbolic link leads outside the directories secrets.dirs allows",
		"env:OUTBOX_STORE_DSN":     "only variables whose names start with OUTBOX_SECRET_",
		"env:HOME":                 "only variables whose names start with OUTBOX_SECRET_",
	}
}

// TestStartRefusesReferencesOutsideThePolicy: references in the file's
// lists and channels that read outside secrets.dirs or secrets.env_prefix
// are setting errors at start, naming the setting and the rule; the allowed
// ones, relative to the file's directory, pass.
func TestStartRefusesReferencesOutsideThePolicy(t *testing.T) {
	s := newSecretsSetup(t)
	var b strings.Builder
	b.WriteString("secrets:\n  dirs: [secrets]\nlists:\n  - name: ok\n    type: webhook\n    targets: [file:secrets/hook, env:OUTBOX_SECRET_HOOK]\n")
	var want []string
	i := 1
	for ref, rule := range s.attacks() {
		fmt.Fprintf(&b, "  - name: l%d\n    type: webhook\n    targets: [%q]\n", i, ref)
		want = append(want, fmt.Sprintf("lists[%d].targets[0]: %s: ", i, ref), rule)
		i++
	}
	b.WriteString("channels:\n  - type: email\n    settings: {host: h, from: f@example.com, auth: xoauth2, token_url: 'http://127.0.0.1:1/token', client_id: c, client_secret: 'file:/etc/shadow'}\n")
	want = append(want, "channels[0].settings.client_secret: file:/etc/shadow: ", ": secret reference not allowed")
	// The operator's start-up errors keep what central found.
	real, _ := filepath.EvalSymlinks(s.outside)
	want = append(want, "(it leads to "+real+")", "(the path is /etc/passwd; secrets.dirs is "+filepath.Join(s.dir, "secrets")+")")
	file := filepath.Join(s.dir, "central.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := loadConfig(commandLine{File: file}, nil)
	if err == nil {
		t.Fatal("a configuration reading outside secrets.dirs was accepted")
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("the error lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "lists[0]") || strings.Contains(msg, stolenValue) {
		t.Errorf("refused an allowed reference, or showed a value:\n%s", msg)
	}
	if l == nil || l.Cfg.ConfigDir != s.dir {
		t.Errorf("ConfigDir %q, want the file's directory %s", l.Cfg.ConfigDir, s.dir)
	}

	// The built binary refuses to start with the same message.
	code, out := runToEnd(t, t.TempDir(), childEnv(), "central", "-config", file)
	if code != exitUsage || !strings.Contains(out, "channels[0].settings.client_secret: file:/etc/shadow: ") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestSecretsSettings(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "afile"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		yaml string
		env  map[string]string
		want []string
	}{
		"empty prefix":         {yaml: "secrets: {env_prefix: ''}\n", want: []string{`secrets.env_prefix: empty: give the prefix`}},
		"prefix of a setting":  {yaml: "secrets: {env_prefix: OUTBOX_}\n", want: []string{`secrets.env_prefix: "OUTBOX_" would let a reference read OUTBOX_`}},
		"prefix of the DSN":    {env: map[string]string{"OUTBOX_SECRETS_ENV_PREFIX": "OUTBOX_STORE"}, want: []string{`secrets.env_prefix: "OUTBOX_STORE" would let a reference read OUTBOX_STORE_`}},
		"prefix of a test DSN": {yaml: "secrets: {env_prefix: OUTBOX_TEST_}\n", want: []string{`would let a reference read OUTBOX_TEST_POSTGRES_DSN`}},
		"prefix not a name":    {yaml: "secrets: {env_prefix: 'A-B'}\n", want: []string{`secrets.env_prefix: "A-B" holds a character other than`}},
		// A short prefix reaches other programs' credentials in central's
		// environment: P and PG PostgreSQL's PGPASSWORD, AWS the cloud keys.
		"prefix P":        {yaml: "secrets: {env_prefix: P}\n", want: []string{`secrets.env_prefix: "P" must be at least 4 characters and end with _`, `"P" would let a reference read PGPASSWORD, another program's credential`}},
		"prefix PG":       {yaml: "secrets: {env_prefix: PG}\n", want: []string{`"PG" must be at least 4`, `"PG" would let a reference read PGPASSWORD`}},
		"prefix AWS":      {yaml: "secrets: {env_prefix: AWS}\n", want: []string{`"AWS" must be at least 4`, `"AWS" would let a reference read AWS_ACCESS_KEY_ID`}},
		"prefix AWS_":     {yaml: "secrets: {env_prefix: AWS_}\n", want: []string{`"AWS_" would let a reference read AWS_ACCESS_KEY_ID, another program's credential`}},
		"prefix no _":     {yaml: "secrets: {env_prefix: PLANTSECRET}\n", want: []string{`"PLANTSECRET" must be at least 4 characters and end with _`}},
		"prefix DATABASE": {yaml: "secrets: {env_prefix: DATABASE_}\n", want: []string{`"DATABASE_" would let a reference read DATABASE_URL`}},
		"missing dir":     {yaml: "secrets: {dirs: [nope]}\n", want: []string{`secrets.dirs[0]: ` + filepath.Join("DIR", "nope") + `: no such file or directory`}},
		"not a dir":       {yaml: "secrets: {dirs: [afile, '']}\n", want: []string{`secrets.dirs[0]: ` + filepath.Join("DIR", "afile") + ` is not a directory`, `secrets.dirs[1]: empty`}},
		"root":            {yaml: "secrets: {dirs: [/]}\n", want: []string{`secrets.dirs[0]: / is the root of the file system`}},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, "central.yaml")
			if err := os.WriteFile(file, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var env []string
			for k, v := range c.env {
				env = append(env, k+"="+v)
			}
			_, err := loadConfig(commandLine{File: file}, env)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := strings.ReplaceAll(err.Error(), dir, "DIR")
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
	// Variables with the prefix are not warned about as unknown.
	l, err := loadConfig(commandLine{}, []string{"OUTBOX_SECRET_HOOK=x", "OUTBOX_NOPE=y"})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(l.Warnings, "\n"); strings.Contains(w, "OUTBOX_SECRET_HOOK") || !strings.Contains(w, "OUTBOX_NOPE") {
		t.Errorf("warnings %q", l.Warnings)
	}
}

// TestSecretsPolicyKeepsCentralsOwnSecretsOut: a policy that would let a
// list or channel read the link's token file, the admin's password, a TLS
// key or the SQLite database is refused at start, naming both settings.
func TestSecretsPolicyKeepsCentralsOwnSecretsOut(t *testing.T) {
	s := newSecretsSetup(t)
	file := filepath.Join(s.dir, "central.yaml")
	yaml := fmt.Sprintf(`data_dir: %[1]s
secrets: {dirs: [.]}
link:
  listen: 127.0.0.1:7443
  sites: [{id: plant-1, token: 'file:link.key'}]
http:
  listen: 127.0.0.1:8080
  admin: {name: root, password: 'env:OUTBOX_SECRET_ADMIN'}
`, s.dir)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadConfig(commandLine{File: file}, nil)
	for _, want := range []string{
		"secrets.dirs: lets a reference of a list or channel read " + s.outside + ", the file of link.sites[0].token",
		"secrets.dirs: lets a reference of a list or channel read " + filepath.Join(s.dir, "outbox.db") + ", the file of store.dsn (the SQLite database)",
		"secrets.env_prefix: lets a reference of a list or channel read OUTBOX_SECRET_ADMIN, which http.admin.password names",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestOwnReferencesStartAtTheFilesDirectory: the configuration's own
// relative references resolve against its file's directory, not the
// working directory, and are not limited by the secrets policy.
func TestOwnReferencesStartAtTheFilesDirectory(t *testing.T) {
	s := newSecretsSetup(t)
	file := filepath.Join(s.dir, "central.yaml")
	yaml := "link:\n  listen: 127.0.0.1:7443\n  sites: [{id: plant-1, token: 'file:link.key'}]\nhttp:\n  listen: 127.0.0.1:8080\n  admin: {name: root, password: 'file:../elsewhere/admin.pw'}\n"
	elsewhere := filepath.Join(filepath.Dir(s.dir), "elsewhere")
	if err := os.MkdirAll(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "admin.pw"), []byte("the admin's password"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := loadConfig(commandLine{File: file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Cfg.Link.Sites[0].Token, "file:"+s.outside; got != want {
		t.Errorf("link token %q, want %q", got, want)
	}
	if got, want := l.Cfg.HTTP.Admin.Password, "file:"+filepath.Join(filepath.Dir(s.dir), "elsewhere", "admin.pw"); got != want {
		t.Errorf("admin password %q, want %q", got, want)
	}
	sl, err := siteSchema.load(commandLine{File: filepath.Join("..", "..", "configs", "site-a.yaml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join("..", "..", "configs", "demo", "plant-1.token"))
	if sl.Cfg.Central.Token != "file:"+abs {
		t.Errorf("site token %q, want %q", sl.Cfg.Central.Token, "file:"+abs)
	}
}

// TestAPIRefusesReferencesOutsideThePolicy plays an admin of the real
// central binary who puts into a list or a channel references to central's
// files and settings (the review's attack: an e-mail channel whose
// client_secret is file:/etc/shadow and whose token_url is the attacker's
// listener). Each PUT is refused with 400 naming the field and the rule, and
// nothing is stored; references the configuration allows are accepted.
func TestAPIRefusesReferencesOutsideThePolicy(t *testing.T) {
	s := newSecretsSetup(t)
	if err := os.WriteFile(filepath.Join(s.dir, "admin.pw"), []byte("the admin's password"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopback(t)
	file := filepath.Join(s.dir, "central.yaml")
	data := fmt.Sprintf("data_dir: %s\nlog: {format: json}\nsecrets: {dirs: [secrets]}\nhttp:\n  listen: %q\n  admin: {name: root, password: 'file:admin.pw'}\n",
		t.TempDir(), addr)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// Started from another directory: relative references start at the
	// file's directory.
	p := start(t, t.TempDir(), childEnv(), "central", "-config", file)
	p.waitFor(t, `"msg":"operator page and API listening"`, startTimeout)
	base := "http://" + addr
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	do := func(method, path string, v any) (int, string) {
		t.Helper()
		b, _ := json.Marshal(v)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, out := do(http.MethodPost, "/api/v1/login", api.Login{Name: "root", Password: "the admin's password"}); code >= 300 {
		t.Fatalf("login: %d %s", code, out)
	}

	for ref, rule := range s.attacks() {
		code, out := do(http.MethodPut, "/api/v1/lists/stolen", api.List{Type: "webhook", Targets: []string{"https://example.com/ok", ref}})
		if code != http.StatusBadRequest || !strings.Contains(out, "targets[1]: "+ref+": ") || !strings.Contains(out, rule) {
			t.Errorf("PUT a list with target %s: %d %s, want 400 naming targets[1] and %q", ref, code, out, rule)
		}
		code, out = do(http.MethodPut, "/api/v1/channels/email", api.Channel{Settings: map[string]string{
			"host": "smtp.example.com", "from": "outbox@example.com", "auth": "xoauth2",
			"token_url": "http://127.0.0.1:9/attacker", "client_id": "x", "client_secret": ref}})
		if code != http.StatusBadRequest || !strings.Contains(out, "settings.client_secret: "+ref+": ") {
			t.Errorf("PUT email with client_secret %s: %d %s, want 400 naming settings.client_secret", ref, code, out)
		}
		if strings.Contains(out, stolenValue) {
			t.Errorf("the answer shows the file's content: %s", out)
		}
		// The refusal names the reference and the rule, not what central
		// found: no absolute path it resolved, no link's target, no
		// process id.
		if !strings.Contains(ref, s.dir) && strings.Contains(out, s.dir) || strings.Contains(out, "/proc/") && !strings.Contains(ref, "/proc/") {
			t.Errorf("PUT with %s: the answer discloses central's paths: %s", ref, out)
		}
	}
	if code, out := do(http.MethodGet, "/api/v1/lists/stolen", nil); code != http.StatusNotFound {
		t.Errorf("a refused list was stored: %d %s", code, out)
	}
	if code, out := do(http.MethodPut, "/api/v1/lists/hooks", api.List{Type: "webhook",
		Targets: []string{"file:secrets/hook", "file:" + filepath.Join(s.dir, "secrets", "later"), "env:OUTBOX_SECRET_HOOK"}}); code != http.StatusOK {
		t.Errorf("PUT a list with allowed references: %d %s", code, out)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Output())
	}
	if strings.Contains(p.Output(), stolenValue) {
		t.Fatal("the file's content reached the log")
	}
}

// TestEnvExposedNamesWhatThePrefixReaches: central logs at start the
// variables of its environment the prefix lets a reference read, by name.
func TestEnvExposedNamesWhatThePrefixReaches(t *testing.T) {
	got := envExposed("OUTBOX_SECRET_", []string{"OUTBOX_SECRET_B=2", "PGPASSWORD=x", "OUTBOX_SECRET_A=1", "OUTBOX_SECRETS=3", "OUTBOX_SECRET_A=dup"})
	if want := []string{"OUTBOX_SECRET_A", "OUTBOX_SECRET_B"}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestReferencesResolveAtTheFileAndEveryBrokenOneIsNamed runs central from
// a working directory that holds decoys at the references' relative paths.
// Every relative file: reference (central's own and its lists') resolves
// against the configuration file's directory; two broken references are
// both named at validation, with the other broken rules, exit 2, before
// anything starts, and without a value in the text.
func TestReferencesResolveAtTheFileAndEveryBrokenOneIsNamed(t *testing.T) {
	const (
		decoy  = "the decoy in the working directory"
		secret = "the real admin password"
	)
	confDir, workDir := t.TempDir(), t.TempDir()
	write := func(dir, rel, v string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"admin.pw", "tokens/plant-1", "secrets/hook"} {
		write(workDir, rel, decoy)
	}
	if err := os.Mkdir(filepath.Join(confDir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(confDir, "central.yaml")
	write(confDir, "central.yaml", fmt.Sprintf(`data_dir: %s
log: {level: loud}
secrets: {dirs: [secrets]}
link:
  listen: 127.0.0.1:0
  sites: [{id: plant-1, token: 'file:tokens/plant-1'}]
http:
  listen: 127.0.0.1:0
  admin: {name: root, password: 'file:admin.pw'}
lists:
  - {name: hooks, type: webhook, targets: ['file:secrets/hook']}
`, t.TempDir()))

	code, out := runToEnd(t, workDir, childEnv(), "central", "-config", file)
	for _, want := range []string{
		"http.admin.password: read file " + filepath.Join(confDir, "admin.pw") + ": no such file or directory",
		"link.sites[0].token: read file " + filepath.Join(confDir, "tokens", "plant-1") + ": no such file or directory",
		`log.level: unknown level "loud"`,
		"3 problems",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
	if code != exitUsage || strings.Contains(out, decoy) || strings.Contains(out, "plugin") {
		t.Errorf("exit %d, want %d, with no value and before any plugin starts:\n%s", code, exitUsage, out)
	}

	// With the files next to the configuration, the same references
	// resolve there, whatever the working directory holds.
	write(confDir, "admin.pw", secret)
	write(confDir, "tokens/plant-1", "the plant's token")
	write(confDir, "secrets/hook", "https://hooks.example.com/x")
	t.Chdir(workDir)
	l, err := loadConfig(commandLine{File: file}, []string{"OUTBOX_LOG_LEVEL=info"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("warnings %v", l.Warnings)
	}
	own := secretref.Own(l.Cfg.ConfigDir)
	for ref, want := range map[string]string{l.Cfg.HTTP.Admin.Password: secret, l.Cfg.Link.Sites[0].Token: "the plant's token"} {
		if got, err := own.Resolve(ref); err != nil || got != want {
			t.Errorf("%s resolves to %q, %v; want the file next to the configuration", ref, got, err)
		}
	}
	if got, err := l.Cfg.SecretPolicy().Resolve(l.Cfg.Lists[0].Targets[0]); err != nil || got != "https://hooks.example.com/x" {
		t.Errorf("the list's target resolves to %q, %v; want the file next to the configuration", got, err)
	}

	// A list's target that does not resolve is a warning: the policy
	// allows a file that is not there yet, and its deliveries park.
	if err := os.Remove(filepath.Join(confDir, "secrets", "hook")); err != nil {
		t.Fatal(err)
	}
	l, err = loadConfig(commandLine{File: file}, []string{"OUTBOX_LOG_LEVEL=info"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "lists[0].targets[0]: read file secrets/hook: no such file or directory") {
		t.Errorf("warnings %q, want one naming lists[0].targets[0]", l.Warnings)
	}
}

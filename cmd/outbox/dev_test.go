package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/ports"
)

// devTestPassword is the admin's password the tests give outbox dev.
const devTestPassword = "dev-test-password-42"

// devInfo is what outbox dev printed.
type devInfo struct {
	page  string // the operator page's URL, ending in /
	sites string // the site API addresses
	data  string // the data directory
}

// startDev runs `outbox dev` on free ports with JSON logs and waits for the
// block of addresses it prints.
func startDev(t *testing.T, args ...string) (*proc, devInfo) {
	t.Helper()
	return startDevIn(t, t.TempDir(), args...)
}

// startDevIn is startDev run from the working directory wd.
func startDevIn(t *testing.T, wd string, args ...string) (*proc, devInfo) {
	t.Helper()
	args = append([]string{"dev", "-http", "127.0.0.1:0", "-free-ports", "-log-format", "json", "-log-level", "info"}, args...)
	p := start(t, wd, childEnv(devPasswordEnv+"="+devTestPassword), args...)
	p.waitFor(t, "Ctrl-C stops everything", startTimeout)
	field := func(label string) string {
		line := p.waitFor(t, label, time.Second)
		_, v, _ := strings.Cut(line, label)
		v, _, _ = strings.Cut(strings.TrimSpace(v), " (")
		return v
	}
	info := devInfo{page: field("Operator page:"), sites: field("Site API:"), data: field("Data:")}
	if login := field("Log in:"); login != "admin / "+devTestPassword {
		t.Errorf("printed login %q, want the one of %s", login, devPasswordEnv)
	}
	if !strings.HasPrefix(info.page, "http://127.0.0.1:") || strings.Count(info.sites, ",") != 2 || info.data == "" {
		t.Fatalf("printed %+v:\n%s", info, p.Output())
	}
	return p, info
}

// stopDev sends SIGINT and checks a clean exit: code 0, no error in the
// log, every part stopped.
func stopDev(t *testing.T, p *proc) string {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("outbox dev exited %d after SIGINT, want 0:\n%s", code, p.Output())
	}
	out := p.Output()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("an error in the log: %s", l)
		}
	}
	if n := strings.Count(out, `"msg":"site node stopped"`); n != 3 {
		t.Errorf("%d \"site node stopped\" lines, want 3:\n%s", n, out)
	}
	for _, want := range []string{`"msg":"central stopped"`, `"msg":"plugin process exited"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s line:\n%s", want, out)
		}
	}
	return out
}

// devSend sends a notification with `outbox notify send` and returns its id.
func devSend(t *testing.T, sites, list, subject string) string {
	t.Helper()
	code, out := runToEnd(t, t.TempDir(), childEnv(), "notify", "send", "-site", sites, "-list", list, "-subject", subject, "-body", "hello")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 36 {
		t.Fatalf("notify send: exit %d:\n%s", code, out)
	}
	return id
}

// devLogin logs in as the admin and returns an HTTP client holding the
// session cookie, and the API client over it.
func devLogin(t *testing.T, page string) (*http.Client, *client.Client) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := hc.Post(page+"api/v1/login", "application/json",
		strings.NewReader(`{"name":"admin","password":"`+devTestPassword+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("log in as admin: HTTP %d", resp.StatusCode)
	}
	c, err := client.New(page, "", client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	return hc, c
}

// awaitStatus polls the API until notification id has status want.
func awaitStatus(t *testing.T, c *client.Client, id string, want ports.Status) api.Detail {
	t.Helper()
	deadline := time.Now().Add(runTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		d, err := c.Notification(t.Context(), id)
		if err == nil && d.Status == want {
			return d
		}
		if err != nil && !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("GET notification %s: %v", id, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %s not %s within %s: %+v", id, want, runTimeout, d)
		}
		<-tick.C
	}
}

// TestDevDeliversEndToEnd: outbox dev runs central, the site and the
// capture; a notification sent to the printed site addresses with the CLI
// reaches the capture (the /mail page shows it) and ends Delivered; SIGINT
// stops everything cleanly and removes the temporary data.
func TestDevDeliversEndToEnd(t *testing.T) {
	p, info := startDev(t)
	subject := "dev end to end " + rand.Text()[:8]
	id := devSend(t, info.sites, "demo", subject)

	hc, c := devLogin(t, info.page)
	d := awaitStatus(t, c, id, ports.StatusDelivered)
	if d.List != "demo" || d.SourceSite != devSite || len(d.ResolvedTargets) != 1 || d.ResolvedTargets[0] != "demo@example.com" {
		t.Errorf("delivered notification %+v", d.Notification)
	}
	resp, err := hc.Get(info.page + "mail")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /mail: HTTP %d, %v", resp.StatusCode, err)
	}
	if !strings.Contains(string(body), subject) || !strings.Contains(string(body), "demo@example.com") {
		t.Errorf("the /mail page does not show the mail %q to demo@example.com:\n%s", subject, body)
	}
	if !strings.Contains(string(body), `<div class="banner">outbox dev: everything runs in one process`) {
		t.Errorf("the page shows no dev banner:\n%s", body)
	}
	// The binary under test is not on PATH: the commands to try name it
	// by its path.
	if want := "  " + outboxBinary(t) + " notify send -site " + info.sites + " -list demo "; !strings.Contains(p.Output(), want) {
		t.Errorf("outbox dev does not print %q to try:\n%s", want, p.Output())
	}

	stopDev(t, p)
	if _, err := os.Stat(info.data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the temporary data directory %s is still there (%v)", info.data, err)
	}
}

// TestDevBounceParks: a notification to demo-bounce is refused by the
// capture with 550 and parks at once. With -data-dir the data stays after
// the stop, and the secret files do not.
func TestDevBounceParks(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "dev-data")
	p, info := startDev(t, "-data-dir", dataDir)
	if info.data != dataDir {
		t.Errorf("printed data directory %q, want %q", info.data, dataDir)
	}
	id := devSend(t, info.sites, "demo-bounce", "dev bounce")
	_, c := devLogin(t, info.page)
	d := awaitStatus(t, c, id, ports.StatusParked)
	if d.RetryCount > 1 || !strings.Contains(d.LastError, "550") {
		t.Errorf("parked notification: retry count %d, last error %q; want a permanent 550 at the first attempt", d.RetryCount, d.LastError)
	}

	stopDev(t, p)
	if _, err := os.Stat(filepath.Join(dataDir, "central", "outbox.db")); err != nil {
		t.Errorf("the kept data directory lost central's database: %v", err)
	}
	for _, name := range []string{"admin.password", "link.token"} {
		if _, err := os.Stat(filepath.Join(dataDir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left in the data directory (%v)", name, err)
		}
	}
}

// TestDevRefusesBadFlags: outbox dev listens on loopback only and checks the
// admin's password from the environment before it starts anything.
func TestDevRefusesBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		environ []string
		want    string
	}{
		{args: []string{"dev", "-http", "0.0.0.0:8080"}, want: `-http: "0.0.0.0:8080" is not a loopback address`},
		{args: []string{"dev", "-http", "8080"}, want: `-http: "8080" is not host:port`},
		{args: []string{"dev", "-log-level", "loud"}, want: `log.level: unknown level "loud"`},
		{args: []string{"dev"}, environ: []string{devPasswordEnv + "=short"}, want: devPasswordEnv + ": must be 10 to 72 bytes long, got 5"},
		{args: []string{"dev", "extra"}, want: `outbox dev: unexpected argument "extra"`},
	} {
		t.Run(strings.Join(append(tt.environ, tt.args...), " "), func(t *testing.T) {
			var out, errw strings.Builder
			code := run(context.Background(), tt.args, tt.environ, &out, &errw)
			if code != exitUsage || !strings.Contains(errw.String(), tt.want) || out.Len() > 0 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out.String(), errw.String(), exitUsage, tt.want)
			}
		})
	}
}

// TestNotifyDefaultsToDevSite: with neither -site nor OUTBOX_SITE_ADDR,
// outbox notify talks to outbox dev's site, whose first node's API is the
// well-known 127.0.0.1:7101.
func TestNotifyDefaultsToDevSite(t *testing.T) {
	const devSite = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
	if got := devSiteAddrs(); got != devSite {
		t.Errorf("outbox dev's site %q, want %q", got, devSite)
	}
	for _, tc := range []struct {
		environ []string
		want    string
	}{{nil, devSite}, {[]string{"OUTBOX_SITE_ADDR=10.0.0.1:7101"}, "10.0.0.1:7101"}} {
		var out, errw bytes.Buffer
		code := run(t.Context(), []string{"notify", "status", "-h"}, tc.environ, &out, &errw)
		if code != exitOK || !strings.Contains(errw.String(), `(default "`+tc.want+`")`) {
			t.Errorf("environment %v: exit %d, -site's default not %q:\n%s", tc.environ, code, tc.want, errw.String())
		}
	}
}

// TestDevCommandIsTheOneThatWorks: the commands outbox dev prints start
// with "outbox" only when that name on PATH is the running binary; a go
// run build prints go run when the working directory holds cmd/outbox (the
// clone's root), its own path otherwise; any other binary its own path,
// shell-quoted unless every character is plain.
func TestDevCommandIsTheOneThatWorks(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("binary "+rel), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	installed := write("bin/outbox")
	linked := filepath.Join(dir, "link/outbox")
	if err := os.MkdirAll(filepath.Dir(linked), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(installed, linked); err != nil {
		t.Fatal(err)
	}
	built := write("clone/outbox")
	goRun := write("go-build1234/b001/exe/outbox")
	spaced := write("my clone/outbox")
	quoted := write("it's/outbox")
	glob := write("a*b/outbox")
	tilde := write("~x/outbox")
	notFound := func(string) (string, error) { return "", exec.ErrNotFound }
	found := func(p string) func(string) (string, error) {
		return func(string) (string, error) { return p, nil }
	}
	// The working directory: the clone's root (cmd/outbox there) or not.
	clone := filepath.Join(dir, "clone")
	if err := os.MkdirAll(filepath.Join(clone, "cmd", "outbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	inClone := func(p string) (fs.FileInfo, error) { return os.Stat(filepath.Join(clone, p)) }
	elsewhere := func(p string) (fs.FileInfo, error) { return os.Stat(filepath.Join(dir, "bin", p)) }
	for _, tc := range []struct {
		name     string
		exe      string
		lookPath func(string) (string, error)
		stat     func(string) (fs.FileInfo, error)
		want     string
	}{
		{"installed on PATH", installed, found(installed), elsewhere, "outbox"},
		{"PATH holds a link to it", installed, found(linked), elsewhere, "outbox"},
		{"built in the clone, not on PATH", built, notFound, inClone, built},
		{"built in the clone, another outbox on PATH", built, found(installed), inClone, built},
		{"go run in the clone", goRun, notFound, inClone, "go run ./cmd/outbox"},
		{"go run in the clone, an installed outbox on PATH", goRun, found(installed), inClone, "go run ./cmd/outbox"},
		{"go run from another directory", goRun, notFound, elsewhere, goRun},
		{"a path with a space", spaced, notFound, elsewhere, "'" + spaced + "'"},
		{"a path with a quote", quoted, notFound, elsewhere, "'" + strings.ReplaceAll(quoted, "'", `'\''`) + "'"},
		{"a path with a glob", glob, notFound, elsewhere, "'" + glob + "'"},
		{"a path with a tilde", tilde, notFound, elsewhere, "'" + tilde + "'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := devCommand(func() (string, error) { return tc.exe, nil }, tc.lookPath, tc.stat)
			if got != tc.want {
				t.Errorf("devCommand = %q, want %q", got, tc.want)
			}
			// The command works: a shell runs the binary it names.
			if got != "outbox" && !strings.HasPrefix(got, "go run") {
				out, err := exec.Command("sh", "-c", "cat "+got).Output()
				if err != nil || !strings.HasPrefix(string(out), "binary ") {
					t.Errorf("sh -c 'cat %s': %q, %v", got, out, err)
				}
			}
		})
	}
	if got := devCommand(func() (string, error) { return "", errors.New("no /proc") }, notFound, os.Stat); got != "outbox" {
		t.Errorf("devCommand without the executable's path = %q, want outbox", got)
	}
}

// TestDevDeliversIntoTheWebhookCapture: an overlay given with -config adds
// a list of the built-in webhook channel whose target is {{hooks}}; dev
// prints the capture and a command for the list, the notification is
// Delivered into the capture, and the page's /hooks shows the request with
// its token hidden.
func TestDevDeliversIntoTheWebhookCapture(t *testing.T) {
	overlay := filepath.Join(t.TempDir(), "overlay.yaml")
	if err := os.WriteFile(overlay, []byte("lists:\n  - name: control-room\n    type: webhook\n    targets: ['{{hooks}}/control-room?token=s3cr3t-in-url']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, info := startDev(t, "-config", overlay)
	hooks := p.waitFor(t, "Webhooks:", time.Second)
	if !strings.Contains(hooks, "http://127.0.0.1:") || !strings.Contains(hooks, info.page+"hooks") {
		t.Errorf("printed %q, want the capture's URL and the page's /hooks", hooks)
	}
	if !strings.Contains(p.Output(), " notify send -site "+info.sites+" -list control-room ") {
		t.Errorf("no command to try the overlay's list:\n%s", p.Output())
	}
	subject := "dev webhook " + rand.Text()[:8]
	id := devSend(t, info.sites, "control-room", subject)
	hc, c := devLogin(t, info.page)
	awaitStatus(t, c, id, ports.StatusDelivered)

	resp, err := hc.Get(info.page + "hooks")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /hooks: HTTP %d, %v", resp.StatusCode, err)
	}
	page := string(body)
	for _, want := range []string{"<code>POST /control-room?token=(hidden)</code>", subject, `href="/hooks" aria-current="page"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/hooks lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "s3cr3t-in-url") {
		t.Error("/hooks shows the target's token")
	}
	stopDev(t, p)
}

// TestDevRefusesABadOverlay: an overlay that sets what dev keeps its own,
// or that does not parse, is refused before anything starts, every problem
// named; so is a -plugins-dir that is not a directory.
func TestDevRefusesABadOverlay(t *testing.T) {
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.yaml")
	if err := os.WriteFile(overlay, []byte("http:\n  listen: 0.0.0.0:80\nstore:\n  driver: postgres\nlists:\n  - name: x\n    type: webhook\n    targets: ['{{hooks}}/x']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errw strings.Builder
	code := run(t.Context(), []string{"dev", "-config", overlay, "-plugins-dir", overlay}, nil, &out, &errw)
	for _, want := range []string{"invalid configuration, 3 problems", "http: outbox dev keeps its own; an overlay sets lists, channels, plugins, secrets",
		"store: outbox dev keeps its own", "-plugins-dir: " + overlay + " is not a directory"} {
		if !strings.Contains(errw.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errw.String())
		}
	}
	if code != exitUsage || out.Len() > 0 {
		t.Errorf("exit %d, stdout %q; want exit %d and nothing printed", code, out.String(), exitUsage)
	}
	code = run(t.Context(), []string{"dev", "-config", filepath.Join(dir, "missing.yaml")}, nil, &out, &errw)
	if code != exitUsage || !strings.Contains(errw.String(), "missing.yaml: no such file or directory") {
		t.Errorf("a missing overlay: exit %d:\n%s", code, errw.String())
	}
	// Once dev runs, the overlay is read again: its error names -config once.
	var cfg Config
	_, err := devOverlay(&cfg, devFlags{overlay: filepath.Join(dir, "missing.yaml")}, "http://127.0.0.1:8090")
	if err == nil || !strings.HasPrefix(err.Error(), "-config: ") || strings.Contains(err.Error(), "-config: -config:") {
		t.Errorf("devOverlay of a missing file: %v, want one -config: prefix", err)
	}
}

// TestDevOverlayMerges: the overlay's lists and channels join dev's (one
// named like dev's replaces it), its plugins and secrets sections replace
// dev's when set, and its relative references start at its directory.
func TestDevOverlayMerges(t *testing.T) {
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.yaml")
	yaml := `lists:
  - {name: control-room, type: jsonpost, targets: ['{{hooks}}/control-room']}
  - {name: demo, type: email, targets: [me@example.com]}
channels:
  - {type: jsonpost, settings: {room: '3'}}
plugins:
  external: [{type: jsonpost, command: /opt/jsonpost}]
secrets:
  dirs: [secrets]
`
	if err := os.WriteFile(overlay, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ov, err := readDevOverlay(overlay, "http://127.0.0.1:9999")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Lists: []ListConfig{{Name: "demo", Type: "email", Targets: []string{"demo@example.com"}}, {Name: "demo-bounce", Type: "email"}},
		Channels: []ChannelConfig{{Type: "email", Settings: map[string]string{"host": "127.0.0.1"}}}, Plugins: defaultPluginsConfig()}
	lists := applyDevOverlay(&cfg, ov)
	if !slices.Equal(lists, []string{"control-room", "demo"}) {
		t.Errorf("overlay lists %v", lists)
	}
	var got []string
	for _, l := range cfg.Lists {
		got = append(got, l.Name+" "+strings.Join(l.Targets, ","))
	}
	if want := []string{"demo me@example.com", "demo-bounce ", "control-room http://127.0.0.1:9999/control-room"}; !slices.Equal(got, want) {
		t.Errorf("lists %q, want %q", got, want)
	}
	if len(cfg.Channels) != 2 || cfg.Channels[0].Type != "email" || cfg.Channels[1].Settings["room"] != "3" {
		t.Errorf("channels %+v", cfg.Channels)
	}
	if len(cfg.Plugins.External) != 1 || cfg.Plugins.External[0].Command != "/opt/jsonpost" || !slices.Equal(cfg.Secrets.Dirs, []string{"secrets"}) {
		t.Errorf("plugins %+v, secrets %+v", cfg.Plugins, cfg.Secrets)
	}
	if cfg.ConfigDir != dir || cfg.SecretPolicy().Base != dir {
		t.Errorf("references start at %q, want the overlay's directory %q", cfg.ConfigDir, dir)
	}
}

// TestDevRefusesAProblemOfTheMergedConfiguration: a problem that only the
// configuration merged from dev's, the overlay and -plugins-dir shows (a
// secrets directory that is not there), and a -plugins-dir its group may
// write (mkdir under umask 002), are reported before anything starts,
// through the configuration's error printer, exit 2.
func TestDevRefusesAProblemOfTheMergedConfiguration(t *testing.T) {
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.yaml")
	if err := os.WriteFile(overlay, []byte("secrets:\n  dirs: [nosuchdir]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errw strings.Builder
	code := run(t.Context(), []string{"dev", "-config", overlay}, nil, &out, &errw)
	if code != exitUsage || out.Len() > 0 || !strings.Contains(errw.String(), "outbox dev: invalid configuration, 1 problem") ||
		!strings.Contains(errw.String(), "secrets.dirs[0]: ") || !strings.Contains(errw.String(), "nosuchdir") {
		t.Errorf("secrets.dirs: [nosuchdir]: exit %d, stdout %q, stderr:\n%s", code, out.String(), errw.String())
	}

	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(plugins, 0o775); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errw.Reset()
	code = run(t.Context(), []string{"dev", "-plugins-dir", plugins}, nil, &out, &errw)
	if code != exitUsage || out.Len() > 0 || !strings.Contains(errw.String(), "-plugins-dir: "+plugins+" has mode drwxrwxr-x") ||
		!strings.Contains(errw.String(), "chmod go-w "+plugins) {
		t.Errorf("a group-writable -plugins-dir: exit %d, stdout %q, stderr:\n%s", code, out.String(), errw.String())
	}
}

// TestDevRunsWithARelativeDataDirAndAnOverlayElsewhere: dev's own files in
// a relative -data-dir are found although the overlay's relative paths
// start at its own directory; a reference of the overlay's that does not
// resolve is warned about, as central warns.
func TestDevRunsWithARelativeDataDirAndAnOverlayElsewhere(t *testing.T) {
	wd, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(elsewhere, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(elsewhere, "overlay.yaml")
	yaml := "secrets:\n  dirs: [secrets]\nlists:\n  - {name: control-room, type: webhook, targets: ['file:secrets/not-yet']}\n"
	if err := os.WriteFile(overlay, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p, info := startDevIn(t, wd, "-data-dir", "devdata", "-config", overlay)
	if want := filepath.Join(wd, "devdata"); info.data != want {
		t.Errorf("data in %q, want %q", info.data, want)
	}
	warned := false
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "lists[") && strings.Contains(l, "not-yet") &&
			strings.Contains(l, "park") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning about the overlay's unresolved reference:\n%s", p.Output())
	}
	stopDev(t, p)
}

package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/ports/waittest"
)

// fenced returns the code blocks of a Markdown text whose fence names lang.
func fenced(text, lang string) []string {
	re := regexp.MustCompile("(?ms)^```" + lang + "\n(.*?)^```$")
	var out []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestREADME follows README.md as an integrator would, from an empty folder,
// with the README's values as written (HOOK, dev's webhook capture; only
// OUTBOX, the checkout, is this one): it runs the README's shell steps with
// bash (the module, its files taken from the README's Go blocks, go mod
// tidy, the integrator's own kit test, the build, outbox plugin describe;
// the plugin directory, made under umask 002 as many systems do, and the
// overlay; outbox dev; outbox plugin deliver to $HOOK and outbox notify
// send) and checks that both notifications reached dev's webhook capture,
// on the page's /hooks. The README's main.go must be this directory's
// main.go, so the example shown is the example tested.
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	goBlocks, shBlocks := fenced(string(readme), "go"), fenced(string(readme), "sh")
	if len(goBlocks) != 2 || len(shBlocks) != 6 {
		t.Fatalf("README.md has %d go and %d sh blocks, want 2 (main.go, main_test.go) and 6 (variables, module, build, dev's files, dev, deliver and send)", len(goBlocks), len(shBlocks))
	}
	mainGo, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if goBlocks[0] != string(mainGo) {
		t.Fatal("the main.go shown in README.md differs from main.go")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}

	hookVar := regexp.MustCompile(`(?m)^HOOK=(\S+)`).FindStringSubmatch(shBlocks[0])
	if hookVar == nil {
		t.Fatalf("README.md's first block sets no HOOK:\n%s", shBlocks[0])
	}
	hookURL, err := url.Parse(hookVar[1])
	if err != nil {
		t.Fatal(err)
	}

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "outbox"), "./cmd/outbox")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build outbox: %v\n%s", err, out)
	}

	env := append(os.Environ(), "OUTBOX="+repo, "HOOK="+hookVar[1],
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "GOWORK=off", "GOFLAGS=")
	sh := func(dir, script string) string {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("step failed: %v\n--- script\n%s--- output\n%s", err, script, out)
		}
		return string(out)
	}

	// The first block only sets the two variables, which env gives.
	work := t.TempDir()
	sh(work, shBlocks[1])
	dir := filepath.Join(work, "jsonpost")
	for name, src := range map[string]string{"main.go": goBlocks[0], "main_test.go": goBlocks[1]} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := sh(dir, shBlocks[2])
	for _, want := range []string{"name:    jsonpost", "version: 0.1.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// 4. The plugin directory and the overlay, under the umask that makes
	// a directory its group may write, then dev itself, its page on a free
	// port (the README's 8080 may be in use on a test machine).
	sh(dir, "umask 002\n"+shBlocks[3])
	page, sites, hooks, stop := startDev(t, dir, env, strings.TrimSpace(shBlocks[4]))
	if hooks != "http://"+hookURL.Host {
		if strings.Contains(stop(), `"wanted":"`+hookURL.Host+`"`) {
			t.Skipf("port %s is taken on this machine: dev's webhook capture is at %s, not at the README's HOOK", hookURL.Host, hooks)
		}
		t.Fatalf("dev's webhook capture is at %s, not at the README's HOOK %s", hooks, hookVar[1])
	}
	if sites != defaultSites {
		env = append(env, "OUTBOX_SITE_ADDR="+sites) // a port of the README's site was taken
	}

	// 5. plugin deliver to $HOOK and notify send, from a second terminal.
	out = sh(dir, shBlocks[5])
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(out, "outcome: Success") || len(lines[len(lines)-1]) != 36 {
		t.Fatalf("plugin deliver and notify send printed:\n%s\nwant outcome: Success, then an id", out)
	}
	page2 := awaitHooks(t, page, "<code>POST /control-room</code>")
	for _, want := range []string{"<code>POST " + hookURL.Path + "</code>", "<code>POST /control-room</code>",
		"&#34;subject&#34;: &#34;Pump 3 stopped&#34;", "&#34;body&#34;: &#34;Pressure low.&#34;", "application/json"} {
		if !strings.Contains(page2, want) {
			t.Errorf("/hooks lacks %q:\n%s", want, page2)
		}
	}
	if out := stop(); strings.Contains(out, `"level":"ERROR"`) {
		t.Errorf("outbox dev logged an error:\n%s", out)
	}
}

// defaultSites is outbox dev's site API addresses when they are free, the
// default of outbox notify.
const defaultSites = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"

// devPassword is the admin's password the test gives outbox dev.
const devPassword = "readme-test-password"

// startDev runs the README's outbox dev command line with bash in dir, its
// page on a free port, and waits until it prints its addresses. It returns
// the page's URL, the site's addresses, the webhook capture's URL and the
// function that stops dev with SIGINT and returns its output.
func startDev(t *testing.T, dir string, env []string, line string) (page, sites, hooks string, stop func() string) {
	t.Helper()
	if !strings.HasPrefix(line, "outbox dev ") || strings.Contains(line, "\n") {
		t.Fatalf("the README's dev step is %q, want one outbox dev command", line)
	}
	cmd := exec.Command("bash", "-c", "exec "+line+" -http 127.0.0.1:0 -log-format json")
	cmd.Dir, cmd.Env = dir, append(env, "OUTBOX_DEV_ADMIN_PASSWORD="+devPassword)
	var out guardtest.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() string {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("outbox dev after SIGINT: %v", err)
				}
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
				t.Errorf("outbox dev did not stop within a minute of SIGINT")
			}
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	field := func(text, label string) string {
		_, v, ok := strings.Cut(text, label)
		if !ok {
			return ""
		}
		v, _, _ = strings.Cut(v, "\n")
		return strings.TrimSpace(v)
	}
	var ended error
	waittest.For(t, 3*time.Minute, "outbox dev to print its addresses", func() (bool, string) {
		select {
		case ended = <-done:
			return true, ""
		default:
		}
		return strings.Contains(out.String(), "Ctrl-C stops everything"), ""
	})
	text := out.String()
	if ended != nil || !strings.Contains(text, "Ctrl-C stops everything") {
		stopped = true
		t.Fatalf("outbox dev ended (%v):\n%s", ended, text)
	}
	page, sites = field(text, "Operator page:"), field(text, "Site API:")
	hooks, _, _ = strings.Cut(field(text, "Webhooks:"), " ")
	if page == "" || sites == "" || hooks == "" {
		t.Fatalf("outbox dev printed no page, site or webhook capture:\n%s", text)
	}
	return page, sites, hooks, stop
}

// awaitHooks logs in to dev's page and returns /hooks once it shows want,
// within a minute.
func awaitHooks(t *testing.T, page, want string) string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.PostForm(page+"login", url.Values{"name": {"admin"}, "password": {devPassword}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var body string
	waittest.For(t, time.Minute, "/hooks to show "+want, func() (bool, string) {
		resp, err := c.Get(page + "hooks")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /hooks: HTTP %d, %v", resp.StatusCode, err)
		}
		body = string(b)
		return strings.Contains(body, want), body
	})
	return body
}

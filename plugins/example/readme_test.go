package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
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

// TestREADME follows README.md as an integrator would, from an empty folder:
// it runs the README's shell steps with bash (the module, its files taken
// from the README's Go blocks, go mod tidy, the integrator's own kit test,
// the build, outbox plugin describe and deliver) and checks that the
// notification reached the HTTP endpoint; then it runs the plugin inside
// outbox dev as the README's last step says (the plugin directory and the
// overlay, outbox dev, outbox notify send) and checks that the
// notification reached dev's webhook capture, on the page's /hooks. The
// README's main.go must be this directory's main.go, so the example shown
// is the example tested.
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	goBlocks, shBlocks := fenced(string(readme), "go"), fenced(string(readme), "sh")
	if len(goBlocks) != 2 || len(shBlocks) != 6 {
		t.Fatalf("README.md has %d go and %d sh blocks, want 2 (main.go, main_test.go) and 6 (variables, module, build, dev's files, dev, send)", len(goBlocks), len(shBlocks))
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

	var mu sync.Mutex
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, m["subject"])
		mu.Unlock()
	}))
	defer hook.Close()

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "outbox"), "./cmd/outbox")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build outbox: %v\n%s", err, out)
	}

	env := append(os.Environ(), "OUTBOX="+repo, "HOOK="+hook.URL+"/hook",
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
	for _, want := range []string{"name:    jsonpost", "version: 0.1.0", "outcome: Success"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	mu.Lock()
	if len(got) != 1 || got[0] != "Pump 3 stopped" {
		t.Errorf("the endpoint got %q, want one notification \"Pump 3 stopped\"", got)
	}
	mu.Unlock()

	// 5. Inside outbox dev: the plugin directory and the overlay, dev
	// itself (on free ports, which the README's defaults are not in a
	// test), the send through dev's site, the request on /hooks.
	sh(dir, shBlocks[3])
	page, sites, stop := startDev(t, dir, env, strings.TrimSpace(shBlocks[4]))
	env = append(env, "OUTBOX_SITE_ADDR="+sites)
	if out := sh(dir, shBlocks[5]); len(strings.TrimSpace(out)) != 36 {
		t.Fatalf("notify send printed %q, not an id", out)
	}
	hooks := awaitHooks(t, page, "Pump 3 stopped")
	for _, want := range []string{"<code>POST /control-room</code>", "&#34;body&#34;: &#34;Pressure low.&#34;", "application/json"} {
		if !strings.Contains(hooks, want) {
			t.Errorf("/hooks lacks %q:\n%s", want, hooks)
		}
	}
	if out := stop(); strings.Contains(out, `"level":"ERROR"`) {
		t.Errorf("outbox dev logged an error:\n%s", out)
	}
}

// devPassword is the admin's password the test gives outbox dev.
const devPassword = "readme-test-password"

// startDev runs the README's outbox dev command line with bash in dir, on
// free ports, and waits until it prints its addresses. It returns the
// page's URL, the site's addresses and the function that stops dev with
// SIGINT and returns its output.
func startDev(t *testing.T, dir string, env []string, line string) (page, sites string, stop func() string) {
	t.Helper()
	if !strings.HasPrefix(line, "outbox dev ") || strings.Contains(line, "\n") {
		t.Fatalf("the README's dev step is %q, want one outbox dev command", line)
	}
	cmd := exec.Command("bash", "-c", "exec "+line+" -free-ports -http 127.0.0.1:0 -log-format json")
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
	if page == "" || sites == "" {
		t.Fatalf("outbox dev printed no page or site:\n%s", text)
	}
	return page, sites, stop
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

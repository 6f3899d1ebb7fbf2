package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
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
// notification reached the HTTP endpoint. The README's main.go must be this
// directory's main.go, so the example shown is the example tested.
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	goBlocks, shBlocks := fenced(string(readme), "go"), fenced(string(readme), "sh")
	if len(goBlocks) != 2 || len(shBlocks) != 3 {
		t.Fatalf("README.md has %d go and %d sh blocks, want 2 (main.go, main_test.go) and 3 (variables, module, build)", len(goBlocks), len(shBlocks))
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
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "Pump 3 stopped" {
		t.Errorf("the endpoint got %q, want one notification \"Pump 3 stopped\"", got)
	}
}

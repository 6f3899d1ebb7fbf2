package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// TestCompletionAnswersFromTheCommandTable: outbox __complete answers with
// the table's commands, each command's subcommands and the flags of the
// FlagSet it parses with, and a probe never runs a command.
func TestCompletionAnswersFromTheCommandTable(t *testing.T) {
	for _, tt := range []struct {
		words []string
		want  string // the lines, joined by spaces
	}{
		{[]string{"noti"}, "notifications notify"},
		{[]string{"notify", ""}, "health send status"},
		{[]string{"notify", "status", "ID", "-si"}, "-site"},
		{[]string{"notify", "send", "-list", ""}, ""},
		{[]string{"notifications", "retry", "-ye"}, "-yes"},
		{[]string{"site-calls", "retry", "SITE", "ID", "-y"}, "-yes"},
		{[]string{"site-calls", "d"}, "discard"},
		{[]string{"migrate", ""}, "down status up"},
		{[]string{"migrate", "down", "-y"}, "-yes"},
		{[]string{"site", "r"}, "recover"},
		{[]string{"site", "recover", "-y"}, "-yes"},
		{[]string{"central", "-store-d"}, "-store-driver -store-dsn"},
		{[]string{"dev", "-free"}, "-free-ports"},
		{[]string{"plugin", "deliver", "-tar"}, "-target"},
		{[]string{"plugin", "serve", ""}, ""},
		{[]string{"help", "tok"}, "tokens"},
		{[]string{"completion", ""}, "bash fish zsh"},
		{[]string{"login", "-password-"}, "-password-file -password-stdin"},
		{[]string{"login", "-passw"}, "-password-file -password-stdin"}, // -password is only refused: never offered
		// Flags before a subcommand, their values skipped.
		{[]string{"notify", "-site", "X", "he"}, "health"},
		{[]string{"notifications", "-server", "U", "li"}, "list"},
		{[]string{"migrate", "-config", "F", "st"}, "status"},
		{[]string{"site", "-config", "F", "r"}, "recover"},
		{[]string{"notify", "-si"}, "-site"},
		{[]string{"__comp"}, ""},
	} {
		code, stdout, stderr := runOutbox(append([]string{"__complete"}, tt.words...)...)
		if got := strings.Join(strings.Fields(stdout), " "); code != exitOK || got != tt.want || stderr != "" {
			t.Errorf("__complete %q: exit %d, %q (stderr %q), want %q", tt.words, code, got, stderr, tt.want)
		}
	}
	// Every command answers a probe without running: nothing but the
	// probe's lines.
	for _, c := range commands {
		if c.hidden {
			continue
		}
		out := probeCommand(context.Background(), []string{c.name}, nil)
		for _, path := range append([][]string{nil}, subPaths(out.Subs)...) {
			var buf bytes.Buffer
			code := c.run(context.Background(), append(path, cli.Probe), stdio{stdin: strings.NewReader(""), stdout: &buf, stderr: &buf})
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if line != "" && !strings.HasPrefix(line, "flag\t") && !strings.HasPrefix(line, "sub\t") {
					t.Errorf("outbox %s %q under a probe printed %q", c.name, path, line)
				}
			}
			if code != exitOK {
				t.Errorf("outbox %s %q under a probe: exit %d", c.name, path, code)
			}
		}
	}
	code, stdout, _ := runOutbox("completion", "bash")
	if code != exitOK || !strings.Contains(stdout, "complete -o default -F _outbox_complete outbox") {
		t.Errorf("completion bash: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := runOutbox("completion", "tcsh"); code != exitUsage || !strings.Contains(stderr, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d %q", code, stderr)
	}
}

// subPaths are the one-word paths of subs.
func subPaths(subs []string) [][]string {
	var paths [][]string
	for _, s := range subs {
		paths = append(paths, []string{s})
	}
	return paths
}

// TestCompletionScriptRunsInBash sources the script outbox completion
// bash prints into bash and completes as bash does, through the built
// binary on PATH and as ./outbox in its directory.
func TestCompletionScriptRunsInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	bin := outboxBinary(t)
	script, err := exec.Command(bin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "outbox.bash")
	if err := os.WriteFile(file, script, 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) string {
		t.Helper()
		words := strings.Split(line, " ")
		prog := fmt.Sprintf(`source %q
COMP_WORDS=(%s)
COMP_CWORD=%d
_outbox_complete
printf '%%s\n' "${COMPREPLY[@]}"
complete -p %s`, file, quoteWords(words), len(words)-1, words[0])
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		if words[0] == "./outbox" {
			// The binary built here, not on PATH, as the README runs it.
			cmd.Dir = filepath.Dir(bin)
			cmd.Env = childEnv()
		} else {
			cmd.Env = childEnv("PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"))
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return string(out)
	}
	for line, want := range map[string]string{
		"outbox notif":                        "notifications\nnotify\n",
		"outbox notify status ID -si":         "-site\n",
		"outbox notifications retry -status ": "\n", // a value: bash's own file names (-o default)
		"./outbox notif":                      "notifications\nnotify\n",
		"./outbox notify status ID -si":       "-site\n",
	} {
		got := complete(line)
		if !strings.HasPrefix(got, want) || !strings.Contains(got, "complete -o default -F _outbox_complete "+strings.Fields(line)[0]+"\n") {
			t.Errorf("%q completes to %q, want %q first", line, got, want)
		}
	}
}

// quoteWords writes words as a bash array's elements.
func quoteWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestCLIConsistencyAgainstDev runs the built binary against outbox dev:
// flags after the arguments, "did you mean", errors said once, the bulk
// preview's own exit code, and notify health without -site.
func TestCLIConsistencyAgainstDev(t *testing.T) {
	p, info := startDev(t)
	defer stopDev(t, p)
	server := strings.TrimSuffix(info.page, "/")
	token := strings.TrimPrefix(strings.Fields(p.waitFor(t, "export OUTBOX_SERVER=", time.Second))[2], "OUTBOX_TOKEN=")
	// The banner's login line is in the one flag style, and works as printed.
	// Its command is the binary's path, as the banner prints a command that
	// works from where outbox dev was started.
	login := strings.Fields(p.waitFor(t, "or as yourself: ", time.Second))
	if len(login) < 8 {
		t.Fatalf("banner's login line: %q", login)
	}
	if want := []string{"or", "as", "yourself:", login[3], "login", "-server", server, "-name"}; !slices.Equal(login[:len(want)], want) || !strings.HasSuffix(login[3], "outbox") {
		t.Errorf("banner's login line: %q", login)
	}
	env := childEnv("OUTBOX_SERVER="+server, "OUTBOX_TOKEN="+token, "OUTBOX_SITE_ADDR="+info.sites, "TZ=UTC")
	noSite := childEnv("OUTBOX_SERVER="+server, "OUTBOX_TOKEN="+token)

	// Flags after the arguments.
	code, out, errw := runCLI(t, env, "", "notify", "send", "-list", "demo-bounce", "-subject", "bounces")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("notify send: exit %d\n%s%s", code, out, errw)
	}
	code, out, errw = runCLI(t, noSite, "", "notify", "status", id, "-site", info.sites)
	if code != 0 || !strings.HasPrefix(out, id+" ") {
		t.Errorf("notify status ID -site X: exit %d\n%s%s", code, out, errw)
	}
	waittest.For(t, runTimeout, "the notification parked", func() (bool, string) {
		code, out, errw := runCLI(t, env, "", "notifications", "show", id, "-json")
		return code == 0 && strings.Contains(out, `"status": "`+string(ports.StatusParked)+`"`), out + errw
	})

	// notify health without -site: every node of the site, as send and
	// status find them.
	code, out, errw = runCLI(t, env, "", "notify", "health")
	if code != 0 || strings.Count(out, "site: dev-site\n") != 3 || strings.Count(out, "role: leader\n") != 1 {
		t.Errorf("notify health: exit %d\n%s%s", code, out, errw)
	}

	// Flags before the subcommand: the ones every notify command takes.
	code, out, errw = runCLI(t, noSite, "", "notify", "-site", info.sites, "health")
	if code != 0 || strings.Count(out, "site: dev-site\n") != 3 {
		t.Errorf("notify -site X health: exit %d\n%s%s", code, out, errw)
	}
	code, _, errw = runCLI(t, env, "", "notifications", "-status", "Parked", "retry")
	if code != 2 || !strings.HasPrefix(errw, "outbox notifications: flag -status before the command") {
		t.Errorf("notifications -status Parked retry: exit %d, stderr %q", code, errw)
	}

	// notify health -json: one array, each node with its address; a node
	// that hangs is reported and uses up only its own -timeout.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never answered
		}
	}()
	defer func() {
		hang.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	}()
	code, out, errw = runCLI(t, noSite, "", "notify", "health", "-json", "-timeout", "3s", "-site", hang.Addr().String()+","+info.sites)
	var nodes []map[string]any
	if err := json.Unmarshal([]byte(out), &nodes); err != nil || code != 1 || len(nodes) != 3 {
		t.Fatalf("notify health -json with a hung node first: exit %d, %v\n%s%s", code, err, out, errw)
	}
	for i, n := range nodes {
		if addr := strings.Split(info.sites, ",")[i]; n["addr"] != addr || n["site"] != "dev-site" {
			t.Errorf("node %d: addr %v site %v, want %s dev-site", i, n["addr"], n["site"], addr)
		}
	}
	if want := "outbox notify health: node " + hang.Addr().String() + ": "; !strings.HasPrefix(errw, want) || strings.Count(errw, "\n") != 1 {
		t.Errorf("stderr %q, want one line starting %q", errw, want)
	}

	// Did you mean.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"notfy"}, `outbox: unknown command "notfy" (did you mean "notify"?)`},
		{[]string{"notifications", "lst"}, `outbox notifications: unknown command "lst" (did you mean "list"?)`},
		{[]string{"notify", "status", id, "-sit", "X"}, `outbox notify status: flag provided but not defined: -sit (did you mean "-site"?)`},
		{[]string{"site-calls", "list", "-stauts", "Parked"}, `flag provided but not defined: -stauts (did you mean "-status"?)`},
	} {
		code, out, errw := runCLI(t, env, "", tt.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errw, tt.want) && !strings.Contains(strings.SplitN(errw, "\n", 2)[0], tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, out, errw, tt.want)
		}
	}

	// One sentence, no stutter: central's API and a site node's.
	unknown := "01950000-0000-7000-8000-000000000009"
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"notifications", "show", "1234"}, 1, `outbox notifications show: id "1234" is not a UUID` + "\n"},
		{[]string{"notifications", "show", unknown}, 1, "outbox notifications show: notification " + unknown + " not found\n"},
		{[]string{"lists", "show", "nope"}, 1, `outbox lists show: list "nope" not found` + "\n"},
		{[]string{"notify", "status", "1234"}, 2, `outbox notify status: id "1234" is not a UUID` + "\n"},
		{[]string{"tracking", "retry", unknown}, 1, "outbox tracking retry: operation " + unknown + " not found\n"},
	} {
		code, out, errw := runCLI(t, env, "", tt.args...)
		if code != tt.code || out != "" || errw != tt.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", tt.args, code, out, errw, tt.code, tt.want)
		}
	}

	// The bulk preview: its own exit code, then the flags it prints act.
	code, out, errw = runCLI(t, env, "", "notifications", "retry", "-status", "Parked")
	m := regexp.MustCompile(`^1 parked notification matches; repeat with -yes -updated-to (\S+) to retry it\n$`).FindStringSubmatch(errw)
	if code != 3 || out != "" || m == nil {
		t.Fatalf("preview: exit %d, stdout %q, stderr %q", code, out, errw)
	}
	code, out, errw = runCLI(t, env, "", "notifications", "retry", "-status", "Parked", "-yes", "-updated-to", m[1])
	if code != 0 || !strings.Contains(out, "1") {
		t.Errorf("retry as printed: exit %d\n%s%s", code, out, errw)
	}
}

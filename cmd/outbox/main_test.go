package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

func runOutbox(args ...string) (code int, stdout, stderr string) {
	var out, errw bytes.Buffer
	code = run(context.Background(), args, nil, &out, &errw)
	return code, out.String(), errw.String()
}

func TestDispatcher(t *testing.T) {
	tests := []struct {
		args       []string
		code       int
		stdout     string // expected substring ("" = must be empty)
		stderr     string
		stdoutNone bool
	}{
		{args: nil, code: exitUsage, stderr: "Usage: outbox <command>"},
		{args: []string{"frobnicate"}, code: exitUsage, stderr: `outbox: unknown command "frobnicate"`},
		{args: []string{"version"}, code: exitOK, stdout: "outbox "},
		{args: []string{"--version"}, code: exitOK, stdout: "outbox "},
		{args: []string{"help"}, code: exitOK, stdout: "Usage: outbox <command>"},
		{args: []string{"-h"}, code: exitOK, stdout: "central"},
		{args: []string{"help", "central"}, code: exitOK, stdout: "Usage: outbox central [-config FILE]"},
		{args: []string{"help", "migrate"}, code: exitOK, stdout: "Usage: outbox migrate [up|down|status] [-config FILE]"},
		{args: []string{"migrate", "-h"}, code: exitOK, stderr: "with down: roll back"},
		{args: []string{"help", "nope"}, code: exitUsage, stderr: `outbox help: unknown command "nope"`},
		{args: []string{"central", "-h"}, code: exitOK, stderr: "-store-dsn"},
		{args: []string{"central", "-no-such-flag"}, code: exitUsage, stderr: "flag provided but not defined: -no-such-flag"},
		{args: []string{"central", "extra"}, code: exitUsage, stderr: `outbox central: unexpected argument "extra"`},
		{args: []string{"migrate", "sideways"}, code: exitUsage, stderr: `outbox migrate: unknown action "sideways" (up, down or status)`},
		{args: []string{"migrate", "status", "-yes"}, code: exitUsage, stderr: "outbox migrate: -yes goes with down only, not with status"},
		{args: []string{"migrate", "-log-level", "loud"}, code: exitUsage, stderr: `log.level: unknown level "loud" (want debug, info, warn or error) [flag -log-level]`},
		{args: []string{"central", "-store-driver", "orcale"}, code: exitUsage, stderr: `store.driver: unknown driver "orcale" (want sqlite, postgres or mssql) [flag -store-driver]`},
		{args: []string{"plugin", "deliver", "-subject", "", "-body", " \n", "-target", "http://127.0.0.1:1/x", "webhook"}, code: exitUsage,
			stderr: "outbox plugin deliver: give -subject, -body or both: a notification with neither is refused"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runOutbox(tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) || (tt.stdout == "" && stdout != "") {
				t.Errorf("stdout %q, want it to hold %q", stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderr) || (tt.stderr == "" && stderr != "") {
				t.Errorf("stderr %q, want it to hold %q", stderr, tt.stderr)
			}
		})
	}
}

func TestConfigErrorListsEveryProblem(t *testing.T) {
	code, _, stderr := runOutbox("central", "-store-driver", "orcale", "-log-format", "xml", "-dispatch-interval", "-1s")
	want := `outbox central: invalid configuration, 3 problems:
  store.driver: unknown driver "orcale" (want sqlite, postgres or mssql) [flag -store-driver]
  outbox.dispatch_interval: must be positive, got -1s (leave it out for the default) [flag -dispatch-interval]
  log.format: unknown format "xml" (want auto, text or json) [flag -log-format]
`
	if code != exitUsage || stderr != want {
		t.Fatalf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
}

// TestEveryCommandHasHelpAndADoc: each command of the table is in the
// usage, answers "outbox help NAME" on stdout with exit 0, and is in the
// package doc.
func TestEveryCommandHasHelpAndADoc(t *testing.T) {
	_, usageText, _ := runOutbox("help")
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "\npackage main")
	for _, c := range commands {
		if c.hidden {
			continue
		}
		if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(usageText) {
			t.Errorf("the usage does not list %s:\n%s", c.name, usageText)
		}
		if !regexp.MustCompile(`outbox (\S+\|)?` + c.name + `\b`).MatchString(doc) {
			t.Errorf("the package doc does not name outbox %s", c.name)
		}
		if c.name == "help" {
			continue
		}
		code, stdout, stderr := runOutbox("help", c.name)
		if code != exitOK || stdout == "" || stderr != "" {
			t.Errorf("outbox help %s: exit %d, stdout %q, stderr %q", c.name, code, stdout, stderr)
		}
	}
}

// TestUnknownCommandSuggests: a mistyped command names the closest one.
func TestUnknownCommandSuggests(t *testing.T) {
	for typed, want := range map[string]string{
		"centrl":       `outbox: unknown command "centrl" (did you mean "central"?)`,
		"notifcations": `outbox: unknown command "notifcations" (did you mean "notifications"?)`,
		"token":        `outbox: unknown command "token" (did you mean "tokens"?)`,
		"migr":         `outbox: unknown command "migr" (did you mean "migrate"?)`,
		"zzz":          `outbox: unknown command "zzz"` + "\n",
	} {
		code, stdout, stderr := runOutbox(typed)
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("outbox %s: exit %d, stderr %q; want it to start with %q", typed, code, stderr, want)
		}
	}
	if _, _, stderr := runOutbox("help", "lgoin"); !strings.Contains(stderr, `did you mean "login"?`) {
		t.Errorf("outbox help lgoin: %q", stderr)
	}
}

// TestMistypedCommandIsShort: the built binary answers a mistyped command,
// subcommand or flag before a subcommand with the error, its nearest name
// and where the help is, exit 2, and not with the whole usage.
func TestMistypedCommandIsShort(t *testing.T) {
	env := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"notfy"}, `outbox: unknown command "notfy" (did you mean "notify"?)` + "\n" + `run "outbox help" for the commands` + "\n"},
		{[]string{"zzz"}, `outbox: unknown command "zzz"` + "\n" + `run "outbox help" for the commands` + "\n"},
		{[]string{"help", "lgoin"}, `outbox help: unknown command "lgoin" (did you mean "login"?)` + "\n" + `run "outbox help" for the commands` + "\n"},
		{[]string{"notifications", "lst"}, `outbox notifications: unknown command "lst" (did you mean "list"?)` + "\n" + `run "outbox help notifications" for its commands` + "\n"},
		{[]string{"notify", "statsu", "X"}, `outbox notify: unknown command "statsu" (did you mean "status"?)` + "\n" + `run "outbox help notify" for its commands` + "\n"},
		{[]string{"plugin", "descrbe", "email"}, `outbox plugin: unknown command "descrbe" (did you mean "describe"?)` + "\n" + `run "outbox help plugin" for its commands` + "\n"},
		{[]string{"notify", "-sit", "x", "health"}, `outbox notify: flag -sit (did you mean "-site"?) before the command: only the flags every command takes may come before it` + "\n" +
			`run "outbox help notify" for its commands and flags` + "\n"},
		{[]string{"migrate", "statsu"}, `outbox migrate: unknown action "statsu" (did you mean "status"?) (up, down or status)` + "\n"},
	} {
		code, stdout, stderr := runCLI(t, env, "", tt.args...)
		if code != exitUsage || stdout != "" || stderr != tt.want {
			t.Errorf("outbox %q: exit %d, stdout %q, stderr:\n%s\nwant 2 and:\n%s", tt.args, code, stdout, stderr, tt.want)
		}
	}
}

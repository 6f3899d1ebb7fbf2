package main

import (
	"bytes"
	"context"
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
		{args: []string{"help", "migrate"}, code: exitOK, stdout: "Usage: outbox migrate [-config FILE]"},
		{args: []string{"help", "nope"}, code: exitUsage, stderr: `outbox help: unknown command "nope"`},
		{args: []string{"central", "-h"}, code: exitOK, stderr: "-store-dsn"},
		{args: []string{"central", "-no-such-flag"}, code: exitUsage, stderr: "flag provided but not defined: -no-such-flag"},
		{args: []string{"central", "extra"}, code: exitUsage, stderr: `outbox central: unexpected argument "extra"`},
		{args: []string{"migrate", "-log-level", "loud"}, code: exitUsage, stderr: `log.level: unknown level "loud" (want debug, info, warn or error) [flag -log-level]`},
		{args: []string{"central", "-store-driver", "orcale"}, code: exitUsage, stderr: `store.driver: unknown driver "orcale" (want sqlite, postgres or mssql) [flag -store-driver]`},
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

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/siteline/outbox/cmd/outbox/internal/cli"
)

const completionUsage = `Usage: outbox completion bash|zsh|fish

Prints a shell completion script for outbox's commands, subcommands and
flags. The script asks the binary itself (outbox __complete), which answers
from the command table and the flags it parses with, so it never goes
stale. Install it with, for example:

  bash:  source <(outbox completion bash)           (in ~/.bashrc)
  zsh:   source <(outbox completion zsh)            (in ~/.zshrc, after compinit)
  fish:  outbox completion fish > ~/.config/fish/completions/outbox.fish
`

// runCompletion is `outbox completion SHELL`.
func runCompletion(_ context.Context, args []string, p stdio) int {
	fs := flag.NewFlagSet("outbox completion", flag.ContinueOnError)
	fs.SetOutput(p.stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), completionUsage) }
	if cli.Subcommands(p.stdout, args, "bash", "zsh", "fish") {
		return exitOK
	}
	if code, ok := cli.ParseArgs(fs, args, 1); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	script, err := cli.Script(fs.Arg(0), "outbox")
	if err != nil {
		fmt.Fprintf(p.stderr, "outbox completion: %v\n", err)
		return exitUsage
	}
	fmt.Fprint(p.stdout, script)
	return exitOK
}

// runComplete is `outbox __complete WORDS...`, what the completion
// scripts call: it prints the completions of the last word, one a line.
func runComplete(ctx context.Context, args []string, p stdio) int {
	for _, c := range cli.Complete(args, func(path []string) cli.Level {
		return probeCommand(ctx, path, p.environ)
	}) {
		fmt.Fprintln(p.stdout, c)
	}
	return exitOK
}

// probeCommand asks the command at path what it takes: the table's
// commands for the empty path, else the command's own answer to a
// completion probe (its subcommands, its FlagSet's flags).
func probeCommand(ctx context.Context, path, environ []string) cli.Level {
	if len(path) == 0 {
		return cli.Level{Subs: commandNames(), Flags: map[string]bool{}}
	}
	c, ok := lookup(path[0])
	if !ok || c.hidden {
		return cli.Level{}
	}
	var out bytes.Buffer
	args := append(append([]string{}, path[1:]...), cli.Probe)
	c.run(ctx, args, stdio{environ: environ, stdin: strings.NewReader(""), stdout: &out, stderr: &out})
	return cli.ReadLevel(out.String())
}

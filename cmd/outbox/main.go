// Command outbox is the notification outbox: one binary for central, the
// site nodes, the operator's and the scripts' clients, and a one-process
// trial of the whole. This package only parses, wires and runs: the
// settings are loaded and checked, the logger built (logging.go, over
// internal/logmask), the adapters and the core put together (central.go,
// site.go, dev.go); the client commands live in internal/opscli.
//
// Usage (commands, below, is the one table of subcommands; "outbox help"
// prints it):
//
//	outbox dev [flags]                      central, a three-node site and a mail and webhook capture in one process, to try outbox
//	outbox central [-config FILE] [flags]   run central until SIGINT or SIGTERM
//	outbox migrate [up|down|status] ...     apply, roll back or list the database migrations
//	outbox site [-config FILE] [flags]      run one node of a site's Raft group
//	outbox site recover -config FILE -yes   make a stopped node its group's only member
//	outbox notify send|status|health ...    talk to a site as a script does
//	outbox call [flags] SYSTEM METHOD       a cached call to an external system, through a site
//	outbox write [flags] CONNECTION SQL     a cached database write, through a site
//	outbox tracking status|list|retry|discard ...
//	                                        a site's cached calls and writes
//	outbox plugin serve|list|describe|deliver ...
//	                                        serve, list, describe or try a channel plugin
//	outbox version [-json]                  print the version, source revision and Go version
//	outbox completion bash|zsh|fish         print a shell completion script
//	outbox help [command]                   show help
//
// The operator commands, against central's API (OUTBOX_SERVER, OUTBOX_TOKEN):
//
//	outbox login|logout                     keep (or drop) a token of one's own for these
//	outbox notifications list|show|count|retry|discard ...
//	outbox kpi                              the delivery KPIs, global and per site
//	outbox site-calls list|show|count|retry|discard ...
//	                                        the sites' cached calls and writes, as central mirrors them
//	outbox sites [SITE]                     every site's health, or one's
//	outbox lists list|show|put|delete ...
//	outbox channels list|show|put|delete ...
//	outbox users list|put|delete ...        operator accounts (admin)
//	outbox tokens list|create|delete ...    API tokens (admin)
//	outbox audit                            the admin audit log (admin)
//
// Flags are the flag package's (-name value, also written --name) and may
// come before or after the arguments; "--" ends them (internal/cli). Before
// a subcommand, only the flags all of the command's subcommands take.
//
// Exit codes: 0 success, 1 failure at run time, 2 bad usage or an invalid
// configuration, 3 a bulk retry or discard without -yes that only showed
// what it would do (0 when nothing matches: nothing to act on).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/siteline/outbox/adapters/harden"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/cmd/outbox/internal/opscli"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// stdio is what a command takes from its process: the environment and the
// standard streams.
type stdio struct {
	environ []string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// command is one subcommand of the binary.
type command struct {
	name string
	// aliases are other spellings of the name ("--version").
	aliases []string
	// summary is the usage's line, wrapped at 64 columns.
	summary string
	// operator marks the commands that operate central through its API:
	// the usage lists them apart.
	operator bool
	// hardened commands hold secrets (the database DSN, tokens,
	// passwords) in their environment and memory: the process makes
	// itself unreadable to other processes of the same user at once
	// (harden.Undumpable). `outbox plugin serve` does the same through
	// channel.Serve, as every plugin built with the SDK does.
	hardened bool
	// hidden commands are left out of the usage, suggestions and
	// completion (__complete, which the completion scripts call).
	hidden bool
	// helpArgs make run print the command's help on its stdout or stderr;
	// "outbox help NAME" sends both to stdout.
	helpArgs []string
	run      func(ctx context.Context, args []string, p stdio) int
}

// commands is the binary's one table of subcommands, in the order the
// usage lists them. It is filled in init, since help and version read it.
var commands []command

func init() {
	commands = []command{
		{name: "dev", hardened: true, helpArgs: []string{"-h"}, run: wired(runDev),
			summary: "central, a three-node site and a capture of mail and webhook\nposts in one process on loopback, to try outbox (\"outbox help dev\")"},
		{name: "central", hardened: true, helpArgs: []string{"-h"}, run: wired(runCentral),
			summary: "run central (ingest, store, dispatcher) until SIGINT or SIGTERM"},
		{name: "migrate", hardened: true, helpArgs: []string{"-h"}, run: wired(runMigrate),
			summary: "apply (up), roll back (down) or list (status) the database migrations"},
		{name: "site", hardened: true, helpArgs: []string{"-h"}, run: wired(runSite),
			summary: "run one node of a site's Raft group (\"outbox help site\")"},
		{name: "notify", helpArgs: []string{"help"}, run: clientCmd(opscli.Notify),
			summary: "send a notification through a site, ask a status or a node's health"},
		{name: "call", helpArgs: []string{"-h"}, run: clientCmd(opscli.Call),
			summary: "make a cached call to an external system through a site"},
		{name: "write", helpArgs: []string{"-h"}, run: clientCmd(opscli.Write),
			summary: "make a cached database write through a site"},
		{name: "tracking", helpArgs: []string{"help"}, run: clientCmd(opscli.Tracking),
			summary: "a site's cached calls and writes: status, list, retry, discard"},
		{name: "plugin", helpArgs: []string{"help"}, run: func(ctx context.Context, args []string, p stdio) int {
			return runPlugin(ctx, args, p.environ, p.stdout, p.stderr)
		}, summary: "serve, list, describe or try a channel plugin (\"outbox help plugin\")"},
		{name: "version", aliases: []string{"-version", "--version"}, helpArgs: []string{"-h"}, run: runVersion,
			summary: "print the version, the source revision it was built from and the Go version"},
		{name: "completion", helpArgs: []string{"-h"}, run: runCompletion,
			summary: "print a shell completion script: bash, zsh or fish"},
		{name: "__complete", hidden: true, run: runComplete},
		{name: "help", aliases: []string{"-h", "-help", "--help"}, run: runHelp,
			summary: "show this help, or \"outbox help <command>\" for a command's flags"},

		{name: "login", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Login),
			summary: "log in with a name and password and keep a token for these"},
		{name: "logout", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Logout),
			summary: "revoke that token and forget it"},
		{name: "notifications", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Notifications),
			summary: "list, show, count, retry or discard notifications"},
		{name: "kpi", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.KPI),
			summary: "show the delivery KPIs, global and per site"},
		{name: "site-calls", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.SiteCalls),
			summary: "list, show, count, retry or discard the sites' cached calls\nand writes"},
		{name: "sites", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Sites),
			summary: "every site's health: state, last contact, leader, nodes,\nbacklogs"},
		{name: "lists", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Lists),
			summary: "list, show, put or delete notification lists"},
		{name: "channels", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Channels),
			summary: "list, show, put or delete channel settings"},
		{name: "users", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Users),
			summary: "list, put or delete operator accounts (admin)"},
		{name: "tokens", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Tokens),
			summary: "list, create or revoke API tokens (admin)"},
		{name: "audit", operator: true, helpArgs: []string{"help"}, run: clientCmd(opscli.Audit),
			summary: "the admin audit log: who changed which list, channel, user\nor token (admin)"},
	}
}

// wired adapts a command of this package (central, site, dev) to the table.
func wired(run func(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int) func(context.Context, []string, stdio) int {
	return func(ctx context.Context, args []string, p stdio) int {
		return run(ctx, args, p.environ, p.stdout, p.stderr)
	}
}

// clientCmd adapts a client command of internal/opscli to the table.
func clientCmd(run func(ctx context.Context, env opscli.Env, args []string) int) func(context.Context, []string, stdio) int {
	return func(ctx context.Context, args []string, p stdio) int {
		return run(ctx, opscli.Env{Environ: p.environ, Stdin: p.stdin, Stdout: p.stdout, Stderr: p.stderr,
			Version: versionString(), TLS: clientTLS, SiteAddrs: devSiteAddrs()}, args)
	}
}

// clientTLS is a client's TLS configuration from PEM files: ca verifies the
// server, cert and key are the client's certificate.
func clientTLS(ca, cert, key string) (*tls.Config, error) {
	t, err := TLSFiles{CA: ca, Cert: cert, Key: key}.load()
	if err != nil {
		return nil, err
	}
	t.ClientCAs, t.ClientAuth = nil, tls.NoClientCert
	return t, nil
}

// lookup finds a command by name or alias.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
		for _, a := range c.aliases {
			if a == name {
				return c, true
			}
		}
	}
	return command{}, false
}

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is used.
var version string

func main() {
	// The first SIGINT or SIGTERM cancels ctx and central stops gracefully;
	// once ctx is done the signals get their default behaviour again, so a
	// second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	if len(os.Args) > 1 {
		if c, ok := lookup(os.Args[1]); ok && c.hardened {
			if err := harden.Undumpable(); err != nil {
				fmt.Fprintf(os.Stderr, "warning: cannot make the process unreadable to other processes of its user: %v\n", err)
			}
		}
	}
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand, reading standard input from os.Stdin, and
// returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdio{environ: environ, stdin: os.Stdin, stdout: stdout, stderr: stderr})
}

// runWith dispatches to a subcommand and returns the exit code.
func runWith(ctx context.Context, args []string, p stdio) int {
	if len(args) == 0 {
		usage(p.stderr)
		return exitUsage
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(p.stderr, "outbox: unknown command %q%s\n%s\n", human.Cell(args[0], 40), didYouMean(args[0]), helpHint)
		return exitUsage
	}
	return c.run(ctx, args[1:], p)
}

// runVersion is `outbox version`.
func runVersion(_ context.Context, args []string, p stdio) int {
	return writeVersion(args, p.stdout, p.stderr)
}

// runHelp is `outbox help [command]`.
func runHelp(ctx context.Context, args []string, p stdio) int {
	if len(args) == 0 {
		usage(p.stdout)
		return exitOK
	}
	if cli.Subcommands(p.stdout, args, commandNames()...) || cli.Probing(args) {
		return exitOK // a completion probe: the commands, or nothing below them
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(p.stderr, "outbox help: unknown command %q%s\n%s\n", human.Cell(args[0], 40), didYouMean(args[0]), helpHint)
		return exitUsage
	}
	if c.helpArgs == nil {
		usage(p.stdout)
		return exitOK
	}
	// A command's help goes to stdout whichever stream it writes it to.
	p.stderr = p.stdout
	return c.run(ctx, c.helpArgs, p)
}

// helpHint follows the error of a mistyped command, in place of the whole
// usage.
const helpHint = `run "outbox help" for the commands`

// didYouMean names the command closest to a mistyped one, "" when none is
// close (cli.Suggest).
func didYouMean(name string) string {
	return cli.SuggestionText("", name, commandNames())
}

// commandNames are the names of the table's commands, hidden ones aside.
func commandNames() []string {
	var names []string
	for _, c := range commands {
		if !c.hidden {
			names = append(names, c.name)
		}
	}
	return names
}

// usage writes the binary's help: the commands of the table.
func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: outbox <command> [flags]\n\nCommands:\n")
	listCommands(w, false, 12)
	fmt.Fprint(w, "\nOperator commands (against central's API; OUTBOX_SERVER, OUTBOX_TOKEN):\n")
	listCommands(w, true, 15)
	fmt.Fprint(w, `
Settings come from the defaults, a YAML file (-config FILE or OUTBOX_CONFIG),
the environment (OUTBOX_*) and flags, each overriding the one before.
configs/README.md describes every setting. Flags may follow the arguments;
-- ends them (an argument starting with "-" goes after --). Before a
subcommand come only the flags all its subcommands take. NO_COLOR=1 turns
colour off.

Exit codes: 0 success, 1 failure, 2 bad usage or an invalid configuration,
3 a bulk retry or discard without -yes (it showed the count, did nothing;
0 when nothing matches).
Shell completion: "outbox help completion".
`)
}

// listCommands writes the operator commands, or the others, one a line
// with its summary at column 2+width.
func listCommands(w io.Writer, operator bool, width int) {
	for _, c := range commands {
		if c.operator != operator || c.hidden {
			continue
		}
		lines := strings.Split(c.summary, "\n")
		fmt.Fprintf(w, "  %-*s %s\n", width-1, c.name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "  %*s%s\n", width, "", l)
		}
	}
}

// versionString returns the build's version.
func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return "dev"
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printConfigError writes an invalid configuration's errors, one a line.
func printConfigError(w io.Writer, cmd string, err error) {
	errs := unjoin(err)
	var se *SettingError
	if len(errs) == 1 && !errors.As(errs[0], &se) {
		fmt.Fprintf(w, "%s: %v\n", cmd, err)
		return
	}
	problems := "problem"
	if len(errs) > 1 {
		problems += "s"
	}
	fmt.Fprintf(w, "%s: invalid configuration, %d %s:\n", cmd, len(errs), problems)
	for _, e := range errs {
		fmt.Fprintf(w, "  %v\n", e)
	}
}

// envValue returns the value of name in environ, "" when unset.
func envValue(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

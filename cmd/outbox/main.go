// Command outbox is the notification outbox: one binary whose subcommands run
// central, apply database migrations and print the version. All wiring lives
// in this package as plain constructor calls: the settings are loaded and
// checked here (config.go, load.go), the logger built (logging.go), and the
// adapters and the core put together (central.go).
//
// Usage:
//
//	outbox dev [flags]                      everything in one process on loopback, to try outbox
//	outbox central [-config FILE] [flags]   run central until SIGINT or SIGTERM
//	outbox migrate [-config FILE] [flags]   apply database migrations and exit
//	outbox site [-config FILE] [flags]      run one node of a site's Raft group
//	outbox site recover -config FILE -yes   make a stopped node its group's only member
//	outbox notify send|status|health ...    talk to a site as a script does
//	outbox login|logout                     keep (or drop) a token of one's own for the CLI
//	outbox notifications|kpi|lists|channels|users|tokens|audit ...
//	                                        operate central through its API
//	outbox version                          print the version
//	outbox help [command]                   show help
//
// Exit codes: 0 success, 1 failure at run time, 2 bad usage or an invalid
// configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"golang.org/x/term"

	"github.com/siteline/outbox/adapters/harden"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// hardened are the subcommands whose process holds secrets (the database
// DSN, tokens, passwords) in its environment and memory: they make it
// unreadable to other processes of the same user at once
// (harden.Undumpable). `outbox plugin serve` does the same through
// channel.Serve, as every plugin built with the SDK does.
var hardened = map[string]bool{"central": true, "site": true, "dev": true, "migrate": true}

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is used.
var version string

func main() {
	// The first SIGINT or SIGTERM cancels ctx and central stops gracefully;
	// once ctx is done the signals get their default behaviour again, so a
	// second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	if len(os.Args) > 1 && hardened[os.Args[1]] {
		if err := harden.Undumpable(); err != nil {
			fmt.Fprintf(os.Stderr, "warning: cannot make the process unreadable to other processes of its user: %v\n", err)
		}
	}
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "dev":
		return runDev(ctx, rest, environ, stdout, stderr)
	case "central":
		return runCentral(ctx, rest, environ, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, environ, stdout, stderr)
	case "plugin":
		return runPlugin(ctx, rest, stdout, stderr)
	case "site":
		return runSite(ctx, rest, environ, stdout, stderr)
	case "notify":
		return runNotify(ctx, rest, environ, stdout, stderr)
	case "notifications":
		return runNotifications(ctx, rest, environ, stdout, stderr)
	case "kpi":
		return runKPI(ctx, rest, environ, stdout, stderr)
	case "lists":
		return runLists(ctx, rest, environ, stdout, stderr)
	case "channels":
		return runChannels(ctx, rest, environ, stdout, stderr)
	case "users":
		return runUsers(ctx, rest, environ, stdout, stderr)
	case "tokens":
		return runTokens(ctx, rest, environ, stdout, stderr)
	case "audit":
		return runAudit(ctx, rest, environ, stdout, stderr)
	case "login":
		return runLogin(ctx, rest, environ, stdout, stderr)
	case "logout":
		return runLogout(ctx, rest, environ, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "outbox %s (%s %s/%s)\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return exitOK
		}
		switch rest[0] {
		case "dev":
			return runDev(ctx, []string{"-h"}, environ, stdout, stdout)
		case "central":
			return runCentral(ctx, []string{"-h"}, environ, stdout, stdout)
		case "migrate":
			return runMigrate(ctx, []string{"-h"}, environ, stdout, stdout)
		case "plugin":
			return runPlugin(ctx, []string{"help"}, stdout, stdout)
		case "site":
			return runSite(ctx, []string{"-h"}, environ, stdout, stdout)
		case "notify":
			return runNotify(ctx, []string{"help"}, environ, stdout, stdout)
		case "notifications":
			return runNotifications(ctx, []string{"help"}, environ, stdout, stdout)
		case "kpi":
			return runKPI(ctx, []string{"help"}, environ, stdout, stdout)
		case "lists":
			return runLists(ctx, []string{"help"}, environ, stdout, stdout)
		case "channels":
			return runChannels(ctx, []string{"help"}, environ, stdout, stdout)
		case "users":
			return runUsers(ctx, []string{"help"}, environ, stdout, stdout)
		case "tokens":
			return runTokens(ctx, []string{"help"}, environ, stdout, stdout)
		case "audit":
			return runAudit(ctx, []string{"help"}, environ, stdout, stdout)
		case "login":
			return runLogin(ctx, []string{"help"}, environ, stdout, stdout)
		case "logout":
			return runLogout(ctx, []string{"help"}, environ, stdout, stdout)
		case "version", "help":
			usage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "outbox help: unknown command %q\n\n", rest[0])
		usage(stderr)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "outbox: unknown command %q\n\n", cmd)
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: outbox <command> [flags]

Commands:
  dev       central, a three-node site and a mail capture in one process on
            loopback, to try outbox ("outbox help dev")
  central   run central (ingest, store, dispatcher) until SIGINT or SIGTERM
  migrate   apply the database migrations and exit
  site      run one node of a site's Raft group ("outbox help site")
  notify    send a notification through a site, ask a status or a node's health
  plugin    serve, list, describe or try a channel plugin ("outbox help plugin")
  version   print the version
  help      show this help, or "outbox help <command>" for a command's flags

Operator commands (against central's API; OUTBOX_SERVER, OUTBOX_TOKEN):
  login          log in with a name and password and keep a token for these
  logout         revoke that token and forget it
  notifications  list, show, count, retry or discard notifications
  kpi            show the delivery KPIs, global and per site
  lists          list, show, put or delete notification lists
  channels       list, show, put or delete channel settings
  users          list, put or delete operator accounts (admin)
  tokens         list, create or revoke API tokens (admin)
  audit          the admin audit log: who changed which list, channel, user
                 or token (admin)

Settings come from the defaults, a YAML file (-config FILE or OUTBOX_CONFIG),
the environment (OUTBOX_*) and flags, each overriding the one before.
configs/README.md describes every setting.
`)
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

package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/plugins/builtin"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
)

const pluginUsage = `Usage: outbox plugin <command> [arguments]

Commands:
  serve TYPE               serve a built-in channel as a plugin process (central runs this)
  list                     list the built-in channels
  describe PLUGIN          start a plugin and print its name, version and settings
  deliver [flags] PLUGIN   start a plugin and make one delivery through it

PLUGIN is a built-in channel type (email, webhook, ...) or the path of a
plugin binary (any argument holding a slash: ./jsonpost). describe and
deliver start it exactly as central does: a separate process, gRPC with
mutual TLS.
`

// runPlugin is `outbox plugin`.
func runPlugin(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pluginUsage)
		return exitUsage
	}
	if cli.Subcommands(stdout, args, "serve", "list", "describe", "deliver") {
		return exitOK
	}
	if cmd := args[0]; cli.Probing(args[1:]) && cmd != "deliver" {
		return exitOK // no flags: serve, list and describe take a plugin's name only
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		if len(rest) != 1 {
			fmt.Fprintf(stderr, "Usage: outbox plugin serve TYPE (one of %s)\n", orList(builtin.Types()))
			return exitUsage
		}
		newChannel, ok := builtin.Channels[rest[0]]
		if !ok {
			fmt.Fprintf(stderr, "outbox plugin serve: %q is not a built-in channel (want %s)\n", rest[0], orList(builtin.Types()))
			return exitUsage
		}
		// Serve does not use ctx (main's, cancelled by the first SIGINT or
		// SIGTERM): it handles SIGTERM itself, finishing the deliveries in
		// flight, ignores SIGINT (central stops its plugins), and exits when
		// central is gone.
		channel.Serve(newChannel(channel.Logger()))
		return exitOK
	case "list":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "outbox plugin list: unexpected argument %q\nUsage: outbox plugin list\n", human.Cell(rest[0], 40))
			return exitUsage
		}
		for _, t := range builtin.Types() {
			fmt.Fprintln(stdout, t)
		}
		return exitOK
	case "describe":
		if len(rest) != 1 {
			fmt.Fprint(stderr, "Usage: outbox plugin describe PLUGIN\n")
			return exitUsage
		}
		return describePlugin(ctx, rest[0], environ, stdout, stderr)
	case "deliver":
		return deliverPlugin(ctx, rest, environ, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, pluginUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "outbox plugin: unknown command %q%s\nrun \"outbox help plugin\" for its commands\n", human.Cell(cmd, 40),
			cli.SuggestionText("", cmd, []string{"serve", "list", "describe", "deliver"}))
		return exitUsage
	}
}

// startOne starts a host running the one plugin named by arg, under the
// delivery network policy policy (nil: the default one).
func startOne(ctx context.Context, arg string, policy *channel.NetworkPolicy, environ []string, stderr io.Writer) (*pluginhost.Host, string, error) {
	var p pluginhost.Plugin
	if strings.Contains(arg, "/") {
		abs, err := filepath.Abs(arg)
		if err != nil {
			return nil, "", err
		}
		p = pluginhost.Plugin{Type: filepath.Base(abs), Command: abs}
	} else {
		if _, ok := builtin.Channels[arg]; !ok {
			return nil, "", fmt.Errorf("%q is not a built-in channel (want %s) nor a path (give ./%s for a file here)", arg, orList(builtin.Types()), arg)
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, "", fmt.Errorf("find the outbox binary: %w", err)
		}
		p = pluginhost.Plugin{Type: arg, Command: exe, Args: []string{"plugin", "serve", arg}}
	}
	logger := loggerFor(LogConfig{Level: "warn", Format: "auto"}, stderr, environ)
	// The references on this command line are the operator's own, as in
	// the configuration file: relative to the working directory, unlimited.
	h, err := pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{p}, Logger: logger, StartTimeout: 10 * time.Second,
		NetworkPolicy: policy, Secrets: secretref.Own("")})
	if err != nil {
		return nil, "", err
	}
	if err := h.Start(ctx); err != nil {
		return nil, "", err
	}
	return h, p.Type, nil
}

func describePlugin(ctx context.Context, arg string, environ []string, stdout, stderr io.Writer) int {
	h, typ, err := startOne(ctx, arg, nil, environ, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "outbox plugin describe: %v\n", err)
		return exitFailure
	}
	defer h.Close()
	d, _ := h.Describe(typ)
	fmt.Fprintf(stdout, "name:    %s\nversion: %s\n", d.Name, cmp.Or(d.Version, "(not given)"))
	if len(d.Settings) == 0 {
		fmt.Fprintln(stdout, "settings: (no schema: any settings are passed through)")
		return exitOK
	}
	fmt.Fprintln(stdout, "settings:")
	width := outputWidth(stdout)
	for _, s := range d.Settings {
		var flags []string
		if s.Required {
			flags = append(flags, "required")
		}
		if s.Secret {
			flags = append(flags, "secret: give env:NAME or file:/path")
		}
		if s.Default != "" {
			flags = append(flags, "default "+s.Default)
		}
		if len(s.Allowed) > 0 {
			flags = append(flags, "one of "+strings.Join(s.Allowed, ", "))
		}
		if s.Kind != channel.KindText {
			flags = append(flags, "a "+string(s.Kind))
		}
		// A setting a block: its name and what it takes, then its
		// description below, both wrapped to the width.
		fmt.Fprint(stdout, wrapText("  "+s.Name+"  ", strings.Join(flags, "; "), width, "      "))
		if s.Description != "" {
			fmt.Fprint(stdout, wrapText("      ", s.Description, width, "      "))
		}
	}
	return exitOK
}

// outputWidth is the width to wrap text written to w at: a terminal's,
// else 80 columns.
func outputWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols >= 40 {
			return cols
		}
	}
	return 80
}

// wrapText is prefix then text, broken into lines of at most width
// columns at spaces, each line after the first starting with indent; a
// word longer than a line stays whole. Every line ends with a newline.
func wrapText(prefix, text string, width int, indent string) string {
	var b strings.Builder
	line, fresh := prefix, true
	for _, word := range strings.Fields(text) {
		switch {
		case fresh:
			line += word
		case len(line)+1+len(word) > width:
			b.WriteString(line + "\n")
			line = indent + word
		default:
			line += " " + word
		}
		fresh = false
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
	return b.String()
}

func deliverPlugin(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox plugin deliver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var targets, settings, allow, deny []string
	// each appends every value of a flag that may be given several times.
	each := func(values *[]string) func(string) error {
		return func(v string) error { *values = append(*values, v); return nil }
	}
	fs.Func("target", "a `target` of the delivery (an address, a URL); repeat for several", each(&targets))
	fs.Func("setting", "a channel setting as `name=value`; repeat for several (secrets as env:NAME or file:/path)", each(&settings))
	fs.Func("allow", "an IP address or `CIDR` prefix the plugin may connect to although the default delivery network policy denies it\n(loopback, link-local, ...), as delivery.network.allow; repeat for several", each(&allow))
	fs.Func("deny", "an IP address or `CIDR` prefix the plugin may not connect to, as delivery.network.deny; repeat for several", each(&deny))
	subject := fs.String("subject", "outbox test notification", "the `subject`")
	body := fs.String("body", "Sent by outbox plugin deliver.", "the `body`")
	timeout := fs.Duration("timeout", 30*time.Second, "bound of the delivery")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: outbox plugin deliver [flags] PLUGIN\n\nStarts the plugin as central does and makes one delivery through it. Exits 0\nwhen it answers Success. The plugin gets the default delivery network policy\nplus -allow and -deny: a target on loopback (127.0.0.1) needs -allow 127.0.0.1.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := cli.ParseArgs(fs, args, 1); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	if strings.TrimSpace(*subject) == "" && strings.TrimSpace(*body) == "" {
		// As a site's Send: central never hands a plugin such a notification.
		fmt.Fprintln(stderr, "outbox plugin deliver: give -subject, -body or both: a notification with neither is refused")
		return exitUsage
	}
	set := map[string]string{}
	for _, kv := range settings {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			fmt.Fprintf(stderr, "outbox plugin deliver: -setting wants name=value, got %q\n", k)
			return exitUsage
		}
		set[k] = v
	}
	policy, err := channel.NewNetworkPolicy(allow, deny)
	if err != nil {
		fmt.Fprintf(stderr, "outbox plugin deliver: -allow or -deny: %v\n", err)
		return exitUsage
	}
	h, typ, err := startOne(ctx, fs.Arg(0), policy, environ, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "outbox plugin deliver: %v\n", err)
		return exitFailure
	}
	defer h.Close()
	if err := h.ValidateSettings(typ, set); err != nil {
		fmt.Fprintf(stderr, "warning: %v\n", err)
	}
	ch, _ := h.Channel(typ)
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	now := time.Now().UTC()
	res := ch.Deliver(dctx, ports.Delivery{
		Notification: ports.Notification{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, List: "outbox-plugin-deliver",
			Subject: *subject, Body: *body, SourceSite: "cli", CreatedAt: now},
		Targets:  targets,
		Settings: set,
	})
	fmt.Fprintf(stdout, "outcome: %s\n", res.Outcome)
	if res.Error != "" {
		fmt.Fprintf(stdout, "error: %s\n", res.Error)
	}
	if res.RetryAfter > 0 {
		fmt.Fprintf(stdout, "retry after: %s\n", res.RetryAfter)
	}
	if len(res.Targets) == len(targets) && len(targets) > 0 {
		// The plugin answered per target: each target's own outcome.
		fmt.Fprintln(stdout, "targets:")
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for i, r := range res.Targets {
			line := "  " + targets[i] + "\t" + string(r.Outcome)
			if r.Error != "" {
				line += "\t" + r.Error
			}
			if r.RetryAfter > 0 {
				line += "\tretry after " + r.RetryAfter.String()
			}
			fmt.Fprintln(tw, line)
		}
		_ = tw.Flush()
	}
	if res.Outcome != ports.OutcomeSuccess {
		return exitFailure
	}
	return exitOK
}

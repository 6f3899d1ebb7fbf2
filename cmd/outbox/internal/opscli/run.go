package opscli

// What every operator command of central's API shares: the common flags,
// the token and the client (opsRun), tables and JSON.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/adapters/support/errtext"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/ports"
)

// opsDefaultServer is central's API when neither -server nor OUTBOX_SERVER
// says otherwise.
const opsDefaultServer = "http://127.0.0.1:8080"

const opsCommonUsage = `
Common flags:
  -server URL        central's API (env OUTBOX_SERVER; else the server of
                     outbox login; default ` + opsDefaultServer + `)
  -token-file FILE   read the API token from FILE; otherwise it comes from the
                     environment variable OUTBOX_TOKEN (the token, or a
                     reference env:NAME or file:/path), else from outbox
                     login. A token is never given in clear on the command
                     line.
  -token REF         the token as a reference env:NAME or file:/path
  -ca FILE           CA certificates that verify an https server
  -json              print JSON (the API's own shapes) instead of a table
  -timeout D         give up after D (default 30s)

Flags may come before or after the arguments; -- ends them (an argument
that starts with "-" goes after --). Before the command (outbox
notifications -server URL list) only these common flags.

Exit codes: 0 done, 1 the server refused or could not be reached, 2 bad
usage, 3 a retry or discard by filter or -all without -yes: it printed how
many rows match and did nothing (0 when none match: nothing to act on).
`

// opsSubcommand splits args into a subcommand among subs and the rest.
// The subcommand may follow the flags every command of the group takes
// (common: "outbox notify -site X health"); they stay in rest, for the
// subcommand's Parse. It prints usage for help (exit 0), no subcommand, an
// unknown one or a flag before it that only some commands take (exit 2);
// ok false says to return code. A completion probe learns subs and
// common's flags. A mistyped subcommand or flag is said in one line with
// its nearest name and where the help is, not followed by the whole usage.
func opsSubcommand(group, usage string, args []string, env Env, common *flag.FlagSet, subs ...string) (sub string, rest []string, code int, ok bool) {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return "", nil, exitUsage, false
	}
	if cli.Subcommands(env.Stdout, args, subs...) {
		common.SetOutput(env.Stdout)
		_ = cli.Parse(common, args)
		return "", nil, exitOK, false
	}
	if opsIsHelp(args[0]) {
		fmt.Fprint(env.Stdout, usage)
		return "", nil, exitOK, false
	}
	sub, rest, err := cli.SplitSubcommand(common, args)
	switch {
	case err != nil:
		fmt.Fprintf(env.Stderr, "outbox %s: %v\nrun \"outbox help %s\" for its commands and flags\n", group, err, group)
		return "", nil, exitUsage, false
	case sub == "" && slices.ContainsFunc(args, opsIsHelp):
		fmt.Fprint(env.Stdout, usage)
		return "", nil, exitOK, false
	case sub == "":
		fmt.Fprintf(env.Stderr, "outbox %s: no command\n\n%s", group, usage)
		return "", nil, exitUsage, false
	case !slices.Contains(subs, sub):
		fmt.Fprintf(env.Stderr, "outbox %s: unknown command %q%s\nrun \"outbox help %s\" for its commands\n", group, human.Cell(sub, 40),
			cli.SuggestionText("", sub, subs), group)
		return "", nil, exitUsage, false
	}
	return sub, rest, exitOK, true
}

// opsCommon are the flags every operator command takes, for opsSubcommand.
func opsCommon(group string, env Env) *flag.FlagSet {
	return newOpsRun("outbox "+group, env).fs
}

func opsIsHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}

// opsRun is one run of an operator command: its flags, the client's
// settings and where it writes.
type opsRun struct {
	name   string // "outbox lists put"
	fs     *flag.FlagSet
	env    Env
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	loc    *time.Location // where times are shown and read

	server, tokenFile, tokenRef, ca string
	timeout                         time.Duration
	asJSON                          bool

	clearToken bool            // -token was given a token, not a reference
	fromLogin  bool            // the token is outbox login's
	loginHint  string          // why outbox login's token was not used
	transport  *http.Transport // closed by close
}

// newOpsRun defines the common flags. The default server is OUTBOX_SERVER;
// times are shown in the zone TZ names, else the local one.
func newOpsRun(name string, env Env) *opsRun {
	r := &opsRun{name: name, env: env, stdin: env.Stdin, stdout: env.Stdout, stderr: env.Stderr, loc: time.Local}
	if tz := env.getenv("TZ"); tz != "" {
		if loc, err := time.LoadLocation(tz); err == nil {
			r.loc = loc
		}
	}
	// Without a flag or the variable, the server is outbox login's, else
	// the default (see dial).
	server := env.getenv("OUTBOX_SERVER")
	r.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	r.fs.SetOutput(env.Stderr)
	r.fs.StringVar(&r.server, "server", server, "central's API `URL` (env OUTBOX_SERVER)")
	r.fs.StringVar(&r.tokenFile, "token-file", "", "read the API token from `file` (default: env OUTBOX_TOKEN)")
	// A clear token is refused after parsing: the flag package's own error
	// would echo it.
	r.fs.Func("token", "a `reference` to the API token: env:NAME or file:/path (never the token itself)", func(v string) error {
		r.tokenRef, r.clearToken = v, !ports.IsSecretRef(v)
		return nil
	})
	r.fs.StringVar(&r.ca, "ca", "", "CA `file` verifying an https server's certificate")
	r.fs.BoolVar(&r.asJSON, "json", false, "print JSON instead of a table")
	r.fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "give up after this `duration`")
	r.fs.Usage = func() {
		fmt.Fprintf(r.fs.Output(), "Usage of %s (\"outbox help %s\" describes it):\n", name, strings.Fields(name)[1])
		r.fs.PrintDefaults()
	}
	return r
}

// parse parses args, flags and operands in any order ("--" ends the flags;
// cli.Parse). ok false says to return code.
func (r *opsRun) parse(args []string) (operands []string, code int, ok bool) {
	if code, ok := cli.ParseArgs(r.fs, args, cli.AnyOperands); !ok {
		return nil, code, false
	}
	operands = r.fs.Args()
	if r.clearToken {
		return nil, r.usage("-token takes a reference (env:NAME or file:/path), never the token itself: " +
			"it would show in the process list and the shell's history; or set OUTBOX_TOKEN, or give -token-file"), false
	}
	if r.timeout <= 0 {
		return nil, r.usage("-timeout must be positive"), false
	}
	return operands, exitOK, true
}

// usage reports bad usage and returns exitUsage.
func (r *opsRun) usage(format string, args ...any) int {
	fmt.Fprintf(r.stderr, "%s: %s\n", r.name, fmt.Sprintf(format, args...))
	return exitUsage
}

// failed reports a failed call, as one sentence (errtext), and returns
// exitFailure.
func (r *opsRun) failed(err error) int {
	fmt.Fprintf(r.stderr, "%s: %s\n", r.name, errtext.Sentence(err))
	if errors.Is(err, ports.ErrUnauthenticated) {
		if r.fromLogin {
			fmt.Fprintln(r.stderr, "the token of outbox login no longer works: run outbox login again")
		}
	}
	return exitFailure
}

// done reports a deletion in table mode (JSON mode prints nothing: the API
// answers no body).
func (r *opsRun) done(format string, args ...any) int {
	if !r.asJSON {
		fmt.Fprintln(r.stdout, human.Cell(fmt.Sprintf(format, args...), 300))
	}
	return exitOK
}

// dial builds the API client from the flags, the environment and the
// login outbox login keeps; ok false says to return code. Without a token
// it says why there is none (exit 1) rather than ask the server, which
// would only refuse.
func (r *opsRun) dial() (c *client.Client, code int, ok bool) {
	token, err := r.token()
	if err != nil {
		return nil, r.usage("%v", err), false
	}
	saved, loginErr := r.savedLogin()
	if r.server == "" && loginErr == nil {
		r.server = saved.Server
	}
	if r.server == "" {
		r.server = opsDefaultServer
	}
	if token == "" {
		if loginErr != nil {
			return nil, r.usage("%v", loginErr), false
		}
		token = r.loginToken(saved)
	}
	if token == "" {
		// The server would only refuse: say why, once, without asking it.
		hint := r.loginHint
		if hint == "" {
			hint = "no API token was given: run outbox login, set OUTBOX_TOKEN or give -token-file"
		}
		fmt.Fprintf(r.stderr, "%s: %s\n", r.name, hint)
		return nil, exitFailure, false
	}
	if r.transport, err = r.env.httpTransport(r.server, r.ca); err != nil {
		return nil, r.usage("%v", err), false
	}
	opsWarnClear(r.stderr, r.name, r.server, "the API token goes")
	c, err = client.New(r.server, token, client.WithHTTPClient(&http.Client{Transport: r.transport}),
		client.WithUserAgent(r.env.userAgent()))
	if err != nil {
		return nil, r.usage("-server: %v", err), false
	}
	return c, exitOK, true
}

// close releases the connections dial opened.
// connect dials central (see dial) and bounds ctx by the command's
// timeout; done releases both. When ok is false the command exits with
// code.
func (r *opsRun) connect(ctx context.Context) (c *client.Client, bounded context.Context, done func(), code int, ok bool) {
	c, code, ok = r.dial()
	if !ok {
		return nil, ctx, func() {}, code, false
	}
	bounded, cancel := context.WithTimeout(ctx, r.timeout)
	return c, bounded, func() { cancel(); r.close() }, exitOK, true
}

func (r *opsRun) close() {
	if r.transport != nil {
		r.transport.CloseIdleConnections()
	}
}

// savedLogin reads the login outbox login keeps; none (no file, no home)
// is the zero value. A file open to others is an error.
func (r *opsRun) savedLogin() (savedLogin, error) {
	path, err := loginPath(r.env)
	if err != nil {
		return savedLogin{}, nil
	}
	saved, err := readLogin(path)
	if errors.Is(err, fs.ErrNotExist) {
		return savedLogin{}, nil
	}
	return saved, err
}

// loginToken returns the token of saved when it is for the server and has
// not expired; "" otherwise, with a hint for an answer 401.
func (r *opsRun) loginToken(saved savedLogin) string {
	switch {
	case saved.Token == "":
		return ""
	case normalServer(r.server) != saved.Server:
		// A token goes only to the server that made it.
		r.loginHint = fmt.Sprintf("outbox login logged in to %s, not %s: run outbox login -server %s", saved.Server, r.server, r.server)
		return ""
	case !time.Now().Before(saved.ExpiresAt):
		r.loginHint = fmt.Sprintf("the login to %s expired at %s: run outbox login again", saved.Server,
			saved.ExpiresAt.In(r.loc).Format("2006-01-02 15:04 MST"))
		return ""
	}
	r.fromLogin = true
	return saved.Token
}

// token returns the API token: from -token-file, -token's reference, or
// OUTBOX_TOKEN (a token or a reference); "" when none is given. Errors name
// the file or variable, never a value.
func (r *opsRun) token() (string, error) {
	ref, from := r.tokenRef, "-token"
	switch {
	case r.tokenFile != "" && r.tokenRef != "":
		return "", errors.New("give -token-file or -token, not both")
	case r.tokenFile != "":
		ref, from = "file:"+r.tokenFile, "-token-file"
	case ref == "":
		ref, from = r.env.getenv("OUTBOX_TOKEN"), "OUTBOX_TOKEN"
	}
	if ref == "" {
		return "", nil
	}
	token, err := secretref.Resolve(ref)
	if err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", fmt.Errorf("%s: the token is empty", from)
	}
	return token, nil
}

// print writes v as indented JSON with -json, else the table.
func (r *opsRun) print(v any, table func(w io.Writer)) int {
	if !r.asJSON {
		table(r.stdout)
		return exitOK
	}
	enc := json.NewEncoder(r.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(r.stderr, "%s: write JSON: %v\n", r.name, err)
		return exitFailure
	}
	return exitOK
}

// opsTable is an aligned table writer.
func opsTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// opsKV writes "key value" to a table, leaving out empty values.
func opsKV(tw io.Writer, key, value string) {
	if value != "" && value != "-" {
		fmt.Fprintf(tw, "%s\t%s\n", key, value)
	}
}

// opsTime is t in loc, readable, with its zone ("2026-11-24 16:23:47
// UTC"); "-" for none.
func opsTime(t *time.Time, loc *time.Location) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

package opscli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/adapters/support/errtext"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/cmd/outbox/internal/fsperm"
	"github.com/siteline/outbox/ports"
)

const (
	// loginFileName is the file outbox login writes in
	// os.UserConfigDir()/outbox.
	loginFileName = "login.json"
	// maxLoginFile bounds what is read of the login file.
	maxLoginFile = 64 << 10
)

const loginUsage = `Usage: outbox login [-server URL] [-name NAME] [-password-stdin | -password-file FILE] [-expires D]

Log in to central with a name and password, and keep an API token for the
operator commands (outbox notifications, kpi, lists, channels, users, tokens,
audit), which use it when neither OUTBOX_TOKEN nor -token-file is given.

The token is bound to the account: it has the account's role at each request,
stops working when the account is deleted or its password changes, and
expires after -expires (default 12h; at most what central allows, 30 days by
default). It is kept with its server and expiry in
  $XDG_CONFIG_HOME/outbox/login.json (on Linux, ~/.config/outbox/login.json)
readable by you only: the directory is made 0700 (one others may write, or
another user's, is refused) and a file others can read is refused. outbox
logout revokes it and deletes the file.

The password is asked on the terminal (not echoed), or read from standard
input (-password-stdin, one line) or a file (-password-file), never from a
flag: a flag shows in the process list and the shell's history.

Flags:
  -server URL          central's API (env OUTBOX_SERVER, default ` + opsDefaultServer + `)
  -name NAME           the account (asked on the terminal when not given)
  -password-stdin      read the password from standard input
  -password-file FILE  read the password from FILE (its first line); a file
                       every user may read is refused
  -expires D           the token's lifetime: 12h, 30d (default 12h)
  -label L             names the token among the account's (default cli)
  -ca FILE             CA certificates that verify an https server
  -timeout D           give up after D (default 30s)
`

const logoutUsage = `Usage: outbox logout [-ca FILE] [-timeout D]

Revoke the token outbox login keeps, on the server it came from, and delete
the file. When the server cannot be reached the file is kept (the token
still works until it expires); run outbox logout again.
`

// loginFlags are the flags of outbox login.
type loginFlags struct {
	server, name, passwordFile, label, ca string
	passwordStdin                         bool
	expires                               string
	timeout                               time.Duration
}

// Login is `outbox login`, the operator CLI's way in: it turns a name and
// password into an API token bound to the account (its role is the
// account's at each request, it expires, and it dies with the account),
// kept in the user's configuration directory; every operator command uses
// it when no token is given otherwise.
func Login(ctx context.Context, env Env, args []string) int {
	const name = "outbox login"
	stdin, stdout, stderr := env.Stdin, env.Stdout, env.Stderr
	if len(args) > 0 && opsIsHelp(args[0]) {
		fmt.Fprint(stdout, loginUsage)
		return exitOK
	}
	var f loginFlags
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&f.server, "server", env.getenv("OUTBOX_SERVER"), "central's API `URL` (env OUTBOX_SERVER)")
	fset.StringVar(&f.name, "name", "", "the account's `name`")
	fset.BoolVar(&f.passwordStdin, "password-stdin", false, "read the password from standard input (one line)")
	fset.StringVar(&f.passwordFile, "password-file", "", "read the password from `file` (its first line)")
	// A password given as a flag is refused after parsing, without echoing it.
	// Completion and "did you mean" never offer it (cli.Refused).
	passwordFlag := cli.Refused(fset, "password", "never: the password is asked, or read with -password-stdin or -password-file")
	fset.StringVar(&f.expires, "expires", "12h", "the token's lifetime `D` (12h, 30d): how long the login lasts")
	fset.StringVar(&f.label, "label", "", "names the token among the account's (default cli)")
	fset.StringVar(&f.ca, "ca", "", "CA `file` verifying an https server's certificate")
	fset.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this `duration`")
	fset.Usage = func() { fmt.Fprint(fset.Output(), loginUsage) }
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", name, fmt.Sprintf(format, a...))
		return exitUsage
	}
	if code, ok := cli.ParseArgs(fset, args, cli.AnyOperands); !ok {
		return code
	}
	switch {
	case *passwordFlag:
		return usage("-password is refused: a password on the command line shows in the process list and the shell's history; " +
			"give it on the terminal, or with -password-stdin or -password-file")
	case fset.NArg() > 0:
		return usage("unexpected argument %q", human.Cell(fset.Arg(0), 40))
	case f.passwordStdin && f.passwordFile != "":
		return usage("give -password-stdin or -password-file, not both")
	case f.timeout <= 0:
		return usage("-timeout must be positive")
	}
	ttl, err := opsParseLifetime(f.expires)
	if err != nil || ttl <= 0 {
		return usage("-expires %q: want a lifetime such as 12h or 30d", human.Cell(f.expires, 20))
	}
	if f.server == "" {
		f.server = opsDefaultServer
	}
	hc, err := env.httpTransport(f.server, f.ca)
	if err != nil {
		return usage("%v", err)
	}
	defer hc.CloseIdleConnections()
	// The directory first: no password is asked for a login that could
	// not be kept safely.
	path, err := loginPath(env)
	if err != nil {
		return usage("%v", err)
	}
	if err := prepareLoginDir(filepath.Dir(path), stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFailure
	}
	user, err := loginName(f, stdin, stderr)
	if err != nil {
		return usage("%v", err)
	}
	password, err := loginPassword(f, stdin, stderr)
	if err != nil {
		return usage("%v", err)
	}
	c, err := client.New(f.server, "", client.WithHTTPClient(&http.Client{Transport: hc}), client.WithUserAgent(env.userAgent()))
	if err != nil {
		return usage("-server: %v", err)
	}
	opsWarnClear(stderr, name, f.server, "the password and the token go")
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	expires := time.Now().Add(ttl).UTC().Truncate(time.Second)
	tok, err := c.LoginToken(ctx, user, password, api.NewOwnToken{Label: f.label, ExpiresAt: &expires})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, errtext.Sentence(err))
		return exitFailure
	}
	old, _ := readLogin(path) // replaced below; its token is revoked after
	saved := savedLogin{Server: normalServer(f.server), Name: user, TokenID: tok.ID, TokenName: tok.Name, Token: tok.Secret}
	if tok.ExpiresAt != nil {
		saved.ExpiresAt = tok.ExpiresAt.UTC()
	}
	if err := writeLogin(path, saved); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		// The token is of no use without the file.
		if rc, err := client.New(f.server, tok.Secret, client.WithHTTPClient(&http.Client{Transport: hc})); err == nil {
			_ = rc.RevokeOwnToken(context.WithoutCancel(ctx))
		}
		return exitFailure
	}
	if old.Token != "" && old.Server == saved.Server && old.Token != saved.Token {
		if rc, err := client.New(old.Server, old.Token, client.WithHTTPClient(&http.Client{Transport: hc})); err == nil {
			_ = rc.RevokeOwnToken(ctx) // an expired or revoked one answers 401: nothing to do
		}
	}
	fmt.Fprintf(stdout, "Logged in to %s as %s (%s). The token %s expires %s; it is kept in %s.\n",
		saved.Server, human.Cell(user, 64), tok.Role, tok.ID, saved.ExpiresAt.Local().Format("2006-01-02 15:04 MST"), path)
	return exitOK
}

// loginName is the account's name: -name, or asked on the terminal.
func loginName(f loginFlags, stdin io.Reader, stderr io.Writer) (string, error) {
	if n := strings.TrimSpace(f.name); n != "" {
		return n, nil
	}
	file, ok := stdin.(*os.File)
	if f.passwordStdin || !ok || !term.IsTerminal(int(file.Fd())) {
		return "", errors.New("give -name (standard input is not a terminal to ask on)")
	}
	fmt.Fprint(stderr, "Name: ")
	line, err := bufio.NewReader(io.LimitReader(stdin, 1024)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the name: %w", err)
	}
	if n := strings.TrimSpace(line); n != "" {
		return n, nil
	}
	return "", errors.New("no name given")
}

// loginPassword is the password: a line of standard input, the first line
// of a file, or asked on the terminal without echo.
func loginPassword(f loginFlags, stdin io.Reader, stderr io.Writer) (string, error) {
	var (
		r    io.Reader
		from string
	)
	switch {
	case f.passwordStdin:
		r, from = stdin, "-password-stdin: standard input"
	case f.passwordFile != "":
		file, err := os.Open(f.passwordFile)
		if err != nil {
			return "", fmt.Errorf("-password-file: %w", err)
		}
		defer file.Close()
		if fi, err := file.Stat(); err == nil && fi.Mode().IsRegular() && runtime.GOOS != "windows" && fi.Mode().Perm()&0o006 != 0 {
			// A pipe (-password-file <(pass show outbox)) has no such
			// mode; a file every user may read is already no secret.
			return "", fmt.Errorf("-password-file: %s may be read or written by every user of this machine (mode %04o): refused; "+
				"run chmod o-rw %s, and change the password if others could have read it", f.passwordFile, fi.Mode().Perm(), f.passwordFile)
		}
		r, from = file, "-password-file: "+f.passwordFile
	default:
		file, ok := stdin.(*os.File)
		if !ok || !term.IsTerminal(int(file.Fd())) {
			return "", errors.New("standard input is not a terminal to ask the password on: give -password-stdin or -password-file")
		}
		fmt.Fprint(stderr, "Password: ")
		b, err := term.ReadPassword(int(file.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		if len(b) == 0 {
			return "", errors.New("no password given")
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(r, 4<<10))
	if err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("%s holds no password", from)
	}
	return pw, nil
}

// Logout is `outbox logout`: it revokes the token outbox login keeps and
// deletes the file.
func Logout(ctx context.Context, env Env, args []string) int {
	const name = "outbox logout"
	stdout, stderr := env.Stdout, env.Stderr
	if len(args) > 0 && opsIsHelp(args[0]) {
		fmt.Fprint(stdout, logoutUsage)
		return exitOK
	}
	var (
		ca      string
		timeout time.Duration
	)
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&ca, "ca", "", "CA `file` verifying an https server's certificate")
	fset.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this `duration`")
	fset.Usage = func() { fmt.Fprint(fset.Output(), logoutUsage) }
	if code, ok := cli.ParseArgs(fset, args, 0); !ok {
		return code
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, human.Cell(fset.Arg(0), 40))
		return exitUsage
	}
	path, err := loginPath(env)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	saved, err := readLogin(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stdout, "Not logged in (no %s).\n", path)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFailure
	}
	if time.Now().Before(saved.ExpiresAt) {
		hc, err := env.httpTransport(saved.Server, ca)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitUsage
		}
		defer hc.CloseIdleConnections()
		c, err := client.New(saved.Server, saved.Token, client.WithHTTPClient(&http.Client{Transport: hc}),
			client.WithUserAgent(env.userAgent()))
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitFailure
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		// 401: the token is dead already (revoked, expired, its account
		// deleted); there is nothing left to revoke.
		if err := c.RevokeOwnToken(ctx); err != nil && !errors.Is(err, ports.ErrUnauthenticated) {
			fmt.Fprintf(stderr, "%s: %s\nthe token still works until %s: run outbox logout again, or delete %s to forget it\n",
				name, errtext.Sentence(err), saved.ExpiresAt.Local().Format("2006-01-02 15:04 MST"), path)
			return exitFailure
		}
	}
	if err := os.Remove(path); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "Logged out of %s: the token is revoked and %s deleted.\n", saved.Server, path)
	return exitOK
}

// savedLogin is what outbox login keeps.
type savedLogin struct {
	Server    string    `json:"server"`
	Name      string    `json:"name"`
	TokenID   string    `json:"token_id"`
	TokenName string    `json:"token_name"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// loginPath is the login file: os.UserConfigDir()/outbox/login.json, read
// from env's environment.
func loginPath(env Env) (string, error) {
	dir, err := userConfigDir(env)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "outbox", loginFileName), nil
}

// userConfigDir is os.UserConfigDir as env's environment sets it.
func userConfigDir(env Env) (string, error) {
	var dir string
	switch runtime.GOOS {
	case "windows":
		dir = env.getenv("AppData")
	case "darwin", "ios":
		if home := env.getenv("HOME"); home != "" {
			dir = filepath.Join(home, "Library", "Application Support")
		}
	case "plan9":
		if home := env.getenv("home"); home != "" {
			dir = filepath.Join(home, "lib")
		}
	default:
		dir = env.getenv("XDG_CONFIG_HOME")
		if !filepath.IsAbs(dir) {
			dir = ""
			if home := env.getenv("HOME"); home != "" {
				dir = filepath.Join(home, ".config")
			}
		}
	}
	if dir == "" || !filepath.IsAbs(dir) {
		return "", errors.New("no user configuration directory: set HOME (or XDG_CONFIG_HOME) to keep a login")
	}
	return dir, nil
}

// readLogin reads the login file. A file that is not a regular file of the
// user's, or that others may read or write, is refused: it holds a token;
// so is one in a directory that others may write or another user owns.
func readLogin(path string) (savedLogin, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return savedLogin{}, err
	}
	if err := checkLoginDir(filepath.Dir(path)); err != nil {
		return savedLogin{}, err
	}
	if err := checkPrivateFile(path, fi); err != nil {
		return savedLogin{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return savedLogin{}, err
	}
	defer f.Close()
	var s savedLogin
	dec := json.NewDecoder(io.LimitReader(f, maxLoginFile))
	if err := dec.Decode(&s); err != nil {
		return savedLogin{}, fmt.Errorf("%s: not a login outbox login wrote (%v): run outbox login again", path, err)
	}
	if s.Server == "" || s.Token == "" || s.ExpiresAt.IsZero() {
		return savedLogin{}, fmt.Errorf("%s: incomplete: run outbox login again", path)
	}
	return s, nil
}

// checkPrivateFile refuses a login file that is a link or not a regular
// file, that others may read or write, or (on Unix) that another user owns.
func checkPrivateFile(path string, fi fs.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file: refused (it should hold your login token)", path)
	case runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to others (mode %04o): refused, since it holds a token; run chmod 600 %s and check who read it, or outbox login again",
			path, fi.Mode().Perm(), path)
	}
	if uid, ok := fsperm.Owner(fi); ok && uid != os.Getuid() {
		return fmt.Errorf("%s belongs to another user (uid %d): refused", path, uid)
	}
	return nil
}

// prepareLoginDir makes the login's directory 0700 when it is missing, and
// makes an existing one of the user's 0700 when its group or others may
// read it (saying so on stderr). It refuses one that is not a directory,
// that another user owns or that its group or others may write: whoever
// may write it can swap the login file.
func prepareLoginDir(dir string, stderr io.Writer) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if err := checkLoginDir(dir); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("make %s private: %w", dir, err)
		}
		fmt.Fprintf(stderr, "outbox login: %s was open to others (mode %04o); it is now 0700\n", dir, perm)
	}
	return nil
}

// checkLoginDir refuses the login's directory when it is not a directory,
// another user owns it, or its group or others may write it.
func checkLoginDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory: refused (it should hold your login token)", dir)
	case runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s may be written by its group or others (mode %04o): refused, since whoever may write it can swap your login token; "+
			"run chmod 700 %s and check what is in it", dir, fi.Mode().Perm(), dir)
	}
	if uid, ok := fsperm.Owner(fi); ok && uid != os.Getuid() {
		return fmt.Errorf("%s belongs to another user (uid %d): refused", dir, uid)
	}
	return nil
}

// writeLogin writes s to path, readable by the user only: the directory is
// made 0700 if missing, the file is written as a private temporary file
// and renamed over the old one.
func writeLogin(path string, s savedLogin) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".login-*.json")
	if err != nil {
		return fmt.Errorf("write the login: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	if err := tmp.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		tmp.Close()
		return fmt.Errorf("write the login: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write the login: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write the login: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write the login: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write the login: %w", err)
	}
	return nil
}

// normalServer is a server URL in the form logins compare: scheme and host
// in lower case, no trailing slash.
func normalServer(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" {
		return strings.TrimRight(strings.TrimSpace(s), "/")
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + strings.TrimRight(u.EscapedPath(), "/")
}

// opsParseLifetime reads a lifetime: a Go duration (12h, 90m) or a number
// of days (30d).
func opsParseLifetime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			return 0, fmt.Errorf("%q is not a number of days from 1 to 3650", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a lifetime such as 12h or 30d", s)
	}
	return d, nil
}

// httpTransport is the transport of the operator commands for server: the
// proxy from the environment and, with ca, the CA that verifies an https
// server.
func (env Env) httpTransport(server, ca string) (*http.Transport, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-server %q: want http://HOST:PORT or https://HOST:PORT", human.Cell(server, 80))
	}
	var t *http.Transport
	if base, ok := http.DefaultTransport.(*http.Transport); ok {
		t = base.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	if ca != "" {
		if u.Scheme != "https" {
			return nil, fmt.Errorf("-ca verifies an https server; -server is %s", u.Redacted())
		}
		tc, err := env.TLS(ca, "", "")
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		t.TLSClientConfig = tc
	}
	return t, nil
}

// opsWarnClear warns when what goes to server in clear over http to
// another machine.
func opsWarnClear(stderr io.Writer, name, server, what string) {
	u, err := url.Parse(server)
	if err == nil && u.Scheme == "http" && !guard.LoopbackHost(u.Hostname()) {
		fmt.Fprintf(stderr, "%s: warning: %s in clear over http to %s; prefer https\n", name, what, u.Host)
	}
}

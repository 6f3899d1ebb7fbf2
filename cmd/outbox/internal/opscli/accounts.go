package opscli

// outbox users and outbox tokens: operator accounts and API tokens.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

const usersUsage = `Usage: outbox users <command> [flags]

Manage operator accounts (needs the admin role).

Commands:
  list     every account and its role
  put      NAME -role viewer|operator|admin [-password-stdin]
           create the account or change its role. The password is read from
           standard input with -password-stdin, otherwise asked for on the
           terminal (for an existing user, empty keeps the current one);
           never from a flag. Without either, only an existing user's role
           changes.
  delete   NAME
` + opsCommonUsage

const tokensUsage = `Usage: outbox tokens <command> [flags]

Manage API tokens (needs the admin role). outbox login makes a token of
your own instead, bound to your account.

Commands:
  list     every token: id, name, role, account, expiry
  create   NAME -role viewer|operator|admin [-expires D]
           make a token and print its secret, this once only; with
           -expires (30d, 12h) it stops working after D
  delete   ID
           revoke a token
` + opsCommonUsage

// Users is `outbox users`.
func Users(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("users", usersUsage, args, env, opsCommon("users", env), "list", "put", "delete")
	if !ok {
		return code
	}
	r := newOpsRun("outbox users "+sub, env)
	var (
		role          string
		passwordStdin bool
	)
	if sub == "put" {
		r.fs.StringVar(&role, "role", "", "the `role`: viewer, operator or admin; required")
		r.fs.BoolVar(&passwordStdin, "password-stdin", false, "read the password from standard input (one line)")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	var put api.PutUser
	switch sub {
	case "list":
		if len(operands) > 0 {
			return r.usage("unexpected argument %q", operands[0])
		}
	case "delete", "put":
		if len(operands) != 1 {
			return r.usage("give one user name")
		}
	}
	if sub == "put" {
		if !ports.OperatorRole(role).Valid() {
			return r.usage("-role %q: want viewer, operator or admin", human.Cell(role, 20))
		}
		put.Role = ports.OperatorRole(role)
		if passwordStdin {
			pw, err := r.stdinPassword()
			if err != nil {
				return r.usage("%v", err)
			}
			put.Password = pw
		}
	}
	c, code, ok := r.dial()
	if !ok {
		return code
	}
	defer r.close()
	if sub == "put" && !passwordStdin {
		// Asked on a terminal, which takes its time: before the timeout runs.
		if put.Password, code, ok = r.newPassword(ctx, c, operands[0]); !ok {
			return code
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	switch sub {
	case "list":
		us, err := c.Users(ctx)
		if err != nil {
			return r.failed(err)
		}
		if us == nil {
			us = []api.User{}
		}
		return r.print(us, func(w io.Writer) {
			tw := opsTable(w)
			fmt.Fprintln(tw, "NAME\tROLE\tCREATED\tUPDATED")
			for _, u := range us {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", human.Cell(u.Name, 60), human.Cell(string(u.Role), 10),
					opsTime(u.CreatedAt, r.loc), opsTime(u.UpdatedAt, r.loc))
			}
			tw.Flush()
		})
	case "put":
		u, err := c.PutUser(ctx, operands[0], put)
		if err != nil {
			return r.failed(err)
		}
		return r.print(u, func(w io.Writer) {
			tw := opsTable(w)
			fmt.Fprintf(tw, "name:\t%s\nrole:\t%s\n", human.Cell(u.Name, 200), human.Cell(string(u.Role), 20))
			opsKV(tw, "created:", opsTime(u.CreatedAt, r.loc))
			opsKV(tw, "updated:", opsTime(u.UpdatedAt, r.loc))
			tw.Flush()
		})
	default:
		if err := c.DeleteUser(ctx, operands[0]); err != nil {
			return r.failed(err)
		}
		return r.done("deleted user %s", operands[0])
	}
}

// stdinPassword is the password of -password-stdin: the first line of
// standard input.
func (r *opsRun) stdinPassword() (string, error) {
	b, err := io.ReadAll(io.LimitReader(r.stdin, 4<<10))
	if err != nil {
		return "", fmt.Errorf("read the password: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", errors.New("-password-stdin: standard input holds no password")
	}
	return pw, nil
}

// newPassword is the password users put sends without -password-stdin.
// For an existing user it is asked on a terminal, empty keeping the
// current one, and without a terminal it is none (a role change only). A
// new user needs one: asked on a terminal, else the usage error that says
// to give -password-stdin. ok false says to return code.
func (r *opsRun) newPassword(ctx context.Context, c *client.Client, user string) (pw string, code int, ok bool) {
	lookup, cancel := context.WithTimeout(ctx, r.timeout)
	us, err := c.Users(lookup)
	cancel()
	if err != nil {
		return "", r.failed(err), false
	}
	exists := slices.ContainsFunc(us, func(u api.User) bool { return u.Name == user })
	if !r.stdinTerminal() {
		if exists {
			return "", exitOK, true
		}
		return "", r.usage("%q is a new user, who needs a password: give -password-stdin "+
			"(standard input is not a terminal to ask it on)", human.Cell(user, 60)), false
	}
	f := r.stdin.(*os.File)
	ask := func(prompt string) (string, error) {
		fmt.Fprint(r.stderr, prompt)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(r.stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		return string(b), nil
	}
	prompt := fmt.Sprintf("Password for the new user %s: ", human.Cell(user, 60))
	if exists {
		prompt = fmt.Sprintf("New password for %s (empty keeps the current one): ", human.Cell(user, 60))
	}
	pw, err = ask(prompt)
	switch {
	case err != nil:
		return "", r.usage("%v", err), false
	case pw == "" && exists:
		return "", exitOK, true
	case pw == "":
		return "", r.usage("no password given: a new user needs one"), false
	}
	again, err := ask("Repeat it: ")
	switch {
	case err != nil:
		return "", r.usage("%v", err), false
	case again != pw:
		return "", r.usage("the two passwords differ"), false
	}
	return pw, exitOK, true
}

// stdinTerminal reports whether standard input is a terminal to ask on.
func (r *opsRun) stdinTerminal() bool {
	f, ok := r.stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Tokens is `outbox tokens`.
func Tokens(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("tokens", tokensUsage, args, env, opsCommon("tokens", env), "list", "create", "delete")
	if !ok {
		return code
	}
	r := newOpsRun("outbox tokens "+sub, env)
	var role, expires string
	if sub == "create" {
		r.fs.StringVar(&role, "role", "", "the token's `role`: viewer, operator or admin; required")
		r.fs.StringVar(&expires, "expires", "", "the token stops working after `D` (30d, 12h); default never")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	switch {
	case sub == "list" && len(operands) > 0:
		return r.usage("unexpected argument %q", operands[0])
	case sub == "create" && len(operands) != 1:
		return r.usage("give one token name")
	case sub == "delete" && len(operands) != 1:
		return r.usage("give one token id")
	case sub == "create" && !ports.OperatorRole(role).Valid():
		return r.usage("-role %q: want viewer, operator or admin", human.Cell(role, 20))
	}
	var expiresAt *time.Time
	if expires != "" {
		ttl, err := opsParseLifetime(expires)
		if err != nil || ttl <= 0 {
			return r.usage("-expires %q: want a lifetime such as 30d or 12h", human.Cell(expires, 20))
		}
		at := time.Now().Add(ttl).UTC().Truncate(time.Second)
		expiresAt = &at
	}
	c, ctx, done, code, ok := r.connect(ctx)
	if !ok {
		return code
	}
	defer done()
	switch sub {
	case "list":
		ts, err := c.Tokens(ctx)
		if err != nil {
			return r.failed(err)
		}
		if ts == nil {
			ts = []api.Token{}
		}
		return r.print(ts, func(w io.Writer) {
			tw := opsTable(w)
			fmt.Fprintln(tw, "ID\tNAME\tROLE\tACCOUNT\tCREATED\tEXPIRES")
			for _, t := range ts {
				exp := "never"
				if t.ExpiresAt != nil {
					exp = opsTime(t.ExpiresAt, r.loc)
				}
				if t.Expired {
					exp += " (expired)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", human.Cell(t.ID, 60), human.Cell(t.Name, 60), human.Cell(string(t.Role), 10),
					opsCellOr(t.Account, 60), opsTime(t.CreatedAt, r.loc), exp)
			}
			tw.Flush()
		})
	case "create":
		t, err := c.CreateToken(ctx, api.NewToken{Name: operands[0], Role: ports.OperatorRole(role), ExpiresAt: expiresAt})
		if err != nil {
			return r.failed(err)
		}
		code := r.print(t, func(w io.Writer) {
			tw := opsTable(w)
			exp := "never"
			if t.ExpiresAt != nil {
				exp = opsTime(t.ExpiresAt, r.loc)
			}
			fmt.Fprintf(tw, "id:\t%s\nname:\t%s\nrole:\t%s\nexpires:\t%s\nsecret:\t%s\n", human.Cell(t.ID, 200), human.Cell(t.Name, 200),
				human.Cell(string(t.Role), 20), exp, human.Cell(t.Secret, 1000))
			tw.Flush()
		})
		fmt.Fprintln(r.stderr, "warning: the secret is shown this once and cannot be shown again; keep it now "+
			"(the CLI reads it from OUTBOX_TOKEN or -token-file)")
		return code
	default:
		if err := c.DeleteToken(ctx, operands[0]); err != nil {
			return r.failed(err)
		}
		return r.done("deleted token %s", operands[0])
	}
}

// opsCellOr is opsCell, or "-" for an empty s.
func opsCellOr(s string, max int) string {
	if s == "" {
		return "-"
	}
	return human.Cell(s, max)
}

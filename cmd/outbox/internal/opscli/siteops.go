package opscli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/ports"
)

const callUsage = `Usage: outbox call [flags] SYSTEM METHOD

Make a cached call to METHOD of the external system SYSTEM that the site's
configuration defines (external_systems), as a script does. The site
attempts it at once: it prints the tracked operation id and its status —
Delivered (with the system's answer), Pending (the system is down or busy:
the site retries it, see "outbox tracking status ID"), or Failed (the
system refused it for good; exit status 1). Flags may also follow SYSTEM
and METHOD; an argument that starts with "-" goes after -- (outbox call
-- SYSTEM -METHOD).

Flags:
`

const writeUsage = `Usage: outbox write [flags] CONNECTION SQL

Make a cached write to the database connection CONNECTION that the site's
configuration defines (database_connections): SQL with the driver's
placeholders ($1, @p1, ?) and -args, a JSON array of the values bound to
them, never spliced into the text. Prints the id and the status as
"outbox call" does. Flags may also follow the arguments; SQL that starts
with "-" goes after --: outbox write db -- "-- a comment
DELETE ...".

Flags:
`

const trackingUsage = `Usage: outbox tracking <command> [flags]

The site's tracking table of cached calls and writes, as any node holds it.

Commands:
  status    print the status of operations
            outbox tracking status [-site ADDRS] [-json] ID [ID ...]
  list      list operations, newest first
            outbox tracking list [-site ADDRS] [-status S[,S]] [-kind ExternalCall|DatabaseWrite] [-target NAME] [-limit N] [-json]
  retry     move a Parked operation back to the retry queue, due at once
            outbox tracking retry [-site ADDRS] ID
  discard   discard a Parked operation
            outbox tracking discard [-site ADDRS] ID

Connection flags and environment as for "outbox notify".
`

// Call is `outbox call`.
func Call(ctx context.Context, env Env, args []string) int {
	return cachedOp(ctx, env, args, "call", callUsage)
}

// Write is `outbox write`.
func Write(ctx context.Context, env Env, args []string) int {
	return cachedOp(ctx, env, args, "write", writeUsage)
}

// cachedOp runs `outbox call` or `outbox write`.
func cachedOp(ctx context.Context, env Env, args []string, cmd, usage string) int {
	stdout, stderr := env.Stdout, env.Stderr
	var nf notifyFlags
	fs := flag.NewFlagSet("outbox "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	nf.define(fs, env)
	var params, opArgs, id, script, instance string
	var asJSON bool
	if cmd == "call" {
		fs.StringVar(&params, "params", "{}", "the method's parameters, a JSON `object`")
	} else {
		fs.StringVar(&opArgs, "args", "[]", "the values bound to the SQL's placeholders, a JSON `array` of strings, numbers, booleans and nulls")
	}
	fs.StringVar(&id, "id", "", "tracked operation `id` (a UUID) to use, so that a repeat is one operation; default a new one")
	fs.StringVar(&script, "script", "outbox-cli", "`name` of the calling script, kept as provenance")
	fs.StringVar(&instance, "instance", hostname(), "`name` of the calling instance")
	fs.BoolVar(&asJSON, "json", false, "print the tracking row as JSON")
	if code, ok := cli.ParseArgs(fs, args, 2); !ok {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "outbox %s: %s\n", cmd, siteErrText(err))
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	c, err := nf.dial(env, notify.WithProvenance(notify.Provenance{Instance: instance, Script: script}))
	if err != nil {
		return fail(exitUsage, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, nf.timeout)
	defer cancel()
	var res notify.Result
	if cmd == "call" {
		if !json.Valid([]byte(params)) {
			return fail(exitUsage, errors.New("-params is not JSON"))
		}
		p := json.RawMessage(params)
		if id != "" {
			res, err = c.CallWithID(ctx, id, fs.Arg(0), fs.Arg(1), p)
		} else {
			res, err = c.Call(ctx, fs.Arg(0), fs.Arg(1), p)
		}
	} else {
		var values []any
		dec := json.NewDecoder(strings.NewReader(opArgs))
		dec.UseNumber()
		if err := dec.Decode(&values); err != nil {
			return fail(exitUsage, fmt.Errorf("-args is not a JSON array: %w", err))
		}
		if id != "" {
			res, err = c.WriteWithID(ctx, id, fs.Arg(0), fs.Arg(1), values...)
		} else {
			res, err = c.Write(ctx, fs.Arg(0), fs.Arg(1), values...)
		}
	}
	var oe *notify.OperationError
	switch {
	case errors.As(err, &oe):
		printOperations(stdout, []ports.Operation{oe.Operation}, asJSON)
		return fail(exitFailure, err)
	case errors.Is(err, ports.ErrInvalid), errors.Is(err, ports.ErrUnauthenticated):
		return fail(exitUsage, err)
	case err != nil:
		return fail(exitFailure, err)
	}
	printOperations(stdout, []ports.Operation{res.Operation}, asJSON)
	if len(res.Answer) > 0 && !asJSON {
		fmt.Fprintf(stdout, "answer: %s\n", res.Answer)
	}
	return exitOK
}

// Tracking is `outbox tracking`.
func Tracking(ctx context.Context, env Env, args []string) int {
	stdout, stderr := env.Stdout, env.Stderr
	cmd, rest, usageCode, ok := opsSubcommand("tracking", trackingUsage, args, env, notifyCommon(env), "status", "list", "retry", "discard")
	if !ok {
		return usageCode
	}
	var nf notifyFlags
	fs := flag.NewFlagSet("outbox tracking "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	nf.define(fs, env)
	var (
		asJSON              bool
		statuses, kind, tgt string
		limit               int
	)
	switch cmd {
	case "status":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	case "list":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		fs.StringVar(&statuses, "status", "", "only these `statuses`, comma-separated: Pending, Retrying, Parked, Delivered, Failed, Discarded")
		fs.StringVar(&kind, "kind", "", "only this `kind`: ExternalCall or DatabaseWrite")
		fs.StringVar(&tgt, "target", "", "only this external system or database connection `name`")
		fs.IntVar(&limit, "limit", 50, "at most this many `rows`")
	}
	if code, ok := cli.ParseArgs(fs, rest, cli.AnyOperands); !ok {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "outbox tracking %s: %s\n", cmd, siteErrText(err))
		return code
	}
	switch {
	case cmd == "status" && fs.NArg() == 0:
		return fail(exitUsage, errors.New("give the ids whose status to print"))
	case (cmd == "retry" || cmd == "discard") && fs.NArg() != 1:
		return fail(exitUsage, errors.New("give one id"))
	case cmd == "list" && fs.NArg() > 0:
		return fail(exitUsage, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	c, err := nf.dial(env)
	if err != nil {
		return fail(exitUsage, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, nf.timeout)
	defer cancel()
	code := func(err error) int { return fail(callExit(err), err) }
	switch cmd {
	case "status":
		rows, err := c.Tracking(ctx, fs.Args()...)
		if err != nil {
			return code(err)
		}
		var ops []ports.Operation
		unknown := 0
		for _, id := range fs.Args() {
			if op, ok := rows[id]; ok {
				ops = append(ops, op)
			} else {
				unknown++
				fmt.Fprintf(stderr, "%s: unknown to this site\n", id)
			}
		}
		printOperations(stdout, ops, asJSON)
		if unknown > 0 {
			return exitFailure
		}
	case "list":
		f := ports.OpFilter{Kind: ports.OpKind(kind), Target: tgt}
		for s := range strings.SplitSeq(statuses, ",") {
			if s = strings.TrimSpace(s); s != "" {
				f.Statuses = append(f.Statuses, ports.OpStatus(s))
			}
		}
		page, err := c.Operations(ctx, f, ports.PageRequest{Limit: limit})
		if err != nil {
			return code(err)
		}
		printOperations(stdout, page.Items, asJSON)
	case "retry", "discard":
		act := c.Retry
		if cmd == "discard" {
			act = c.Discard
		}
		op, err := act(ctx, fs.Arg(0))
		if err != nil {
			return code(err)
		}
		printOperations(stdout, []ports.Operation{op}, asJSON)
	}
	return exitOK
}

// printOperations writes tracking rows as a table, or as JSON lines.
func printOperations(w io.Writer, ops []ports.Operation, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, op := range ops {
			_ = enc.Encode(operationJSON(op))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tTARGET\tSTATUS\tRETRIES\tCREATED\tLAST ERROR")
	for _, op := range ops {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", op.ID, op.Kind, oneLine(op.Summary()), op.Status, op.RetryCount,
			op.CreatedAt.UTC().Format(time.RFC3339), oneLine(op.LastError))
	}
	_ = tw.Flush()
}

// operationJSON is a tracking row as `-json` prints it.
func operationJSON(op ports.Operation) map[string]any {
	m := map[string]any{"id": op.ID, "kind": op.Kind, "target": op.Target, "status": op.Status,
		"retry_count": op.RetryCount, "created_at": op.CreatedAt, "updated_at": op.UpdatedAt,
		"source_instance": op.SourceInstance, "source_script": op.SourceScript}
	if op.Method != "" {
		m["method"] = op.Method
	}
	if op.LastError != "" {
		m["last_error"] = op.LastError
	}
	if !op.NextAttemptAt.IsZero() {
		m["next_attempt_at"] = op.NextAttemptAt
	}
	if !op.TerminalAt.IsZero() {
		m["terminal_at"] = op.TerminalAt
	}
	return m
}

// oneLine replaces control characters, so that a row stays one line and
// a target's text cannot drive the terminal.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
}

package opscli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/adapters/support/errtext"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/ports"
)

const notifyUsage = `Usage: outbox notify <command> [flags]

Talk to a site as a script does, through the site API of its nodes.

Commands:
  send     send a notification; prints its id once the site committed it
           outbox notify send [-site HOST:PORT[,HOST:PORT]] -list ops -subject S [-body B | -body-file F]
  status   print the status of notifications: Forwarding, central's, or Unknown
           outbox notify status [-site ADDRS] ID [ID ...]
  health   print each node's health (backlog, Raft role and term, central
           contact); exit 1 when a node does not answer
           outbox notify health [-site ADDRS] [-json]

-site defaults to 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103: the site of
outbox dev, and of configs/site-*.yaml.

Credentials: the site API token in OUTBOX_SITE_API_TOKEN (the token, or a
reference env:NAME / file:/path), or a client certificate (-cert and -key)
when the site takes them. -ca connects over TLS, which a site off loopback
requires.

Environment: OUTBOX_SITE_ADDR (as -site), OUTBOX_SITE_API_TOKEN,
OUTBOX_SITE_CA, OUTBOX_SITE_CERT, OUTBOX_SITE_KEY (as -ca, -cert, -key).
`

// notifyFlags are the flags every notify command takes.
type notifyFlags struct {
	site, ca, cert, key string
	timeout             time.Duration
}

func (n *notifyFlags) define(fs *flag.FlagSet, env Env) {
	site := env.getenv("OUTBOX_SITE_ADDR")
	if site == "" {
		site = env.SiteAddrs
	}
	fs.StringVar(&n.site, "site", site, "site API `addresses`, comma-separated: any node will do (env OUTBOX_SITE_ADDR; the default is outbox dev's site)")
	fs.DurationVar(&n.timeout, "timeout", 10*time.Second, "give up after this `duration`")
	fs.StringVar(&n.ca, "ca", env.getenv("OUTBOX_SITE_CA"), "CA `file` verifying the nodes' certificates: connect over TLS (env OUTBOX_SITE_CA)")
	fs.StringVar(&n.cert, "cert", env.getenv("OUTBOX_SITE_CERT"), "client certificate `file` (with -key), the credential of a site that takes them (env OUTBOX_SITE_CERT)")
	fs.StringVar(&n.key, "key", env.getenv("OUTBOX_SITE_KEY"), "client key `file` (env OUTBOX_SITE_KEY)")
}

// notifyCommon are the flags every notify and tracking command takes, for
// opsSubcommand.
func notifyCommon(env Env) *flag.FlagSet {
	var nf notifyFlags
	fs := flag.NewFlagSet("outbox notify", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	nf.define(fs, env)
	return fs
}

// dial connects to the site with the flags' TLS and the environment's token.
func (n *notifyFlags) dial(env Env, opts ...notify.Option) (*notify.Client, error) {
	if n.site == "" {
		return nil, errors.New("-site is required (or OUTBOX_SITE_ADDR)")
	}
	if ref := env.getenv("OUTBOX_SITE_API_TOKEN"); ref != "" {
		token, err := secretref.Resolve(ref)
		if err != nil {
			return nil, fmt.Errorf("OUTBOX_SITE_API_TOKEN: %w", err)
		}
		opts = append(opts, notify.WithToken(token))
	}
	if n.ca != "" || n.cert != "" || n.key != "" {
		t, err := env.TLS(n.ca, n.cert, n.key)
		if err != nil {
			return nil, err
		}
		opts = append(opts, notify.WithTLS(t))
	}
	return notify.Dial(n.site, opts...)
}

// Notify is `outbox notify`: a site's client, as a script is.
func Notify(ctx context.Context, env Env, args []string) int {
	stdout, stderr := env.Stdout, env.Stderr
	cmd, rest, usageCode, ok := opsSubcommand("notify", notifyUsage, args, env, notifyCommon(env), "send", "status", "health")
	if !ok {
		return usageCode
	}
	var nf notifyFlags
	fs := flag.NewFlagSet("outbox notify "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	nf.define(fs, env)
	var (
		list, subject, body, bodyFile, script, instance, execution, parent string
		asJSON                                                             bool
	)
	switch cmd {
	case "send":
		fs.StringVar(&list, "list", "", "notification `list`; required")
		fs.StringVar(&subject, "subject", "", "the `subject`")
		fs.StringVar(&body, "body", "", "the `body`")
		fs.StringVar(&bodyFile, "body-file", "", "read the body from `file` (- for standard input)")
		fs.StringVar(&script, "script", "outbox-cli", "`name` of the sending script, kept as provenance")
		fs.StringVar(&instance, "instance", hostname(), "`name` of the sending instance")
		fs.StringVar(&execution, "execution-id", "", "`id` of this execution")
		fs.StringVar(&parent, "parent-execution-id", "", "`id` of the parent execution")
	case "status":
	case "health":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	}
	if code, ok := cli.ParseArgs(fs, rest, cli.AnyOperands); !ok {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "outbox notify %s: %s\n", cmd, siteErrText(err))
		return code
	}
	if cmd == "send" && bodyFile != "" {
		if body != "" {
			return fail(exitUsage, errors.New("give -body or -body-file, not both"))
		}
		b, err := readBody(bodyFile, env.Stdin)
		if err != nil {
			return fail(exitUsage, err)
		}
		body = b
	}
	if cmd == "status" && fs.NArg() == 0 {
		return fail(exitUsage, errors.New("give the ids whose status to print"))
	}
	if cmd != "status" && fs.NArg() > 0 {
		return fail(exitUsage, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	c, err := nf.dial(env, notify.WithProvenance(notify.Provenance{Instance: instance, Script: script,
		ExecutionID: execution, ParentExecutionID: parent}))
	if err != nil {
		return fail(exitUsage, err)
	}
	defer c.Close()
	if cmd == "health" {
		return nodesHealth(ctx, c, nf.timeout, asJSON, stdout, stderr)
	}
	ctx, cancel := context.WithTimeout(ctx, nf.timeout)
	defer cancel()
	code := func(err error) int { return fail(callExit(err), err) }

	switch cmd {
	case "send":
		if list == "" {
			return fail(exitUsage, errors.New("-list is required"))
		}
		if strings.TrimSpace(subject) == "" && strings.TrimSpace(body) == "" {
			return fail(exitUsage, errors.New("give -subject, -body or both: a notification with neither is refused"))
		}
		id, err := c.To(list).Send(ctx, subject, body)
		if err != nil {
			return code(err)
		}
		fmt.Fprintln(stdout, id)
	case "status":
		sts, err := c.Statuses(ctx, fs.Args())
		if err != nil {
			return code(err)
		}
		for _, id := range fs.Args() {
			st := sts[id]
			if st == "" {
				st = ports.StatusUnknown
			}
			fmt.Fprintf(stdout, "%s %s\n", id, st)
		}
	}
	return exitOK
}

// nodesHealth is `outbox notify health`: every node -site names (by
// default outbox dev's three), each asked on its own within timeout, so
// that a node that hangs does not use up the others' time. A node that
// does not answer is reported ("node ADDR: …") and the others still
// printed: as "key: value" blocks, or with -json as one JSON array of
// objects, each with the node's address ("addr").
func nodesHealth(ctx context.Context, c *notify.Client, timeout time.Duration, asJSON bool, stdout, stderr io.Writer) int {
	worst := exitOK
	nodes := []map[string]any{}
	printed := 0
	for _, addr := range c.Addrs() {
		nodeCtx, cancel := context.WithTimeout(ctx, timeout)
		h, err := c.Health(nodeCtx, addr)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "outbox notify health: node %s: %s\n", addr, siteErrText(err))
			worst = max(worst, callExit(err))
			continue
		}
		if asJSON {
			nodes = append(nodes, healthJSON(addr, h))
			continue
		}
		if printed > 0 {
			fmt.Fprintln(stdout)
		}
		printed++
		printHealth(stdout, h)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(nodes); err != nil {
			fmt.Fprintf(stderr, "outbox notify health: write JSON: %v\n", err)
			return exitFailure
		}
	}
	return worst
}

// opKind is one kind of a node's operations, as health prints it.
type opKind struct {
	Kind             ports.OpKind `json:"kind"`
	Backlog          int64        `json:"backlog"`
	Parked           int64        `json:"parked"`
	OldestAgeSeconds float64      `json:"oldest_age_seconds"`
}

// healthOps are h's operations, as health prints them.
func healthOps(h ports.SiteHealth) []opKind {
	var ops []opKind
	for _, k := range h.Operations {
		o := opKind{Kind: k.Kind, Backlog: k.Backlog, Parked: k.Parked}
		if !k.OldestBufferedAt.IsZero() {
			o.OldestAgeSeconds = time.Since(k.OldestBufferedAt).Round(time.Millisecond).Seconds()
		}
		ops = append(ops, o)
	}
	return ops
}

// oldestAge is the age of h's oldest buffered notification, 0 for none.
func oldestAge(h ports.SiteHealth) time.Duration {
	if h.OldestEnqueuedAt.IsZero() {
		return 0
	}
	return time.Since(h.OldestEnqueuedAt).Round(time.Millisecond)
}

// healthJSON is the JSON object of node addr's health h.
func healthJSON(addr string, h ports.SiteHealth) map[string]any {
	m := map[string]any{
		"addr": addr, "site": h.Site, "node": h.Node, "role": h.Replica.Role, "term": h.Replica.Term,
		"leader": h.Replica.Leader, "backlog": h.Backlog, "oldest_age_seconds": oldestAge(h).Seconds(),
		"last_central_contact": h.LastCentralContact, "last_central_error": h.LastCentralError,
	}
	if ops := healthOps(h); len(ops) > 0 {
		m["operations"] = ops
	}
	return m
}

// printHealth writes h as "key: value" lines.
func printHealth(w io.Writer, h ports.SiteHealth) {
	age := oldestAge(h)
	contact := "never"
	if !h.LastCentralContact.IsZero() {
		contact = h.LastCentralContact.Format(time.RFC3339Nano)
	}
	ops := healthOps(h)
	defer func() {
		for _, o := range ops {
			fmt.Fprintf(w, "operations %s: backlog %d, parked %d, oldest_age %s\n", o.Kind, o.Backlog, o.Parked,
				time.Duration(o.OldestAgeSeconds*float64(time.Second)).Round(time.Millisecond))
		}
	}()
	fmt.Fprintf(w, "site: %s\nnode: %s\nrole: %s\nterm: %d\nleader: %s\nbacklog: %d\noldest_age: %s\nlast_central_contact: %s\n",
		h.Site, h.Node, h.Replica.Role, h.Replica.Term, h.Replica.Leader, h.Backlog, age, contact)
	if h.LastCentralError != "" {
		fmt.Fprintf(w, "last_central_error: %s\n", h.LastCentralError)
	}
}

// readBody reads a body file, or stdin for "-".
func readBody(path string, stdin io.Reader) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("read the body: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// hostname returns the host's name, "" when unknown.
func hostname() string {
	h, _ := os.Hostname()
	return h
}

// siteErrText is err as the operator reads it: a node's refusal in the
// node's own words, once; any other error as one sentence (errtext).
func siteErrText(err error) string {
	if reason, ok := notify.Refusal(err); ok {
		return reason
	}
	return errtext.Sentence(err)
}

// callExit is the exit code of a command whose call to a site node failed
// with err: a usage error when the request was refused as invalid or
// unauthenticated, a failure otherwise.
func callExit(err error) int {
	if errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrUnauthenticated) {
		return exitUsage
	}
	return exitFailure
}

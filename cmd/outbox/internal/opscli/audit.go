package opscli

import (
	"context"
	"fmt"
	"io"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
)

const auditUsage = `Usage: outbox audit [-kind K] [-name N] [-limit N] [-after CURSOR] [-all-pages] [flags]

Print the admin audit log, newest first (needs the admin role): every change
to lists, channels, users and API tokens, with who made it (an account,
token:<name> for a token of its own, config for central's configuration file
at start, system for central itself) and what changed. Summaries never hold a
secret: no password, no token, no clear value of a secret setting, no target.

Filters:
  -kind K     list, channel, user or token
  -name N     one list, channel type, user or token name
` + opsCommonUsage

// Audit is `outbox audit`: the admin audit log.
func Audit(ctx context.Context, env Env, args []string) int {
	if len(args) > 0 && opsIsHelp(args[0]) {
		fmt.Fprint(env.Stdout, auditUsage)
		return exitOK
	}
	r := newOpsRun("outbox audit", env)
	var (
		kind, name, after string
		limit             int
		allPages          bool
	)
	r.fs.StringVar(&kind, "kind", "", "only this `kind`: list, channel, user or token")
	r.fs.StringVar(&name, "name", "", "only this list, channel type, user or token `name`")
	r.fs.IntVar(&limit, "limit", 0, "at most `N` records a page (default: the server's, 50)")
	r.fs.StringVar(&after, "after", "", "start after the `cursor` a previous page printed")
	r.fs.BoolVar(&allPages, "all-pages", false, "fetch and print every page")
	operands, code, ok := r.parse(args)
	if !ok {
		return code
	}
	if len(operands) > 0 {
		return r.usage("unexpected argument %q", human.Cell(operands[0], 40))
	}
	// The server checks the same rules; checking here says which flag.
	v := map[string][]string{api.ParamKind: {kind}, api.ParamName: {name}, api.ParamAfter: {after}}
	if limit != 0 {
		v[api.ParamLimit] = []string{fmt.Sprint(limit)}
	}
	q, err := api.ParseAuditQuery(v)
	if err != nil {
		return r.usage("--%v", err)
	}
	if limit == 0 {
		q.Limit = 0
	}
	c, ctx, done, code, ok := r.connect(ctx)
	if !ok {
		return code
	}
	defer done()
	var page api.AdminPage
	for {
		p, err := c.Audit(ctx, q)
		if err != nil {
			return r.failed(err)
		}
		page.Items = append(page.Items, p.Items...)
		page.Next = p.Next
		if !allPages || p.Next == "" {
			break
		}
		next, err := api.ParseAuditQuery(map[string][]string{api.ParamAfter: {p.Next}})
		if err != nil || next.After == q.After || len(p.Items) == 0 {
			return r.failed(fmt.Errorf("the server returned the cursor %q again: stopping", human.Cell(p.Next, 40)))
		}
		q.After = next.After
	}
	if page.Items == nil {
		page.Items = []api.AdminRecord{}
	}
	code = r.print(page, func(w io.Writer) {
		if len(page.Items) == 0 {
			fmt.Fprintln(r.stderr, "no admin change recorded matches")
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "AT\tACTOR\tKIND\tNAME\tACTION\tWHAT CHANGED")
		for _, rec := range page.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", opsTime(&rec.At, r.loc), human.Cell(rec.Actor, 40),
				human.Cell(string(rec.Kind), 10), human.Cell(rec.Name, 40), human.Cell(string(rec.Action), 10), human.Cell(rec.Summary, 200))
		}
		tw.Flush()
	})
	if code == exitOK && page.Next != "" && !r.asJSON {
		fmt.Fprintf(r.stderr, "older records: repeat with -after %s (or -all-pages)\n", page.Next)
	}
	return code
}

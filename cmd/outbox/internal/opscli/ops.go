package opscli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/internal/human"
	"github.com/siteline/outbox/ports"
)

// opsDefaultServer is central's API when neither --server nor OUTBOX_SERVER
// says otherwise.
const opsDefaultServer = "http://127.0.0.1:8080"

const opsCommonUsage = `
Common flags:
  --server URL       central's API (env OUTBOX_SERVER; else the server of
                     outbox login; default ` + opsDefaultServer + `)
  --token-file FILE  read the API token from FILE; otherwise it comes from the
                     environment variable OUTBOX_TOKEN (the token, or a
                     reference env:NAME or file:/path), else from outbox
                     login. A token is never given in clear on the command
                     line.
  --token REF        the token as a reference env:NAME or file:/path
  --ca FILE          CA certificates that verify an https server
  --json             print JSON (the API's own shapes) instead of a table
  --timeout D        give up after D (default 30s)

Exit codes: 0 done, 1 the server refused or could not be reached, 2 bad usage.
`

const notificationsUsage = `Usage: outbox notifications <command> [flags]

List, inspect, retry and discard the notifications central holds.

Commands:
  list     [filters] [--limit N] [--after CURSOR] [--all-pages]
           list notifications, newest first, one page (or every page)
  show     ID
           one notification with its body and its history
  count    [filters]
           how many notifications match
  retry    (ID ... | filters | --all) [--yes]
           move Parked notifications back to Pending to deliver them again
  discard  (ID ... | filters | --all) [--yes]
           move Parked notifications to Discarded (they stay for the audit)

Filters (set ones are ANDed):
  --status S        Pending, Retrying, Delivered, Parked or Discarded;
                    repeat the flag or separate with commas
  --type T          channel type (email, webhook, ...)
  --site S          source site
  --list L          list name
  --from T          created at or after T
  --to T            created before T
  --updated-from T  changed at or after T ("parked since T")
  --updated-to T    changed before T
  --stuck           only stuck notifications
  --q WORD          the subject contains WORD, in any letter case
Times are RFC 3339 (2026-01-02T15:04:05Z), a local date or date and time
(2026-01-02, 2026-01-02T15:04), or a duration meaning that long ago (90m, 24h).

retry and discard given ids act on those ids. Without ids they act on every
Parked notification the filters (or --all) select; they first print how many
that is, and the flags that act on exactly those: --yes, and --updated-to the
instant of the count, so that a notification parked later is left alone.
` + opsCommonUsage

const kpiUsage = `Usage: outbox kpi [flags]

Print the delivery KPIs: queue depth, stuck, parked, delivered in the KPI
window and the oldest pending age, globally and per source site.
` + opsCommonUsage

const listsUsage = `Usage: outbox lists <command> [flags]

Manage notification lists (changing them needs the admin role).

Commands:
  list     every list with its type and number of targets
  show     NAME
  put      NAME --type T --target X [--target Y ...]
           create the list or replace it whole
  put      [NAME] --file F.json
           the same from a file holding the API's list ({"name", "type",
           "targets"}; - reads standard input)
  delete   NAME
` + opsCommonUsage

const channelsUsage = `Usage: outbox channels <command> [flags]

Manage the settings of channel types (changing them needs the admin role).

Commands:
  list     every channel type with its retry policy and setting names
  show     TYPE
  put      TYPE [--set KEY=VALUE ...] [--backoff fixed|exponential]
                [--max-retries N] [--interval D] [--max-interval D] [--rate-limit R]
           create the channel's settings or replace them whole: give every
           setting (secrets as references env:NAME or file:/path)
  put      [TYPE] --file F.json
           the same from a file holding the API's channel ({"type",
           "settings", "retry", "rate_limit"}; - reads standard input)
  delete   TYPE
` + opsCommonUsage

const usersUsage = `Usage: outbox users <command> [flags]

Manage operator accounts (needs the admin role).

Commands:
  list     every account and its role
  put      NAME --role viewer|operator|admin [--password-stdin]
           create the account or change its role. The password is read from
           standard input with --password-stdin, otherwise asked for on the
           terminal (empty keeps the current one); never from a flag.
  delete   NAME
` + opsCommonUsage

const tokensUsage = `Usage: outbox tokens <command> [flags]

Manage API tokens (needs the admin role). outbox login makes a token of
your own instead, bound to your account.

Commands:
  list     every token: id, name, role, account, expiry
  create   NAME --role viewer|operator|admin [--expires D]
           make a token and print its secret, this once only; with
           --expires (30d, 12h) it stops working after D
  delete   ID
           revoke a token
` + opsCommonUsage

// Notifications is `outbox notifications`.
func Notifications(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("notifications", notificationsUsage, args, env,
		"list", "show", "count", "retry", "discard")
	if !ok {
		return code
	}
	r := newOpsRun("outbox notifications "+sub, env)
	var (
		ff        opsFilterFlags
		limit     int
		after     string
		allPages  bool
		all, yes  bool
		wantsArgs = "no arguments"
	)
	switch sub {
	case "list":
		ff.define(r.fs)
		r.fs.IntVar(&limit, "limit", 0, "at most `N` notifications a page (default: the server's)")
		r.fs.StringVar(&after, "after", "", "start after the `cursor` a previous page printed")
		r.fs.BoolVar(&allPages, "all-pages", false, "fetch and print every page")
	case "show":
		wantsArgs = "one id"
	case "count":
		ff.define(r.fs)
	case "retry", "discard":
		ff.define(r.fs)
		r.fs.BoolVar(&all, "all", false, "select every Parked notification")
		r.fs.BoolVar(&yes, "yes", false, "act on a selection by filter or --all without asking")
		wantsArgs = "ids"
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	switch {
	case sub == "show" && len(operands) != 1:
		return r.usage("give one notification id")
	case wantsArgs == "no arguments" && len(operands) > 0:
		return r.usage("unexpected argument %q", operands[0])
	case limit < 0:
		return r.usage("--limit must be positive")
	}
	f, err := ff.filter(time.Now(), r.loc)
	if err != nil {
		return r.usage("%v", err)
	}
	c, code, ok := r.dial()
	if !ok {
		return code
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()

	switch sub {
	case "list":
		return r.listNotifications(ctx, c, f, limit, after, allPages)
	case "show":
		d, err := c.Notification(ctx, operands[0])
		if err != nil {
			return r.failed(err)
		}
		return r.print(d, func(w io.Writer) { opsPrintDetail(w, d, r.loc) })
	case "count":
		n, err := c.Count(ctx, f)
		if err != nil {
			return r.failed(err)
		}
		return r.print(api.Count{Count: n}, func(w io.Writer) { fmt.Fprintln(w, n) })
	default:
		return r.act(ctx, c, sub, operands, f, all, yes)
	}
}

// listNotifications prints one page of notifications, or every page.
func (r *opsRun) listNotifications(ctx context.Context, c *client.Client, f api.Filter, limit int, after string, allPages bool) int {
	var page api.NotificationPage
	for {
		p, err := c.Notifications(ctx, f, limit, after)
		if err != nil {
			return r.failed(err)
		}
		page.Items = append(page.Items, p.Items...)
		page.Next = p.Next
		if !allPages || p.Next == "" {
			break
		}
		if p.Next == after || len(p.Items) == 0 {
			return r.failed(fmt.Errorf("the server returned the cursor %q again: stopping", human.Cell(p.Next, 40)))
		}
		after = p.Next
	}
	if page.Items == nil {
		page.Items = []api.Notification{}
	}
	code := r.print(page, func(w io.Writer) {
		if len(page.Items) == 0 {
			fmt.Fprintln(r.stderr, "no notifications match")
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "ID\tSTATUS\tTYPE\tLIST\tSITE\tRETRIES\tCREATED\tUPDATED\tSUBJECT")
		for _, n := range page.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", human.Cell(n.ID, 40), opsStatus(n.Status, n.Stuck),
				human.Cell(n.Type, 20), human.Cell(n.List, 30), human.Cell(n.SourceSite, 20), n.RetryCount,
				opsTime(n.CreatedAt, r.loc), opsTime(n.UpdatedAt, r.loc), human.Cell(n.Subject, 60))
		}
		tw.Flush()
	})
	if code == exitOK && page.Next != "" && !r.asJSON {
		fmt.Fprintf(r.stderr, "more notifications: repeat with --after %s (or --all-pages)\n", page.Next)
	}
	return code
}

// act is retry or discard. Ids act at once; a selection by filter or --all
// first counts the Parked rows it selects and acts only with --yes.
func (r *opsRun) act(ctx context.Context, c *client.Client, sub string, ids []string, f api.Filter, all, yes bool) int {
	switch {
	case len(ids) > 0 && (all || !f.IsZero()):
		return r.usage("give ids, or filters, or --all: not several")
	case all && !f.IsZero():
		return r.usage("--all selects every Parked notification: give it without filters")
	case len(ids) == 0 && !all && f.IsZero():
		return r.usage("give the ids to %s, filters selecting them, or --all", sub)
	}
	req := api.ActionRequest{IDs: ids}
	if len(ids) == 0 {
		if all {
			req.All = true
		} else {
			req.Filter = &f
		}
		if len(f.Status) > 0 && !slices.Contains(f.Status, ports.StatusParked) {
			return r.usage("only Parked notifications can be %s: the --status filter leaves none", opsPast(sub))
		}
		if !yes {
			parked := f
			parked.Status = []ports.Status{ports.StatusParked}
			if now := time.Now().UTC().Truncate(time.Second); parked.UpdatedTo == nil || parked.UpdatedTo.After(now) {
				parked.UpdatedTo = &now
			}
			pin := " --yes --updated-to " + parked.UpdatedTo.Format(time.RFC3339)
			n, err := c.Count(ctx, parked)
			if err != nil {
				return r.failed(err)
			}
			if n == 0 {
				fmt.Fprintf(r.stdout, "no parked notifications match: nothing to %s\n", sub)
				return exitOK
			}
			if n == 1 {
				fmt.Fprintf(r.stderr, "1 parked notification matches; repeat with%s to %s it\n", pin, sub)
			} else {
				fmt.Fprintf(r.stderr, "%d parked notifications match; repeat with%s to %s them\n", n, pin, sub)
			}
			return exitUsage
		}
	}
	do := c.Retry
	if sub == "discard" {
		do = c.Discard
	}
	res, err := do(ctx, req)
	if err != nil {
		return r.failed(err)
	}
	if res.Moved == nil {
		res.Moved = []string{}
	}
	code := r.print(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s %d %s\n", opsPast(sub), len(res.Moved), human.Plural(int64(len(res.Moved)), "notification"))
		if len(res.Refused) == 0 {
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "REFUSED\tCODE\tREASON")
		for _, x := range res.Refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", human.Cell(x.ID, 40), human.Cell(x.Code, 20), human.Cell(x.Message, 120))
		}
		tw.Flush()
	})
	if code == exitOK && len(res.Refused) > 0 {
		fmt.Fprintf(r.stderr, "%s: %d of %d %s refused\n", r.name, len(res.Refused),
			len(res.Refused)+len(res.Moved), human.Plural(int64(len(res.Refused)+len(res.Moved)), "notification"))
		return exitFailure
	}
	return code
}

// KPI is `outbox kpi`.
func KPI(ctx context.Context, env Env, args []string) int {
	if len(args) > 0 && opsIsHelp(args[0]) {
		fmt.Fprint(env.Stdout, kpiUsage)
		return exitOK
	}
	r := newOpsRun("outbox kpi", env)
	operands, code, ok := r.parse(args)
	if !ok {
		return code
	}
	if len(operands) > 0 {
		return r.usage("unexpected argument %q", operands[0])
	}
	c, code, ok := r.dial()
	if !ok {
		return code
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	rep, err := c.KPIs(ctx)
	if err != nil {
		return r.failed(err)
	}
	return r.print(rep, func(w io.Writer) {
		window := human.Duration(human.Seconds(rep.WindowSeconds))
		fmt.Fprintf(w, "KPIs at %s\n\n", opsTime(&rep.At, r.loc))
		tw := opsTable(w)
		g := rep.Global
		fmt.Fprintf(tw, "queue depth:\t%d\n", g.QueueDepth)
		fmt.Fprintf(tw, "stuck:\t%d\n", g.Stuck)
		fmt.Fprintf(tw, "parked:\t%d\n", g.Parked)
		fmt.Fprintf(tw, "delivered (last %s):\t%d\n", window, g.Delivered)
		fmt.Fprintf(tw, "oldest pending:\t%s\n", opsAge(g.OldestPendingAgeSeconds))
		tw.Flush()
		if len(rep.Sites) == 0 {
			return
		}
		fmt.Fprintln(w)
		tw = opsTable(w)
		fmt.Fprintln(tw, "SITE\tQUEUE\tSTUCK\tPARKED\tDELIVERED\tOLDEST PENDING")
		for _, s := range rep.Sites {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", human.Cell(s.Site, 40), s.QueueDepth, s.Stuck, s.Parked,
				s.Delivered, opsAge(s.OldestPendingAgeSeconds))
		}
		tw.Flush()
	})
}

// Lists is `outbox lists`.
func Lists(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("lists", listsUsage, args, env, "list", "show", "put", "delete")
	if !ok {
		return code
	}
	r := newOpsRun("outbox lists "+sub, env)
	var (
		typ, file string
		targets   repeated
	)
	if sub == "put" {
		r.fs.StringVar(&typ, "type", "", "the list's channel `type` (email, webhook, ...)")
		r.fs.Var(&targets, "target", "a `target` (an address, a URL); repeat for several")
		r.fs.StringVar(&file, "file", "", "read the list from a JSON `file` (- for standard input)")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	var l api.List
	switch sub {
	case "list":
		if len(operands) > 0 {
			return r.usage("unexpected argument %q", operands[0])
		}
	case "show", "delete":
		if len(operands) != 1 {
			return r.usage("give one list name")
		}
	case "put":
		if len(operands) > 1 {
			return r.usage("give one list name")
		}
		if file == "" {
			if len(operands) == 0 {
				return r.usage("give the list's name")
			}
			l = api.List{Name: operands[0], Type: typ, Targets: targets}
			if l.Targets == nil {
				l.Targets = []string{}
			}
			break
		}
		if typ != "" || len(targets) > 0 {
			return r.usage("give --file, or --type and --target: not both")
		}
		if err := opsReadJSON(file, r.stdin, &l); err != nil {
			return r.usage("%v", err)
		}
		if len(operands) == 1 {
			if l.Name != "" && l.Name != operands[0] {
				return r.usage("the file names the list %q, the command %q", human.Cell(l.Name, 40), human.Cell(operands[0], 40))
			}
			l.Name = operands[0]
		}
		if l.Name == "" {
			return r.usage("give the list's name (the file names none)")
		}
	}
	return opsRunCRUD(ctx, r, sub, operands, func(c *client.Client) opsCRUD[api.List] {
		return opsCRUD[api.List]{
			list: c.Lists, show: c.List, remove: c.DeleteList,
			put: func(ctx context.Context) (api.List, error) { return c.PutList(ctx, l) },
			table: func(tw io.Writer, ls []api.List) {
				fmt.Fprintln(tw, "NAME\tTYPE\tTARGETS")
				for _, l := range ls {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", human.Cell(l.Name, 60), human.Cell(l.Type, 20), len(l.Targets))
				}
			},
			detail:  opsPrintList,
			deleted: "deleted list %s",
		}
	})
}

// Channels is `outbox channels`.
func Channels(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("channels", channelsUsage, args, env, "list", "show", "put", "delete")
	if !ok {
		return code
	}
	r := newOpsRun("outbox channels "+sub, env)
	var (
		file, backoff         string
		sets                  repeated
		maxRetries            int
		interval, maxInterval time.Duration
		rateLimit             float64
	)
	if sub == "put" {
		r.fs.StringVar(&file, "file", "", "read the channel from a JSON `file` (- for standard input)")
		r.fs.Var(&sets, "set", "a setting as `key=value`; repeat for several")
		r.fs.StringVar(&backoff, "backoff", "", "retry schedule: fixed or exponential (default fixed)")
		r.fs.IntVar(&maxRetries, "max-retries", 0, "park after `N` failed attempts (default: central's)")
		r.fs.DurationVar(&interval, "interval", 0, "wait `D` between attempts (exponential: the first wait)")
		r.fs.DurationVar(&maxInterval, "max-interval", 0, "exponential: the longest wait `D`")
		r.fs.Float64Var(&rateLimit, "rate-limit", 0, "at most `R` deliveries a second (0: no limit)")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	var ch api.Channel
	switch sub {
	case "list":
		if len(operands) > 0 {
			return r.usage("unexpected argument %q", operands[0])
		}
	case "show", "delete":
		if len(operands) != 1 {
			return r.usage("give one channel type")
		}
	case "put":
		if len(operands) > 1 {
			return r.usage("give one channel type")
		}
		if file == "" {
			if len(operands) == 0 {
				return r.usage("give the channel type")
			}
			ch = api.Channel{Type: operands[0], Settings: map[string]string{}, RateLimit: rateLimit,
				Retry: api.Retry{Backoff: ports.Backoff(backoff), MaxRetries: maxRetries,
					IntervalSeconds: interval.Seconds(), MaxIntervalSeconds: maxInterval.Seconds()}}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if k = strings.TrimSpace(k); !ok || k == "" {
					return r.usage("--set %q: want key=value", human.Cell(kv, 40))
				}
				if _, dup := ch.Settings[k]; dup {
					return r.usage("--set: the setting %q is given twice", human.Cell(k, 40))
				}
				ch.Settings[k] = v
			}
			break
		}
		given := false
		r.fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "set", "backoff", "max-retries", "interval", "max-interval", "rate-limit":
				given = true
			}
		})
		if given {
			return r.usage("give --file, or --set and the retry flags: not both")
		}
		if err := opsReadJSON(file, r.stdin, &ch); err != nil {
			return r.usage("%v", err)
		}
		if len(operands) == 1 {
			if ch.Type != "" && ch.Type != operands[0] {
				return r.usage("the file names the channel type %q, the command %q", human.Cell(ch.Type, 40), human.Cell(operands[0], 40))
			}
			ch.Type = operands[0]
		}
		if ch.Type == "" {
			return r.usage("give the channel type (the file names none)")
		}
		if ch.Settings == nil {
			ch.Settings = map[string]string{}
		}
	}
	return opsRunCRUD(ctx, r, sub, operands, func(c *client.Client) opsCRUD[api.Channel] {
		return opsCRUD[api.Channel]{
			list: c.Channels, show: c.Channel, remove: c.DeleteChannel,
			put: func(ctx context.Context) (api.Channel, error) { return c.PutChannel(ctx, ch) },
			table: func(tw io.Writer, chs []api.Channel) {
				fmt.Fprintln(tw, "TYPE\tBACKOFF\tMAX RETRIES\tINTERVAL\tMAX INTERVAL\tRATE LIMIT\tSETTINGS")
				for _, ch := range chs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", human.Cell(ch.Type, 30), opsBackoff(ch.Retry.Backoff),
						opsDefault(ch.Retry.MaxRetries), opsSecondsOrDefault(ch.Retry.IntervalSeconds),
						opsSecondsOrDefault(ch.Retry.MaxIntervalSeconds), opsRate(ch.RateLimit),
						human.Cell(strings.Join(opsKeys(ch.Settings), ","), 60))
				}
			},
			detail:  opsPrintChannel,
			deleted: "deleted the settings of channel %s",
		}
	})
}

// opsCRUD is how one kind of directory entry (a list, a channel) is listed,
// shown, put and deleted, and printed.
type opsCRUD[T any] struct {
	list    func(context.Context) ([]T, error)
	show    func(context.Context, string) (T, error)
	put     func(context.Context) (T, error)
	remove  func(context.Context, string) error
	table   func(tw io.Writer, all []T)
	detail  func(w io.Writer, one T)
	deleted string
}

// opsRunCRUD dials central and runs sub (list, show, put or delete) with
// the calls crud makes from the client.
func opsRunCRUD[T any](ctx context.Context, r *opsRun, sub string, operands []string, crud func(*client.Client) opsCRUD[T]) int {
	c, code, ok := r.dial()
	if !ok {
		return code
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	k := crud(c)
	switch sub {
	case "list":
		all, err := k.list(ctx)
		if err != nil {
			return r.failed(err)
		}
		if all == nil {
			all = []T{}
		}
		return r.print(all, func(w io.Writer) {
			tw := opsTable(w)
			k.table(tw, all)
			tw.Flush()
		})
	case "show":
		one, err := k.show(ctx, operands[0])
		if err != nil {
			return r.failed(err)
		}
		return r.print(one, func(w io.Writer) { k.detail(w, one) })
	case "put":
		got, err := k.put(ctx)
		if err != nil {
			return r.failed(err)
		}
		return r.print(got, func(w io.Writer) { k.detail(w, got) })
	default:
		if err := k.remove(ctx, operands[0]); err != nil {
			return r.failed(err)
		}
		return r.done(k.deleted, operands[0])
	}
}

// Users is `outbox users`.
func Users(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("users", usersUsage, args, env, "list", "put", "delete")
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
			return r.usage("--role %q: want viewer, operator or admin", human.Cell(role, 20))
		}
		put.Role = ports.OperatorRole(role)
		pw, err := r.password(operands[0], passwordStdin)
		if err != nil {
			return r.usage("%v", err)
		}
		put.Password = pw
	}
	c, code, ok := r.dial()
	if !ok {
		return code
	}
	defer r.close()
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
			if put.Password == "" && !passwordStdin && !r.stdinTerminal() && errors.Is(err, ports.ErrInvalid) &&
				strings.Contains(err.Error(), "password") {
				// A password piped in without --password-stdin is not read.
				err = fmt.Errorf("%w (standard input is not a terminal, so no password was asked for; give --password-stdin to read it from standard input)", err)
			}
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

// password returns the new password of user: a line of standard input with
// fromStdin, else asked twice on a terminal (empty keeps the current one),
// else none.
func (r *opsRun) password(user string, fromStdin bool) (string, error) {
	if fromStdin {
		b, err := io.ReadAll(io.LimitReader(r.stdin, 4<<10))
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		pw, _, _ := strings.Cut(string(b), "\n")
		pw = strings.TrimSuffix(pw, "\r")
		if pw == "" {
			return "", errors.New("--password-stdin: standard input holds no password")
		}
		return pw, nil
	}
	if !r.stdinTerminal() {
		return "", nil
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
	pw, err := ask(fmt.Sprintf("New password for %s (empty keeps the current one): ", human.Cell(user, 60)))
	if err != nil || pw == "" {
		return "", err
	}
	again, err := ask("Repeat it: ")
	if err != nil {
		return "", err
	}
	if again != pw {
		return "", errors.New("the two passwords differ")
	}
	return pw, nil
}

// stdinTerminal reports whether standard input is a terminal to ask on.
func (r *opsRun) stdinTerminal() bool {
	f, ok := r.stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Tokens is `outbox tokens`.
func Tokens(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("tokens", tokensUsage, args, env, "list", "create", "delete")
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
		return r.usage("--role %q: want viewer, operator or admin", human.Cell(role, 20))
	}
	var expiresAt *time.Time
	if expires != "" {
		ttl, err := opsParseLifetime(expires)
		if err != nil || ttl <= 0 {
			return r.usage("--expires %q: want a lifetime such as 30d or 12h", human.Cell(expires, 20))
		}
		at := time.Now().Add(ttl).UTC().Truncate(time.Second)
		expiresAt = &at
	}
	c, code, ok := r.dial()
	if !ok {
		return code
	}
	defer r.close()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
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
			"(the CLI reads it from OUTBOX_TOKEN or --token-file)")
		return code
	default:
		if err := c.DeleteToken(ctx, operands[0]); err != nil {
			return r.failed(err)
		}
		return r.done("deleted token %s", operands[0])
	}
}

// opsSubcommand splits args into a subcommand among subs and the rest. It
// prints usage for help (exit 0), no subcommand or an unknown one (exit 2);
// ok false says to return code.
func opsSubcommand(group, usage string, args []string, env Env, subs ...string) (sub string, rest []string, code int, ok bool) {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return "", nil, exitUsage, false
	}
	if opsIsHelp(args[0]) {
		fmt.Fprint(env.Stdout, usage)
		return "", nil, exitOK, false
	}
	if !slices.Contains(subs, args[0]) {
		fmt.Fprintf(env.Stderr, "outbox %s: unknown command %q\n\n%s", group, human.Cell(args[0], 40), usage)
		return "", nil, exitUsage, false
	}
	return args[0], args[1:], exitOK, true
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

	clearToken bool            // --token was given a token, not a reference
	noToken    bool            // no token was given: a hint on unauthenticated
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

// parse parses args, flags and operands in any order ("--" ends the flags).
// ok false says to return code.
func (r *opsRun) parse(args []string) (operands []string, code int, ok bool) {
	for {
		if err := r.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := r.fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			operands = append(operands, rest...)
			break
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
	if r.clearToken {
		return nil, r.usage("--token takes a reference (env:NAME or file:/path), never the token itself: " +
			"it would show in the process list and the shell's history; or set OUTBOX_TOKEN, or give --token-file"), false
	}
	if r.timeout <= 0 {
		return nil, r.usage("--timeout must be positive"), false
	}
	return operands, exitOK, true
}

// usage reports bad usage and returns exitUsage.
func (r *opsRun) usage(format string, args ...any) int {
	fmt.Fprintf(r.stderr, "%s: %s\n", r.name, fmt.Sprintf(format, args...))
	return exitUsage
}

// failed reports a failed call and returns exitFailure.
func (r *opsRun) failed(err error) int {
	fmt.Fprintf(r.stderr, "%s: %v\n", r.name, err)
	if errors.Is(err, ports.ErrUnauthenticated) {
		switch {
		case r.loginHint != "":
			fmt.Fprintln(r.stderr, r.loginHint)
		case r.noToken:
			fmt.Fprintln(r.stderr, "no API token was given: run outbox login, set OUTBOX_TOKEN or give --token-file")
		case r.fromLogin:
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
// login outbox login keeps; ok false says to return code.
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
	r.noToken = token == ""
	if r.transport, err = r.env.httpTransport(r.server, r.ca); err != nil {
		return nil, r.usage("%v", err), false
	}
	if token != "" {
		opsWarnClear(r.stderr, r.name, r.server, "the API token goes")
	}
	c, err = client.New(r.server, token, client.WithHTTPClient(&http.Client{Transport: r.transport}),
		client.WithUserAgent(r.env.userAgent()))
	if err != nil {
		return nil, r.usage("--server: %v", err), false
	}
	return c, exitOK, true
}

// close releases the connections dial opened.
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
		r.loginHint = fmt.Sprintf("outbox login logged in to %s, not %s: run outbox login --server %s", saved.Server, r.server, r.server)
		return ""
	case !time.Now().Before(saved.ExpiresAt):
		r.loginHint = fmt.Sprintf("the login to %s expired at %s: run outbox login again", saved.Server,
			saved.ExpiresAt.In(r.loc).Format("2006-01-02 15:04 MST"))
		return ""
	}
	r.fromLogin = true
	return saved.Token
}

// token returns the API token: from --token-file, --token's reference, or
// OUTBOX_TOKEN (a token or a reference); "" when none is given. Errors name
// the file or variable, never a value.
func (r *opsRun) token() (string, error) {
	ref, from := r.tokenRef, "--token"
	switch {
	case r.tokenFile != "" && r.tokenRef != "":
		return "", errors.New("give --token-file or --token, not both")
	case r.tokenFile != "":
		ref, from = "file:"+r.tokenFile, "--token-file"
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

// print writes v as indented JSON with --json, else the table.
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

// opsFilterFlags are the filter flags of notifications list, count, retry
// and discard.
type opsFilterFlags struct {
	status                                                  repeated
	typ, site, list, from, to, updatedFrom, updatedTo, word string
	stuck                                                   bool
}

func (f *opsFilterFlags) define(fs *flag.FlagSet) {
	fs.Var(&f.status, "status", "only this `status` (Pending, Retrying, Delivered, Parked, Discarded); repeat or comma-separate")
	fs.StringVar(&f.typ, "type", "", "only this channel `type`")
	fs.StringVar(&f.site, "site", "", "only from this source `site`")
	fs.StringVar(&f.list, "list", "", "only to this `list`")
	fs.StringVar(&f.from, "from", "", "created at or after `time`")
	fs.StringVar(&f.to, "to", "", "created before `time`")
	fs.StringVar(&f.updatedFrom, "updated-from", "", "changed at or after `time`")
	fs.StringVar(&f.updatedTo, "updated-to", "", "changed before `time`")
	fs.BoolVar(&f.stuck, "stuck", false, "only stuck notifications")
	fs.StringVar(&f.word, "q", "", "the subject contains `word` (any letter case)")
}

// filter is the flags as an API filter; zone-less times are read in loc
// and durations count back from now.
func (f *opsFilterFlags) filter(now time.Time, loc *time.Location) (api.Filter, error) {
	out := api.Filter{Type: strings.TrimSpace(f.typ), Site: strings.TrimSpace(f.site),
		List: strings.TrimSpace(f.list), Q: strings.TrimSpace(f.word), Stuck: f.stuck}
	for _, raw := range f.status {
		for s := range strings.SplitSeq(raw, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			st, ok := api.ParseStatus(s)
			if !ok {
				return api.Filter{}, fmt.Errorf("--status: unknown status %q (want Pending, Retrying, Delivered, Parked or Discarded)", human.Cell(s, 40))
			}
			if !slices.Contains(out.Status, st) {
				out.Status = append(out.Status, st)
			}
		}
	}
	for _, t := range []struct {
		flag string
		raw  string
		dst  **time.Time
	}{{"--from", f.from, &out.From}, {"--to", f.to, &out.To}, {"--updated-from", f.updatedFrom, &out.UpdatedFrom}, {"--updated-to", f.updatedTo, &out.UpdatedTo}} {
		v, err := opsParseTime(t.raw, now, loc)
		if err != nil {
			return api.Filter{}, fmt.Errorf("%s: %w", t.flag, err)
		}
		*t.dst = v
	}
	return out, nil
}

// opsTimeLayouts are the zone-less forms of a time flag, read in the
// display zone.
var opsTimeLayouts = []string{"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"}

// opsParseTime reads a time flag: RFC 3339, a zone-less date or datetime in
// loc, or a duration meaning that long before now. "" is nil.
func opsParseTime(s string, now time.Time, loc *time.Location) (*time.Time, error) {
	if s = strings.TrimSpace(s); s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		t = t.UTC()
		return &t, nil
	}
	for _, layout := range opsTimeLayouts {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		t := now.Add(-d).UTC()
		return &t, nil
	}
	return nil, fmt.Errorf("%q is not a time: give RFC 3339 (2026-01-02T15:04:05Z), a local date or datetime (2026-01-02, 2026-01-02T15:04) or how long ago (90m, 24h)", human.Cell(s, 40))
}

// opsReadJSON decodes one JSON value from a file (- for in), refusing
// unknown fields so that a misspelt one is not silently dropped.
func opsReadJSON(path string, in io.Reader, v any) error {
	var r io.Reader
	if path == "-" {
		r = in
	} else {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("--file: %w", err)
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(io.LimitReader(r, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("--file %s: %w", path, err)
	}
	if dec.More() {
		return fmt.Errorf("--file %s: more than one JSON value", path)
	}
	return nil
}

// opsPrintDetail writes one notification and its history.
func opsPrintDetail(w io.Writer, d api.Detail, loc *time.Location) {
	tw := opsTable(w)
	opsKV(tw, "id:", human.Cell(d.ID, 200))
	opsKV(tw, "status:", opsStatus(d.Status, d.Stuck))
	opsKV(tw, "type:", human.Cell(d.Type, 200))
	opsKV(tw, "list:", human.Cell(d.List, 200))
	opsKV(tw, "subject:", human.Cell(d.Subject, 1000))
	opsKV(tw, "priority:", strconv.Itoa(d.Priority))
	opsKV(tw, "retries:", strconv.Itoa(d.RetryCount))
	opsKV(tw, "last error:", human.Cell(d.LastError, 1000))
	opsKV(tw, "targets:", human.Cell(strings.Join(d.ResolvedTargets, ", "), 1000))
	opsKV(tw, "type data:", human.Cell(string(d.TypeData), 1000))
	opsKV(tw, "site:", human.Cell(d.SourceSite, 200))
	opsKV(tw, "instance:", human.Cell(d.SourceInstance, 200))
	opsKV(tw, "script:", human.Cell(d.SourceScript, 200))
	opsKV(tw, "execution:", human.Cell(d.ExecutionID, 200))
	opsKV(tw, "parent execution:", human.Cell(d.ParentExecutionID, 200))
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"enqueued at site:", d.SiteEnqueuedAt}, {"created:", d.CreatedAt}, {"updated:", d.UpdatedAt},
		{"last attempt:", d.LastAttemptAt}, {"next attempt:", d.NextAttemptAt}, {"delivered:", d.DeliveredAt},
		{"expires:", d.ExpiresAt}} {
		opsKV(tw, t.k, opsTime(t.v, loc))
	}
	tw.Flush()
	if len(d.History) > 0 {
		fmt.Fprintln(w, "\nhistory:")
		tw = opsTable(w)
		fmt.Fprintln(tw, "AT\tKIND\tACTOR\tOUTCOME\tSTATUS\tDURATION\tERROR")
		for _, h := range d.History {
			dur := ""
			if h.DurationSeconds > 0 {
				dur = human.Duration(human.Seconds(h.DurationSeconds))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", opsTime(&h.At, loc), human.Cell(string(h.Kind), 20),
				human.Cell(h.Actor, 60), human.Cell(string(h.Outcome), 20), human.Cell(string(h.Status), 20), dur,
				human.Cell(h.Error, 200))
		}
		tw.Flush()
	}
	if d.Body != "" {
		fmt.Fprintf(w, "\nbody:\n%s\n", human.Text(d.Body))
	}
}

func opsPrintList(w io.Writer, l api.List) {
	tw := opsTable(w)
	fmt.Fprintf(tw, "name:\t%s\ntype:\t%s\ntargets:\t%d\n", human.Cell(l.Name, 200), human.Cell(l.Type, 200), len(l.Targets))
	tw.Flush()
	for _, t := range l.Targets {
		fmt.Fprintf(w, "  %s\n", human.Cell(t, 1000))
	}
}

func opsPrintChannel(w io.Writer, ch api.Channel) {
	tw := opsTable(w)
	fmt.Fprintf(tw, "type:\t%s\n", human.Cell(ch.Type, 200))
	fmt.Fprintf(tw, "backoff:\t%s\n", opsBackoff(ch.Retry.Backoff))
	fmt.Fprintf(tw, "max retries:\t%s\n", opsDefault(ch.Retry.MaxRetries))
	fmt.Fprintf(tw, "interval:\t%s\n", opsSecondsOrDefault(ch.Retry.IntervalSeconds))
	fmt.Fprintf(tw, "max interval:\t%s\n", opsSecondsOrDefault(ch.Retry.MaxIntervalSeconds))
	fmt.Fprintf(tw, "rate limit:\t%s\n", opsRate(ch.RateLimit))
	fmt.Fprintf(tw, "settings:\t%d\n", len(ch.Settings))
	tw.Flush()
	tw = opsTable(w)
	for _, k := range opsKeys(ch.Settings) {
		fmt.Fprintf(tw, "  %s\t= %s\n", human.Cell(k, 100), human.Cell(ch.Settings[k], 1000))
	}
	tw.Flush()
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

func opsStatus(s ports.Status, stuck bool) string {
	out := human.Cell(string(s), 20)
	if stuck {
		out += " (stuck)"
	}
	return out
}

// opsTime is t in loc, readable; "-" for none.
func opsTime(t *time.Time, loc *time.Location) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.In(loc).Format("2006-01-02 15:04:05")
}

// opsAge is an age in seconds, humanized; "-" for none.
func opsAge(s float64) string {
	if s <= 0 {
		return "-"
	}
	return human.Duration(human.Seconds(s))
}

func opsSecondsOrDefault(s float64) string {
	if s <= 0 {
		return "default"
	}
	return human.Duration(human.Seconds(s))
}

func opsDefault(n int) string {
	if n <= 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func opsBackoff(b ports.Backoff) string {
	if b == "" {
		return string(ports.BackoffFixed)
	}
	return human.Cell(string(b), 20)
}

func opsRate(r float64) string {
	if r <= 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + "/s"
}

func opsKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// opsCellOr is opsCell, or "-" for an empty s.
func opsCellOr(s string, max int) string {
	if s == "" {
		return "-"
	}
	return human.Cell(s, max)
}

func opsPast(verb string) string {
	if verb == "discard" {
		return "discarded"
	}
	return "retried"
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
